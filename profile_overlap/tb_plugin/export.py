"""Plugin data for traces we did not run: `analyze DIR --tensorboard` writes a metrics record and a
timeline.json, the two files the Overlap tab reads from a run folder, into a folder of the
TensorBoard logdir. Torch-free, like `analyze`.

The record is a real `RunMetrics` (so `metrics.load_metrics` reads it): one mode named
FOREIGN_MODE whose `analysis` is the `analyze --json` record; there are no step times, memory or
verification checks for a job we only have traces of.
"""

from __future__ import annotations

from pathlib import Path

from profile_overlap.analysis.record import timeline_of, traced_record
from profile_overlap.analysis.world.cross_rank import TraceAnalysis
from profile_overlap.core.errors import UserError
from profile_overlap.core.files import METRICS_JSON, TIMELINE_JSON
from profile_overlap.record.metrics import FOLDER, FOLDER_MODE, Env, JobFacts, RankEnv, RunMetrics, StepTimes

FOREIGN_MODE = FOLDER_MODE
"""The one mode of a record written for foreign traces (our runs have sequential / split)."""


def plugin_metrics(result: TraceAnalysis, *, out_dir: Path) -> RunMetrics:
    """The metrics record of foreign traces: their analysis and nothing we cannot know."""
    facts = JobFacts(
        kind=FOLDER,
        source=result.source,
        trace_files=sum(len(r.files) for r in result.ranks),
        profiled_steps=max((len(r.steps) for r in result.ranks), default=0),
        profiled_ranks=tuple(sorted(r.rank for r in result.ranks)),
    )
    return traced_record(
        result,
        mode=FOREIGN_MODE,
        step_time=StepTimes.from_times([], method="none (traces only)"),
        trace_dir=result.source,
        facts=facts,
        run_dir=str(out_dir),
        config={"source": result.source, "hta_compat": result.hta_compat},
        env=Env(
            command="profile_overlap analyze --tensorboard",
            backend=next((r.backend for r in result.ranks if r.backend), None),
            device_type=result.ranks[0].device if result.ranks else None,
            world_size=result.world_size,
            ranks=tuple(RankEnv(rank=r.rank, host="?", device=r.device) for r in result.ranks),
        ),
    )


def write_plugin_data(out_dir: Path, result: TraceAnalysis) -> Path:
    """Write out_dir/metrics.json and out_dir/timeline.json (atomically) for the Overlap tab;
    returns out_dir. `tensorboard --logdir` any folder above out_dir then shows it."""
    out_dir = Path(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        plugin_metrics(result, out_dir=out_dir).write(out_dir / METRICS_JSON)
        timeline_of({FOREIGN_MODE: result}).write(out_dir / TIMELINE_JSON)
    except OSError as err:
        raise UserError(
            f"cannot write the TensorBoard data to {out_dir}: {err.strerror}; pick a writable folder with --tensorboard OUT"
        ) from None
    return out_dir
