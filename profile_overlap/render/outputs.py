"""What rank 0 renders at the end of a run, from the finished run folder (metrics.json,
timeline.json, traces). Renderers read the record; they never recompute it."""

from __future__ import annotations

from pathlib import Path

from profile_overlap.record.metrics import RunMetrics
from profile_overlap.record.timeline import Timeline
from profile_overlap.render import tensorboard, write


def render_all(run_dir: Path, metrics: RunMetrics, timeline: Timeline | None) -> None:
    """Called once on rank 0 after metrics.json and timeline.json (None: none written) are written,
    with the record and timeline it wrote: nothing is read back."""
    tensorboard.write_run(run_dir, metrics, timeline)
    # report.html / .md / .json and timeline.png (beside report.md); status.json still says running
    write.write(run_dir, metrics, timeline=timeline)
