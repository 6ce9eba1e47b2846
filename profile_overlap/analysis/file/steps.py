"""A GPU trace's step windows on the device (docs/metrics.md "Per profiler step").

On GPU the CPU runs ahead: step N's kernels run after its `ProfilerStep#N` range has closed, so
the CPU window holds the tail of step N-1 and misses the end of step N. Each kernel therefore
belongs to the step whose `ProfilerStep#N` range (on the main thread) was open when the CPU
launched it (its runtime call, e.g. cudaLaunchKernel, linked by `correlation`; from any thread:
autograd's own thread launches the backward's kernels), as Holistic Trace Analysis's iteration
column assigns them. A step's device window runs from the start of the first kernel it launched
to the end of the last one. Where a step's window would begin before the previous step's has
ended, it begins at that end instead: the windows never overlap, so the time they share counts
once, in the earlier step, and the steps' union is the same as that of the raw windows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from profile_overlap.core import intervals as iv


@dataclass(frozen=True, eq=False)
class StepTable:
    """A rank's profiled steps, one row per `ProfilerStep#N` window (in the --steps window): its
    number and [start_us, end_us), columns of equal length."""

    num: np.ndarray
    start_us: np.ndarray
    end_us: np.ndarray

    @property
    def size(self) -> int:
        return int(self.num.size)

    def rows(self) -> list[tuple[int, float, float]]:
        """(step, start_us, end_us) per step, as Python numbers."""
        return list(zip(self.num.tolist(), self.start_us.tolist(), self.end_us.tolist()))

    def union(self) -> iv.Union:
        """The time the steps cover."""
        return iv.union(self.start_us, self.end_us)


def step_of_launch(cpu_start: np.ndarray, cpu_end: np.ndarray, launch: np.ndarray) -> np.ndarray:
    """Per launch, the index of the step range [cpu_start, cpu_end) holding it (-1: none, or no
    launch known: NaN). The ranges are a main thread's `ProfilerStep`s: disjoint."""
    order = cpu_start.argsort(kind="stable")
    starts = cpu_start[order]
    i = starts.searchsorted(launch, side="right") - 1  # NaN sorts past every start
    known = ~np.isnan(launch) & (i >= 0)
    inside = np.zeros(launch.size, dtype=bool)
    inside[known] = launch[known] < cpu_end[order][i[known]]
    return np.where(inside, order[np.maximum(i, 0)], -1)


def device_windows(cpu_start: np.ndarray, cpu_end: np.ndarray, kernels: tuple[np.ndarray, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) per step, in the order of cpu_start: each step's device window (module doc).
    kernels: (launch, start, end) of the kernels that count (communication and compute). A step
    that launched none gets an empty window at its CPU start, or at the previous window's end if
    later. Without any known launch (a trace without runtime events) the CPU windows stay."""
    launch, start, end = kernels
    if not cpu_start.size or not (~np.isnan(launch)).any():
        return cpu_start, cpu_end
    first = np.full(cpu_start.size, np.inf)
    last = np.full(cpu_start.size, -np.inf)
    order = cpu_start.argsort(kind="stable")
    if in_launch_order(launch) and not (np.isnan(cpu_start).any() or np.isnan(cpu_end).any()):
        # Launches in order (events._by_launch): the kernels step_of_launch gives a step are one slice,
        # those launched from its start to its end or to the next step's start, whichever comes first.
        # No per-kernel temporaries (at 1 GB they were the peak of reading the file).
        starts = cpu_start[order]
        upto = np.minimum(cpu_end[order], np.append(starts[1:], np.inf))
        for k, a, b in zip(order.tolist(), launch.searchsorted(starts).tolist(), launch.searchsorted(upto).tolist()):
            if b > a:
                first[k], last[k] = start[a:b].min(), end[a:b].max()
    else:
        step = step_of_launch(cpu_start, cpu_end, launch)
        mine = step >= 0
        np.minimum.at(first, step[mine], start[mine])
        np.maximum.at(last, step[mine], end[mine])
    lo, hi = np.empty(cpu_start.size), np.empty(cpu_start.size)
    prev_end = -np.inf
    for k in order.tolist():
        a, b = (float(first[k]), float(last[k])) if np.isfinite(first[k]) else (float(cpu_start[k]),) * 2
        lo[k] = max(a, prev_end)
        hi[k] = max(b, lo[k])
        prev_end = hi[k]
    return lo, hi


def in_launch_order(launch: np.ndarray) -> bool:
    """Whether the launches are all known (no NaN) and ascending (events._by_launch gives them so)."""
    return not np.isnan(launch).any() and bool((launch[1:] >= launch[:-1]).all())
