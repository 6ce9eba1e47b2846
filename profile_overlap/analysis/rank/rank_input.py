"""A rank's input to the analysis: which rank a set of trace files is (and how we know), and
which of its ProfilerSteps --steps keeps."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from profile_overlap.analysis.file.events import FileEvents
from profile_overlap.core.errors import UserError


def rank_of(files: Sequence[FileEvents]) -> tuple[int, list[str]]:
    """The rank of successive profiler spans of one worker (disjoint in time), with notes on where it came from."""
    rank = files[0].rank
    assert all(f.rank == rank for f in files)
    for a, b in zip(files, files[1:]):
        if b.t_min < a.t_max:
            raise UserError(
                f"{a.path} and {b.path} both claim rank {rank} and cover the same time, so they are not "
                "successive profiler spans of one worker; remove the duplicate or analyze each run's folder separately"
            )
    if rank is None:
        assert len(files) == 1
        return 0, [f"{files[0].path}: no distributedInfo.rank and no number in the file name; taken as rank 0"]
    if files[0].rank_source == "file name":
        return rank, [f"rank {rank} taken from the file name {Path(files[0].path).name} (the trace has no distributedInfo.rank)"]
    return rank, []


def selected_steps(step_num: np.ndarray, steps: tuple[int | None, int | None], *, rank: int) -> np.ndarray:
    """Which ProfilerSteps --steps A:B keeps (A <= step < B; an open end keeps all that side)."""
    lo, hi = steps
    sel = np.ones(step_num.size, bool)
    if lo is not None:
        sel &= step_num >= lo
    if hi is not None:
        sel &= step_num < hi
    if not sel.any():
        have = ", ".join(str(n) for n in step_num) or "none"
        raise UserError(
            f"rank {rank} has no ProfilerStep in --steps {lo if lo is not None else ''}:{hi if hi is not None else ''} "
            f"(its steps: {have}); pick steps the traces contain"
        )
    return sel
