"""Synthetic traces with interference planted: the same operators run alone and with a collective in
flight, those beside it `slowdown` longer, so the measured interference is known.

Each profiled step has a forward (OPERATORS once, nothing in flight) and a backward (OPERATORS twice:
the first pass alone, the second with one all_reduce in flight over the whole pass). Durations carry
a seeded jitter of ±`jitter` so medians matter. `write` writes one Kineto trace per rank, CPU-style
(aten operators on the main thread, each with a short operator inside it, gloo work on a worker
thread, the c10d op at the call's issue) or GPU-style (compute kernels on stream 7 each with its
cudaLaunchKernel, the NCCL kernel on stream 20).

Two options plant what the trace does not show plainly. `prefetch`: every step's forward runs beside
an all_gather launched at the end of the step before (the split's prefetch), so the forward is slowed
throughout; step 0's was launched before the profiler started, so the trace has no event of it.
`queued_us` (CPU style): gloo's worker starts the all_reduce that long after its c10d op launched it;
the backward's second pass runs slowed from the launch on. `late_end` (CPU style): DDP's reducer
copies the bucket back (`copy_bucket_to_grad`) when the all_reduce completes, then a third pass runs
alone, but gloo's worker closes its event only after that pass. `scale`: every operator's
duration times it (0.01: calls of about a microsecond).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from causes_traces import PID, _head, _x
from synthetic import write_trace

OPERATORS = (("aten::mm", [[64, 64], [64, 64]], 100.0), ("aten::add", [[64, 64], [64, 64]], 40.0), ("aten::mm", [[32, 64], [64, 64]], 70.0))
"""(name, Input Dims, alone µs): two aten::mm of different shapes are two operators."""
NCCL = {
    "all_reduce": ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "allreduce"),
    "all_gather": ("ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "allgather"),
}
GLOO = {"all_reduce": ("c10d::allreduce_", "gloo:all_reduce"), "all_gather": ("c10d::_allgather_base_", "gloo:all_gather")}
GPU_KERNELS = ("void gemm_64x64_kernel(float*)", "void elementwise_add_kernel(float*)", "void gemm_32x64_kernel(float*)")


def _pass(
    t: float, rng: np.random.Generator, *, factor: float, jitter: float, scale: float = 1.0
) -> tuple[list[tuple[int, float, float]], float]:
    """OPERATORS once from t, 5 µs apart, each `scale` times its alone µs: (operator index, start, end) and where it ended."""
    out = []
    for i, (_, _, us) in enumerate(OPERATORS):
        d = us * scale * factor * (1 + rng.uniform(-jitter, jitter))
        out.append((i, t, t + d))
        t += d + 5
    return out, t


def plan(
    *,
    slowdown: float,
    steps: int = 8,
    jitter: float = 0.02,
    seed: int = 0,
    prefetch: bool = False,
    queued_us: float = 0.0,
    late_end: bool = False,
    scale: float = 1.0,
) -> dict:
    """One rank's steps: {"steps": [(n, start, end)], "phases": [(name, start, end)], "ops": [(i, start,
    end)], "calls": [(kind, issue, start, end)]}; the backward's second pass runs `slowdown` longer, beside
    a call (and with `prefetch`, the forward too)."""
    rng = np.random.default_rng(seed)
    out: dict = {"steps": [], "phases": [], "ops": [], "calls": [], "done": []}
    t = 1000.0
    gather = None  # the all_gather launched at the end of the step before: (issue, start)
    for n in range(steps):
        step_start = t
        fwd, t = _pass(t, rng, factor=1.0 + slowdown if prefetch else 1.0, jitter=jitter, scale=scale)
        if gather is not None:
            out["calls"].append(("all_gather", *gather, t + 5))
        out["phases"].append(("forward", step_start, t))
        bwd_start = t + 5
        first, t = _pass(bwd_start, rng, factor=1.0, jitter=jitter, scale=scale)
        issue = t
        second, t = _pass(t + 10, rng, factor=1.0 + slowdown, jitter=jitter, scale=scale)
        end = recorded = t + 20  # in flight over the whole second pass
        if late_end:  # DDP's reducer has waited for the call: it copies the bucket back, then a pass runs alone
            out["done"].append(end)
            third, t = _pass(end + 10, rng, factor=1.0, jitter=jitter, scale=scale)
            out["ops"] += third
            recorded = t + 20  # gloo's worker closes its event only now
        out["calls"].append(("all_reduce", issue, issue + 2 + queued_us, recorded))
        t += 40
        if prefetch:
            gather = (t, t + 2)
        out["phases"].append(("backward", bwd_start, t))
        out["ops"] += fwd + first + second
        t += 30
        out["steps"].append((n, step_start - 10, t))
        t += 20
    return out


def cpu_doc(p: dict, *, rank: int, world: int) -> dict:
    events = [{"ph": "M", "name": "thread_name", "pid": PID, "tid": PID, "args": {"name": "thread 100 (python)"}}]
    events += [_x("user_annotation", f"ProfilerStep#{n}", PID, s, e - s) for n, s, e in p["steps"]]
    events += [_x("user_annotation", name, PID, s, e - s) for name, s, e in p["phases"]]
    for i, s, e in p["ops"]:
        name, dims, _ = OPERATORS[i]
        events.append(_x("cpu_op", name, PID, s, e - s, {"Input Dims": dims, "Input type": ["float", "float"]}))
        events.append(_x("cpu_op", "aten::as_strided", PID, s + 1, 2, {"Input Dims": [[64]]}))  # inside it, not counted
    events += [_x("cpu_op", "torch.distributed.ddp.reducer::copy_bucket_to_grad", PID, d, 3, {"Input Dims": [[1024]]}) for d in p["done"]]
    for kind, issue, s, e in p["calls"]:
        sizes = {"Input Dims": [[1024]], "Input type": ["float"]}
        op, work = GLOO[kind]
        events.append(_x("cpu_op", op, PID, issue, 1, sizes))
        events.append(_x("user_annotation", work, PID + 20, s, e - s, sizes))
    return _head(rank, world, "gloo", events)


def gpu_doc(p: dict, *, rank: int, world: int) -> dict:
    events = [{"ph": "M", "name": "thread_name", "pid": PID, "tid": PID, "args": {"name": "thread 100 (python)"}}]
    events += [_x("user_annotation", f"ProfilerStep#{n}", PID, s, e - s) for n, s, e in p["steps"]]
    events += [_x("user_annotation", name, PID, s, e - s) for name, s, e in p["phases"]]
    kernels = [(7, GPU_KERNELS[i], s, e, {}) for i, s, e in p["ops"]]
    comm_args = {"In msg nelems": 1024, "Out msg nelems": 1024, "Group size": world, "dtype": "Float", "Process Group Name": "0"}
    kernels += [(20, NCCL[kind][0], s, e, comm_args | {"Collective name": NCCL[kind][1]}) for kind, _, s, e in p["calls"]]
    for corr, (stream, name, s, e, args) in enumerate(sorted(kernels, key=lambda k: k[2]), start=1):
        events.append(_x("cuda_runtime", "cudaLaunchKernel", PID, s, 0.5, {"correlation": corr, "External id": corr}))
        events.append(
            _x("kernel", name, stream, s, e - s, {"device": 0, "stream": stream, "correlation": corr, "External id": corr} | args, pid=0)
        )
    return _head(rank, world, "nccl", events)


def write(folder: Path, *, slowdown: float, style: str, ranks: int = 2, **kw) -> Path:
    """One trace per rank (rank r's jitter seeded with r), `slowdown` planted in every rank."""
    folder.mkdir(parents=True, exist_ok=True)
    doc = cpu_doc if style == "cpu" else gpu_doc
    for rank in range(ranks):
        write_trace(doc(plan(slowdown=slowdown, seed=rank, **kw), rank=rank, world=ranks), folder / f"rank{rank}.pt.trace.json")
    return folder
