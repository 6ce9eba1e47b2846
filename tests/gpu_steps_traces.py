"""A synthetic GPU-style trace (Kineto Chrome-trace JSON) in which the CPU runs ahead of the GPU,
with the answer per step and per phase known by construction (tests/test_gpu_steps.py).

Step n (n = 1, 2, 3) has its `ProfilerStep#n` range [1000n, 1000n + 1000) on the main thread and,
inside it, `## forward ##` [+10, +300), `## backward ##` [+300, +700) and `## optimizer ##`
[+700, +900). Every kernel starts LEAD = 600 µs after its launch (a cudaLaunchKernel with its
`correlation`), so each step's backward and optimizer kernels run after its CPU range has closed:

    launched by       at (+t0)   kernel (+t0)    stream  in
    main              20         [620, 720)      7       forward
    main              150        [750, 850)      7       forward
    main              305        [905, 910)      7       backward (the gradient seed's fill)
    autograd thread   320        [920, 1070)     7       backward
    autograd thread   480        [1080, 1230)    7       backward
    autograd thread   500        [1100, 1300)    20      backward (DDP's all_reduce)
    main              710        [1310, 1370)    7       optimizer
    main              800        [1400, 1700)    21      optimizer, step 2 only (an all_reduce nobody waits for)

Kineto's device copy of `## backward ##` (gpu_user_annotation) spans only the main thread's fill,
[905, 910), as in real traces. Before step 1, two warmup kernels launched at 700 and 850 run at
[1300, 1400) and [1450, 1550), inside ProfilerStep#1's CPU range but launched by no step.
"""

from __future__ import annotations

from pathlib import Path

from synthetic import write_trace

PID, MAIN, AUTOGRAD = 100, 100, 200
LEAD = 600
STEPS = (1, 2, 3)
COMPUTE = "void at::native::vectorized_elementwise_kernel<4>(float*)"
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
PHASES = (("## forward ##", 10, 300), ("## backward ##", 300, 700), ("## optimizer ##", 700, 900))

# (thread, launch offset, duration, stream, phase) of each step's kernels.
KERNELS = (
    (MAIN, 20, 100, 7, "forward"),
    (MAIN, 150, 100, 7, "forward"),
    (MAIN, 305, 5, 7, "backward"),
    (AUTOGRAD, 320, 150, 7, "backward"),
    (AUTOGRAD, 480, 150, 7, "backward"),
    (AUTOGRAD, 500, 200, 20, "backward"),
    (MAIN, 710, 60, 7, "optimizer"),
)
LATE_ALL_REDUCE = (MAIN, 800, 300, 21, "optimizer")
WARMUP = ((700, 100), (850, 100))  # (launch, duration): launched before ProfilerStep#1


def _x(cat: str, name: str, tid: int, ts: float, dur: float, args: dict | None = None, pid: int = PID) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args or {}}


def doc() -> dict:
    events: list[dict] = [
        {"ph": "M", "name": "thread_name", "pid": PID, "tid": MAIN, "args": {"name": "thread 100 (python)"}},
        {"ph": "M", "name": "thread_name", "pid": PID, "tid": AUTOGRAD, "args": {"name": "thread 200 (pt_autograd_0)"}},
    ]
    corr = iter(range(1, 10_000))

    def kernel(tid: int, launch: int, dur: int, stream: int) -> None:
        c = next(corr)
        events.append(_x("cuda_runtime", "cudaLaunchKernel", tid, launch, 4, {"correlation": c, "External id": c}))
        args = {"device": 0, "stream": stream, "correlation": c, "External id": c}
        if stream != 7:
            args |= {"Collective name": "allreduce", "In msg nelems": 1024, "Out msg nelems": 1024, "Group size": 2, "dtype": "Float"}
        events.append(_x("kernel", NCCL if stream != 7 else COMPUTE, stream, launch + LEAD, dur, args, pid=0))

    for launch, dur in WARMUP:
        kernel(MAIN, launch, dur, 7)
    for n in STEPS:
        t0 = 1000 * n
        events.append(_x("user_annotation", f"ProfilerStep#{n}", MAIN, t0, 1000))
        events += [_x("user_annotation", name, MAIN, t0 + a, b - a) for name, a, b in PHASES]
        events.append(_x("gpu_user_annotation", "## backward ##", 7, t0 + 905, 5, pid=0))
        for tid, at, dur, stream, _ in KERNELS + ((LATE_ALL_REDUCE,) if n == 2 else ()):
            kernel(tid, t0 + at, dur, stream)
    dist = {"backend": "nccl", "rank": 0, "world_size": 2, "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "pg_size": 2}]}
    return {"schemaVersion": 1, "traceEvents": events, "distributedInfo": dist}


def write(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "rank0.pt.trace.json"
    write_trace(doc(), path)
    return path
