"""`explain`: the original demo's worked example, with real tensors and no process group.

Rank r holds 4 consecutive numbers (rank 0: [1, 2, 3, 4], ..., rank 3: [13..16]). The sums are
computed with torch exactly as the collectives define them: all_reduce gives every rank the sum;
reduce_scatter gives rank r the r-th 1/N chunk of the sum; all_gather concatenates the chunks.

SCHEDULES sketches the three modes of `--mode compare` (run/pipelines.py) as text timelines, one
row for compute and one for communication: `explain` prints them and docs/run.md shows them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class WorkedExample:
    """The per-rank inputs and the three collectives' results (torch tensors)."""

    inputs: list
    """Rank r's input X_r: N consecutive numbers."""
    total: Any
    """What all_reduce(SUM) leaves on every rank."""
    shards: list
    """reduce_scatter: rank r keeps chunk r of the sum."""
    gathered: Any
    """The all_gather of the shards, on every rank."""


def worked_example(world_size: int) -> WorkedExample:
    """AllReduce(X) against AllGather(ReduceScatter(X)) over `world_size` ranks."""
    import torch

    inputs = [torch.arange(r * world_size + 1, (r + 1) * world_size + 1, dtype=torch.float32) for r in range(world_size)]
    total = torch.stack(inputs).sum(dim=0)
    shards = list(total.chunk(world_size))
    return WorkedExample(inputs=inputs, total=total, shards=shards, gathered=torch.cat(shards))


# ---------------------------------------------------------------- the three schedules (run/pipelines.py)

SLOT = 4
"""Characters per time slot in a sketch."""
ROWS = ("compute", "comm")
SKETCH_LEGEND = (
    "3 communication units (mlp layers; the transformer's embedding, blocks and head), one step and the next step's "
    "forward: the order of the work, not its duration. Fk, Bk: forward, backward of unit k. Ak: Adam on all of unit k; "
    "ak: Adam on this rank's 1/N shard of it. ARk, RSk: all_reduce, reduce_scatter of unit k's gradient bucket; AGk: "
    "all_gather of its updated shard. `..`: compute waits for communication."
)


@dataclass(frozen=True)
class Schedule:
    """One mode's step as a sketch: per time slot, what compute and communication run."""

    mode: str
    summary: str
    """What the mode does, as run/pipelines.py does it."""
    phases: tuple[tuple[str, int], ...]
    """(phase, first slot): the step's record_function phases, then the next step's forward."""
    compute: str
    """One word per slot, space-separated; `_` is an empty slot."""
    comm: str

    def sketch(self) -> list[str]:
        """The sketch's lines: the phase names above the two rows, each slot SLOT characters wide."""
        assert len(self.compute.split()) == len(self.comm.split()), f"{self.mode}: rows of different lengths"
        width = len("compute") + 2
        header = ""
        for name, slot in self.phases:
            start = width + slot * SLOT
            assert len(header) < start, f"{self.mode}: the phase before {name!r} is too short for its name"
            header = header.ljust(start) + name
        rows = [header]
        for label, text in zip(ROWS, (self.compute, self.comm)):
            cells = ["" if word == "_" else word for word in text.split()]
            rows.append((label.ljust(width) + "".join(c.ljust(SLOT) for c in cells)).rstrip())
        return rows


_PHASES = ("forward", "backward", "optimizer", "next forward")
SCHEDULES = (
    Schedule(
        mode="sequential",
        summary="Backward, then a blocking all_reduce of each unit's gradient bucket, last unit first, so no communication "
        "overlaps; then Adam on all parameters, with the full optimizer state on every rank.",
        phases=tuple(zip(_PHASES, (0, 3, 9, 12))),
        compute="F0 F1 F2 B2 B1 B0 .. .. .. A0 A1 A2 F0 F1 F2",
        comm="_ _ _ _ _ _ AR2 AR1 AR0 _ _ _ _ _ _",
    ),
    Schedule(
        mode="split",
        summary="Each unit's reduce_scatter starts, async, as soon as backward has produced its gradients, and runs under "
        "the backward of the units before it. Then, unit by unit in forward order: wait for its reduce_scatter, Adam on "
        "this rank's 1/N shard, and an async all_gather, which the next forward waits for just before that unit.",
        phases=tuple(zip(_PHASES, (0, 3, 6, 10))),
        compute="F0 F1 F2 B2 B1 B0 .. a0 a1 a2 F0 F1 F2",
        comm="_ _ _ _ RS2 RS1 RS0 _ AG0 AG1 AG2 _ _",
    ),
    Schedule(
        mode="split-blocking",
        summary="The split's collectives and compute, but every collective is waited for as soon as it starts: the same "
        "work, with nothing overlapping.",
        phases=tuple(zip(_PHASES, (0, 3, 9, 15))),
        compute="F0 F1 F2 B2 .. B1 .. B0 .. a0 .. a1 .. a2 .. F0 F1 F2",
        comm="_ _ _ _ RS2 _ RS1 _ RS0 _ AG0 _ AG1 _ AG2 _ _ _",
    ),
)
"""The three schedules of --mode compare, as run/pipelines.py runs them."""
