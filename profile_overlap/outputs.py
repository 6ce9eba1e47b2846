"""What rank 0 renders at the end of a run, from the finished run folder (metrics.json,
timeline.json, traces). Renderers read the record; they never recompute it."""

from __future__ import annotations

from pathlib import Path

from profile_overlap import report, tensorboard, timeline
from profile_overlap.metrics import RunMetrics


def render_all(run_dir: Path, metrics: RunMetrics) -> None:
    """Called once on rank 0 after metrics.json and timeline.json are written."""
    timeline.write_png(run_dir, metrics)
    tensorboard.write_run(run_dir, metrics)
    report.write(run_dir, metrics, check_status=False)  # report.html / .md / .json; status.json still says running
