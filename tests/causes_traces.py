"""Synthetic multi-rank traces for the causes of exposed communication, with the truth computed
on a 1 µs grid.

A `RankPlan` lists one rank's compute intervals, its collective calls (issue, start and end;
the stream or gloo worker each runs on), its ProfilerStep windows and phase windows. `write_plans`
writes one Kineto trace per rank, GPU-style (NCCL kernels on comm streams, compute kernels on
stream 7, a cudaLaunchKernel on the main thread for every kernel, phases on the main thread) or
CPU-style (gloo work on worker threads, the c10d op on the main thread at the call's issue,
operators as compute). `truth` recomputes exposed, wait and transfer per rank and per call by
brute force: every instant of the grid decided on its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from synthetic import write_trace

PID = 100
GPU_NAMES = {"all_reduce": "AllReduce", "reduce_scatter": "ReduceScatter", "all_gather": "AllGather"}
SPELLING = {"all_reduce": "allreduce", "reduce_scatter": "reduce_scatter", "all_gather": "allgather"}
C10D = {"all_reduce": "c10d::allreduce_", "reduce_scatter": "c10d::_reduce_scatter_base_", "all_gather": "c10d::_allgather_base_"}


@dataclass(frozen=True)
class Call:
    """One collective call on one rank (integer µs)."""

    kind: str
    issue: int
    start: int
    end: int
    stream: int = 20
    """GPU: the comm stream; CPU: which gloo worker thread (PID + stream)."""
    nbytes: int = 4096


@dataclass
class RankPlan:
    compute: list[tuple[int, int]]
    calls: list[Call]
    steps: list[tuple[int, int, int]] = field(default_factory=list)
    """(N, start, end) of ProfilerStep#N."""
    phases: list[tuple[str, int, int]] = field(default_factory=list)


def _x(cat, name, tid, ts, dur, args=None, pid=PID):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args or {}}


def _head(rank: int, world: int, backend: str, events: list) -> dict:
    pg = [{"pg_name": "0", "pg_desc": "default_pg", "pg_size": world, "ranks": list(range(world))}]
    return {
        "schemaVersion": 1,
        "traceEvents": events,
        "distributedInfo": {"backend": backend, "rank": rank, "world_size": world, "pg_config": pg},
    }


def _annotations(plan: RankPlan) -> list[dict]:
    out = [_x("user_annotation", f"ProfilerStep#{n}", PID, s, e - s) for n, s, e in plan.steps]
    return out + [_x("user_annotation", name, PID, s, e - s) for name, s, e in plan.phases]


def gpu_doc(plan: RankPlan, *, rank: int, world: int, launches: bool = True) -> dict:
    """GPU-style: with launches=False the trace has no cuda_runtime events at all."""
    events = [{"ph": "M", "name": "thread_name", "pid": PID, "tid": PID, "args": {"name": "thread 100 (python)"}}, *_annotations(plan)]
    corr = 1
    # A kernel belongs to the step and phase whose range was open when it was launched, and runs
    # in the device windows those launches span: so each compute interval is cut at the phase
    # edges and every piece launched as it starts (the CPU never runs ahead here).
    edges = sorted({t for _, s, e in plan.phases for t in (s, e)})
    pieces = [(a, b) for s, e in plan.compute for a, b in zip([s, *[t for t in edges if s < t < e]], [*[t for t in edges if s < t < e], e])]
    kernels = [(7, s, e, None, s) for s, e in pieces] + [(c.stream, c.start, c.end, c, c.issue) for c in plan.calls]
    assert all(s >= launch for _, s, _, _, launch in kernels), "a kernel starts after its launch"
    for stream, s, e, call, launch in kernels:
        args = {"device": 0, "stream": stream, "correlation": corr, "External id": corr}
        if call is None:
            name = "void at::native::vectorized_elementwise_kernel<4>(float*)"
        else:
            name = f"ncclDevKernel_{GPU_NAMES[call.kind]}_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
            n = call.nbytes // 4
            args |= {"Collective name": SPELLING[call.kind], "In msg nelems": n, "Out msg nelems": n, "Group size": world,
                     "dtype": "Float", "Process Group Name": "0"}  # fmt: skip
        if launches:
            events.append(_x("cuda_runtime", "cudaLaunchKernel", PID, launch, 0.5, {"correlation": corr, "External id": corr}))
        events.append(_x("kernel", name, stream, s, e - s, args, pid=0))
        corr += 1
    return _head(rank, world, "nccl", events)


def cpu_doc(plan: RankPlan, *, rank: int, world: int) -> dict:
    """CPU-style: calls must start in the order they were issued (gloo runs work in order)."""
    events = [{"ph": "M", "name": "thread_name", "pid": PID, "tid": PID, "args": {"name": "thread 100 (python)"}}, *_annotations(plan)]
    for s, e in plan.compute:
        events.append(_x("cpu_op", "aten::mm", PID, s, e - s))
    for c in plan.calls:
        sizes = {"Input Dims": [[c.nbytes // 4]], "Input type": ["float"]}
        events.append(_x("cpu_op", C10D[c.kind], PID, c.issue, 1, sizes))
        gloo = "all_gather" if c.kind == "all_gather" else "all_reduce"  # gloo runs reduce_scatter as all_reduce
        events.append(_x("user_annotation", f"gloo:{gloo}", PID + c.stream, c.start, c.end - c.start, sizes))
    return _head(rank, world, "gloo", events)


def write_plans(plans: list[RankPlan], folder: Path, *, style: str = "gpu", launches: bool = True) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for rank, plan in enumerate(plans):
        world = len(plans)
        doc = gpu_doc(plan, rank=rank, world=world, launches=launches) if style == "gpu" else cpu_doc(plan, rank=rank, world=world)
        write_trace(doc, folder / f"rank{rank}.pt.trace.json")
    return folder


@dataclass(frozen=True)
class Truth:
    exposed: dict[int, int]
    wait: dict[int, int]
    transfer: dict[int, int]
    call_wait: dict[int, list[int]]
    """Per rank, per call (in the plan's order, which must be start order) the wait it owns."""
    call_transfer: dict[int, list[int]]


def step_windows(plan: RankPlan, style: str) -> list[tuple[int, int, int]]:
    """(N, start, end) of each step as the analysis measures it. CPU: the ProfilerStep ranges.
    GPU: the span of the kernels launched inside each range (a compute kernel is launched as it
    starts, a call at its issue), a window starting no earlier than the previous one ends, and
    an empty one at the range's start when nothing was launched in it."""
    if style == "cpu":
        return list(plan.steps)
    kernels = [(s, s, e) for s, e in plan.compute] + [(c.issue, c.start, c.end) for c in plan.calls]
    out, prev = [], -(10**9)
    for n, lo, hi in sorted(plan.steps, key=lambda x: x[1]):
        mine = [(s, e) for launch, s, e in kernels if lo <= launch < hi]
        first, last = (min(s for s, _ in mine), max(e for _, e in mine)) if mine else (lo, lo)
        start = max(first, prev)
        prev = max(last, start)
        out.append((n, start, prev))
    return out


def _mask(intervals, horizon: int) -> np.ndarray:
    m = np.zeros(horizon, bool)
    for s, e in intervals:
        m[max(s, 0) : max(min(e, horizon), 0)] = True
    return m


def truth(plans: list[RankPlan], *, style: str = "gpu") -> Truth:
    """Brute force on the grid. Call j of every plan is the same call (matched across ranks);
    ranks share one clock (calls end together, so the estimated offsets are 0)."""
    horizon = 1 + max(max([e for _, e in p.compute] + [c.end for c in p.calls] + [e for _, _, e in p.steps]) for p in plans)
    latest = [max(p.calls[j].start for p in plans) for j in range(len(plans[0].calls))]
    out = Truth({}, {}, {}, {}, {})
    for rank, p in enumerate(plans):
        compute = _mask(p.compute, horizon)
        if style == "cpu":  # an operator that starts inside a c10d op runs inside it: not compute
            c10d = _mask([(c.issue, c.issue + 1) for c in p.calls], horizon)
            compute = _mask([(s, e) for s, e in p.compute if not c10d[s]], horizon) & ~c10d
        window = _mask([(s, e) for _, s, e in step_windows(p, style)], horizon) if p.steps else np.ones(horizon, bool)
        comm = _mask([(c.start, c.end) for c in p.calls], horizon)
        exposed = comm & ~compute & window
        waiting = [_mask([(c.start, min(c.end, latest[j]))], horizon) for j, c in enumerate(p.calls)]
        flight = [_mask([(c.start, c.end)], horizon) for c in p.calls]
        wait = exposed & np.any(waiting, axis=0) if p.calls else exposed & False
        call_wait, call_transfer = [0] * len(p.calls), [0] * len(p.calls)
        for t in np.flatnonzero(exposed):
            if wait[t]:
                call_wait[next(j for j in range(len(p.calls)) if waiting[j][t])] += 1
            else:
                call_transfer[next(j for j in range(len(p.calls)) if flight[j][t])] += 1
        out.exposed[rank], out.wait[rank] = int(exposed.sum()), int(wait.sum())
        out.transfer[rank] = int((exposed & ~wait).sum())
        out.call_wait[rank], out.call_transfer[rank] = call_wait, call_transfer
    return out
