"""One rank's analysis of one profiler cycle -> TensorBoard scalars, appended to that rank's event
file in `<job>/rank<r>/` with the global training step (the ProfilerStep number) on the x axis, so
successive cycles draw a curve. Every rank is its own TensorBoard run with the same tags, so
TensorBoard draws one line per rank on each chart.

    overlap/{overlap_pct, exposed_comm_ms, comm_ms, compute_ms, step_ms}   per profiled step
    phase/<phase>/{hidden_ms, exposed_comm_ms, comm_ms, compute_ms, window_ms}   per step, when the trace has phases
    busbw_gbps/<kind>                                                      per cycle, at its last step
    exposed/{wait_ms, transfer_ms}         rank 0 only, per cycle of the live record, at its last step:
                                           why exposed, rank mean per profiled step (all ranks' traces)

The numbers are the analysis's per-step numbers (docs/metrics.md "Per profiler step" and "Phases"); the
phase tags are those of the run's own TensorBoard files. Written with tensorboard's own event
writer: no torch, no TensorFlow.
"""

from __future__ import annotations

import time
from pathlib import Path

from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from profile_overlap.analysis.rank.per_rank import RankAnalysis
from profile_overlap.record.exposed import Exposed

STEP_NUMBERS = {
    "overlap_pct": "overlap_pct",
    "exposed_comm_ms": "exposed_comm_us",
    "comm_ms": "comm_us",
    "compute_ms": "compute_us",
    "step_ms": "step_us",
}
"""overlap/<name> -> the StepMetrics field it shows (µs fields / 1000)."""
PHASE_NUMBERS = {
    "hidden_ms": "overlap_us",
    "exposed_comm_ms": "exposed_comm_us",
    "comm_ms": "comm_us",
    "compute_ms": "compute_us",
    "window_ms": "window_us",
}
"""phase/<phase>/<name> -> the PhaseRecord field it shows / 1000 (as measured: the analysis's own)."""


def scalars(analysis: RankAnalysis) -> list[tuple[str, float, int]]:
    """(tag, value, global step) of one cycle's trace."""
    out = []
    for step in analysis.steps:
        for name, field in STEP_NUMBERS.items():
            value = getattr(step, field)
            if value is not None:
                out.append((f"overlap/{name}", value if name == "overlap_pct" else value / 1e3, step.step))
        for phase in step.phases:
            for name, field in PHASE_NUMBERS.items():
                out.append((f"phase/{phase.phase}/{name}", getattr(phase, field) / 1e3, step.step))
    if analysis.steps:
        last = max(s.step for s in analysis.steps)
        out += [(f"busbw_gbps/{c.kind}", c.busbw_gbps, last) for c in analysis.collectives if c.busbw_gbps is not None]
    return out


def exposed_scalars(exposed: Exposed | None, *, num_steps: int, step: int) -> list[tuple[str, float, int]]:
    """(tag, value, global step) of the wait/transfer split of one cycle across ranks (empty
    when the split is unknown, e.g. one rank)."""
    wait, transfer = exposed.per_rank_step_ms(num_steps) if exposed is not None else (None, None)
    return [] if wait is None or transfer is None else [("exposed/wait_ms", wait, step), ("exposed/transfer_ms", transfer, step)]


class RankEvents:
    """The event file of one rank, open for the worker's life; each cycle appends and flushes."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self._writer = EventFileWriter(str(folder))

    def append(self, analysis: RankAnalysis) -> int:
        """Append one cycle's scalars; returns how many."""
        return self.append_points(scalars(analysis))

    def append_points(self, points: list[tuple[str, float, int]]) -> int:
        """Append (tag, value, global step) points; returns how many."""
        wall = time.time()
        for tag, value, step in points:
            summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=float(value))])
            self._writer.add_event(event_pb2.Event(wall_time=wall, step=step, summary=summary))
        self._writer.flush()
        return len(points)

    def close(self) -> None:
        self._writer.close()
