"""The discrete-event replay behind `whatif`: a pure function from a small task graph (durations
in) to start and end times (times out), and the overlap numbers of one replayed step.

One rank runs two streams: `compute` (the training step's operators, in program order) and `comm`
(its collectives, in issue order, one at a time). A task starts when its stream is free and every
task it depends on has ended; that is where the pipeline waits. Tasks are listed in an order where
every dependency comes first, and each stream runs its tasks in list order, so one pass over the
list schedules them (a max-plus recurrence: start = max(stream free, ends of the dependencies)).

    tasks = [Task("F0", COMPUTE, 2.0), Task("RS0", COMM, 3.0, deps=(0,)), Task("F1", COMPUTE, 1.0)]
    replay(tasks)  # -> ((0, 2), (2, 5), (2, 3))

Overlap is not free: a compute task with `slowdown` s takes (1 + s) of its alone time for the part
of it that runs while the comm stream is busy (definitions: `interference_used`). One pass still
suffices because every collective depends on the compute task listed just before it, so the
collectives a compute task runs beside are all placed when it is (checked).

No trace, torch or file is involved: the exact tests build graphs by hand.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

COMPUTE = "compute"
COMM = "comm"


@dataclass(frozen=True)
class Task:
    """One piece of work on one stream."""

    name: str
    stream: str
    """COMPUTE or COMM."""
    dur_us: float
    deps: tuple[int, ...] = ()
    """Indices of earlier tasks that must end before this one starts."""
    step: int = 0
    """Which replayed training step the task belongs to."""
    slowdown: float = 0.0
    """Compute: while communication runs beside it, its work goes 1 / (1 + slowdown) as fast."""


@dataclass(frozen=True)
class ReplayedStep:
    """One replayed step: its length and the overlap numbers inside it (docs/metrics.md "What if")."""

    step_us: float
    """Start of this step's first compute task to the start of the next step's: the period of
    back-to-back steps."""
    comm_us: float
    """Length of the union of the collectives' running time inside the step."""
    compute_us: float
    overlap_us: float
    """|∪comm ∩ ∪compute| inside the step."""

    @property
    def exposed_comm_us(self) -> float:
        return self.comm_us - self.overlap_us

    @property
    def overlap_pct(self) -> float | None:
        return 100 * self.overlap_us / self.comm_us if self.comm_us > 0 else None


def replay(tasks: Sequence[Task]) -> tuple[tuple[float, float], ...]:
    """(start, end) of every task: each stream runs its tasks one at a time in list order, and a
    task waits for the end of each of its dependencies."""
    free: dict[str, float] = {}
    times: list[tuple[float, float]] = []
    comm_starts: list[float] = []
    comm_ends: list[float] = []
    slowed_until = 0.0  # the end of the last compute task that communication slows
    for i, task in enumerate(tasks):
        assert all(0 <= d < i for d in task.deps), f"task {i} ({task.name}) depends on a later task"
        assert task.dur_us >= 0, f"task {task.name} has a negative duration"
        start = max([free.get(task.stream, 0.0), *(times[d][1] for d in task.deps)])
        if task.stream == COMPUTE and task.slowdown:
            end = _slowed_end(start, task.dur_us, task.slowdown, comm_starts, comm_ends)
            slowed_until = end
        else:
            end = start + task.dur_us
        if task.stream == COMM:
            assert start >= slowed_until - 1e-9, f"{task.name} starts under slowed compute listed before it"
            comm_starts.append(start)
            comm_ends.append(end)
        times.append((start, end))
        free[task.stream] = end
    return tuple(times)


def _slowed_end(start: float, work_us: float, slowdown: float, comm_starts: list[float], comm_ends: list[float]) -> float:
    """When `work_us` of compute started at `start` ends: at full speed outside the collectives'
    running time (disjoint, in order: one comm stream), 1 / (1 + slowdown) as fast inside it."""
    t, left = start, work_us
    for a, b in zip(comm_starts[bisect_right(comm_ends, start) :], comm_ends[bisect_right(comm_ends, start) :]):
        if a > t:
            if left <= a - t:
                return t + left
            left -= a - t
            t = a
        room = (b - t) / (1 + slowdown)
        if left <= room:
            return t + left * (1 + slowdown)
        left -= room
        t = b
    return t + left


def _union(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for a, b in sorted(s for s in spans if s[1] > s[0]):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _length(spans: list[tuple[float, float]]) -> float:
    return sum(b - a for a, b in spans)


def _intersect(x: list[tuple[float, float]], y: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out = []
    i = j = 0
    while i < len(x) and j < len(y):
        a, b = max(x[i][0], y[j][0]), min(x[i][1], y[j][1])
        if b > a:
            out.append((a, b))
        if x[i][1] < y[j][1]:
            i += 1
        else:
            j += 1
    return out


def step_times(tasks: Sequence[Task], times: Sequence[tuple[float, float]], *, step: int) -> ReplayedStep:
    """The overlap numbers of replayed step `step`: its window runs from the start of its first
    compute task to the start of step + 1's (which must be in `tasks`); every task's running time
    is clipped to the window, whatever step issued it."""
    starts = {}
    for task, (start, _end) in zip(tasks, times):
        if task.stream == COMPUTE and task.step not in starts:
            starts[task.step] = start
    lo, hi = starts[step], starts[step + 1]

    def clipped(stream: str) -> list[tuple[float, float]]:
        return _union([(max(a, lo), min(b, hi)) for t, (a, b) in zip(tasks, times) if t.stream == stream and b > lo and a < hi])

    comm, compute = clipped(COMM), clipped(COMPUTE)
    return ReplayedStep(step_us=hi - lo, comm_us=_length(comm), compute_us=_length(compute), overlap_us=_length(_intersect(comm, compute)))
