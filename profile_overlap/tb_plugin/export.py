"""Plugin data for traces we did not run: `analyze DIR --tensorboard` writes a metrics record and a
timeline.json, the two files the Overlap tab reads from a run folder, into a folder of the
TensorBoard logdir. Torch-free, like `analyze`.

The record is a real `RunMetrics` (so `metrics.load_metrics` reads it), made by
analysis.record.folder_metrics: one mode named FOREIGN_MODE whose `analysis` is the `analyze --json`
record; there are no step times, memory or verification checks for a job we only have traces of.
"""

from __future__ import annotations

from pathlib import Path

from profile_overlap.core.errors import UserError
from profile_overlap.core.files import METRICS_JSON, TIMELINE_JSON
from profile_overlap.record.metrics import FOLDER_MODE, RunMetrics
from profile_overlap.record.timeline import Timeline

FOREIGN_MODE = FOLDER_MODE
"""The one mode of a record written for foreign traces (our runs have sequential / split)."""


def write_plugin_data(out_dir: Path, metrics: RunMetrics, timeline: Timeline) -> Path:
    """Write out_dir/metrics.json and out_dir/timeline.json (atomically) for the Overlap tab;
    returns out_dir. `tensorboard --logdir` any folder above out_dir then shows it."""
    out_dir = Path(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        metrics.write(out_dir / METRICS_JSON)
        timeline.write(out_dir / TIMELINE_JSON)
    except OSError as err:
        raise UserError(
            f"cannot write the TensorBoard data to {out_dir}: {err.strerror}; pick a writable folder with --tensorboard OUT"
        ) from None
    return out_dir
