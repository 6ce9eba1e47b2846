"""Synthetic Kineto traces with a known answer, for the property tests and the benchmark.

`gpu_trace` turns explicit kernel intervals into a trace document (with the launching runtime
calls, correlations and ProfilerStep annotations a real trace has). `write_large_trace` streams a
realistic trace of any size to disk, laid out so that its metrics are known by construction.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson

NCCL_KERNEL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
COMPUTE_KERNEL = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>(int, float*)"
GEMM_KERNEL = "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel"
MEMCPY = "Memcpy DtoD (Device -> Device)"
PID = 4242


def gpu_trace(
    comm: Iterable[tuple[int, float, float]],
    compute: Iterable[tuple[int, float, float]],
    *,
    memcpy: Iterable[tuple[int, float, float]] = (),
    steps: Iterable[tuple[int, float, float]] = (),
    rank: int = 0,
    world_size: int = 2,
) -> dict:
    """A trace document from (stream, start_us, end_us) kernels and (N, start, end) ProfilerStep#N
    windows. Each kernel gets a cudaLaunchKernel on the main thread with a matching correlation."""
    events: list[dict] = [{"ph": "M", "name": "thread_name", "pid": PID, "tid": PID, "args": {"name": f"thread {PID} (python)"}}]
    for n, s, e in steps:
        events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{n}",
                "pid": PID,
                "tid": PID,
                "ts": s,
                "dur": e - s,
                "args": {"External id": n},
            }
        )
    corr = 1
    for cat, name, items in (("kernel", NCCL_KERNEL, comm), ("kernel", COMPUTE_KERNEL, compute), ("gpu_memcpy", MEMCPY, memcpy)):
        for stream, s, e in items:
            events.append(
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": "cudaLaunchKernel",
                    "pid": PID,
                    "tid": PID,
                    "ts": s,
                    "dur": 0.5,
                    "args": {"correlation": corr, "External id": corr},
                }
            )
            args = {"device": 0, "stream": stream, "correlation": corr, "External id": corr}
            if name is NCCL_KERNEL:
                args.update(
                    {
                        "Collective name": "allreduce",
                        "In msg nelems": 1024,
                        "Out msg nelems": 1024,
                        "Group size": world_size,
                        "dtype": "Float",
                        "Process Group Name": "0",
                    }
                )
            events.append({"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream, "ts": s, "dur": e - s, "args": args})
            corr += 1
    return {
        "schemaVersion": 1,
        "traceEvents": events,
        "distributedInfo": {
            "backend": "nccl",
            "rank": rank,
            "world_size": world_size,
            "pg_config": [{"pg_name": "0", "pg_size": world_size, "ranks": list(range(world_size))}],
        },
    }


def write_trace(doc: dict, path: Path) -> None:
    """Write a trace document, gzipped when the name ends in .gz."""
    data = orjson.dumps(doc)
    if str(path).endswith(".gz"):
        data = gzip.compress(data, compresslevel=1)
    Path(path).write_bytes(data)


@dataclass(frozen=True)
class Expected:
    """The metrics of a trace from `write_large_trace`, known by construction."""

    num_steps: int
    num_events: int
    nbytes: int
    comm_us: float
    compute_us: float
    overlap_us: float


# One layer of the large trace, in µs from the layer start. Layers are 200 µs apart and nothing
# reaches past 180, so layers never overlap each other.
LAYER_US = 200
_GEMM = (0, 120)  # compute kernel, stream 7
_MEMCPY = (120, 140)  # memcpy, stream 25: overlaps comm but is not compute
_NCCL = (100, 180)  # all_reduce kernel, stream 20: 20 µs of it overlaps the GEMM
COMM_PER_LAYER_US = _NCCL[1] - _NCCL[0]
COMPUTE_PER_LAYER_US = _GEMM[1] - _GEMM[0]
OVERLAP_PER_LAYER_US = _GEMM[1] - _NCCL[0]


def _layer_events(t0: int, layer: int, corr: int, ext: int) -> list[dict]:
    """What PyTorch writes for one linear layer plus its gradient all_reduce (shapes and
    argument lists like a real trace's, so that the file size per event is realistic)."""
    dims = [[512, 4096], [4096, 4096], [4096]]
    ev = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::linear",
            "pid": PID,
            "tid": PID,
            "ts": t0 + 1,
            "dur": 30,
            "args": {
                "External id": ext,
                "Record function id": 0,
                "Sequence number": layer,
                "Fwd thread id": 0,
                "Input Dims": dims,
                "Input type": ["float", "float", "float"],
                "Input Strides": [[4096, 1], [4096, 1], [1]],
                "Concrete Inputs": ["", "", ""],
            },
        },
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::addmm",
            "pid": PID,
            "tid": PID,
            "ts": t0 + 3,
            "dur": 25,
            "args": {
                "External id": ext + 1,
                "Record function id": 0,
                "Sequence number": layer,
                "Fwd thread id": 0,
                "Input Dims": [[4096], [512, 4096], [4096, 4096], [], []],
                "Input type": ["float", "float", "float", "Scalar", "Scalar"],
                "Concrete Inputs": ["", "", "", "1", "1"],
            },
        },
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": PID,
            "tid": PID,
            "ts": t0 + 5,
            "dur": 6,
            "args": {"External id": ext + 1, "cbid": 211, "correlation": corr},
        },
        {"ph": "s", "id": corr, "pid": PID, "tid": PID, "ts": t0 + 5, "cat": "ac2g", "name": "ac2g"},
        {
            "ph": "X",
            "cat": "kernel",
            "name": GEMM_KERNEL,
            "pid": 0,
            "tid": 7,
            "ts": t0 + _GEMM[0],
            "dur": _GEMM[1] - _GEMM[0],
            "args": {
                "External id": ext + 1,
                "queued": 0,
                "device": 0,
                "context": 1,
                "stream": 7,
                "correlation": corr,
                "registers per thread": 168,
                "shared memory": 98304,
                "blocks per SM": 1.2,
                "warps per SM": 4.8,
                "grid": [128, 4, 1],
                "block": [384, 1, 1],
                "est. achieved occupancy %": 19,
            },
        },
        {"ph": "f", "id": corr, "pid": 0, "tid": 7, "ts": t0 + _GEMM[0], "cat": "ac2g", "name": "ac2g", "bp": "e"},
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaMemcpyAsync",
            "pid": PID,
            "tid": PID,
            "ts": t0 + 35,
            "dur": 4,
            "args": {"External id": ext + 2, "cbid": 41, "correlation": corr + 1},
        },
        {
            "ph": "X",
            "cat": "gpu_memcpy",
            "name": MEMCPY,
            "pid": 0,
            "tid": 25,
            "ts": t0 + _MEMCPY[0],
            "dur": _MEMCPY[1] - _MEMCPY[0],
            "args": {
                "External id": ext + 2,
                "device": 0,
                "context": 1,
                "stream": 25,
                "correlation": corr + 1,
                "bytes": 8388608,
                "memory bandwidth (GB/s)": 419.4,
            },
        },
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "record_param_comms",
            "pid": PID,
            "tid": PID,
            "ts": t0 + 40,
            "dur": 20,
            "args": {
                "External id": ext + 3,
                "Record function id": 0,
                "Collective name": "allreduce",
                "dtype": "Float",
                "In msg nelems": 16777216,
                "Out msg nelems": 16777216,
                "Group size": 8,
                "In split size": "[]",
                "Out split size": "[]",
                "Process Group Name": "0",
                "Process Group Description": "default_pg",
                "Process Group Ranks": "[0, 1, 2, 3, 4, 5, 6, 7]",
            },
        },
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "nccl:all_reduce",
            "pid": PID,
            "tid": PID,
            "ts": t0 + 42,
            "dur": 15,
            "args": {"External id": ext + 4, "Record function id": 0},
        },
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernelExC",
            "pid": PID,
            "tid": PID,
            "ts": t0 + 45,
            "dur": 8,
            "args": {"External id": ext + 3, "cbid": 430, "correlation": corr + 2},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": NCCL_KERNEL,
            "pid": 0,
            "tid": 20,
            "ts": t0 + _NCCL[0],
            "dur": _NCCL[1] - _NCCL[0],
            "args": {
                "External id": ext + 3,
                "queued": 0,
                "device": 0,
                "context": 1,
                "stream": 20,
                "correlation": corr + 2,
                "registers per thread": 96,
                "shared memory": 87568,
                "blocks per SM": 0.07,
                "warps per SM": 1.26,
                "grid": [8, 1, 1],
                "block": [544, 1, 1],
                "est. achieved occupancy %": 0,
                "Collective name": "allreduce",
                "In msg nelems": 16777216,
                "Out msg nelems": 16777216,
                "Group size": 8,
                "dtype": "Float",
                "In split size": "[]",
                "Out split size": "[]",
                "Process Group Name": "0",
                "Process Group Description": "default_pg",
                "Process Group Ranks": "[0, 1, 2, 3, 4, 5, 6, 7]",
            },
        },
    ]
    return ev


def _large_events(*, target_bytes: int, layers_per_step: int) -> Iterator[tuple[bytes, int, int]]:
    """Yields (serialised events of one step, number of events, number of layers)."""
    size = 0
    step = 0
    corr = ext = 1
    while size < target_bytes:
        t0 = 1_000_000 + step * (layers_per_step * LAYER_US + 1000)
        events = [
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{step + 1}",
                "pid": PID,
                "tid": PID,
                "ts": t0,
                "dur": layers_per_step * LAYER_US + 500,
                "args": {"External id": ext},
            }
        ]
        ext += 1
        for layer in range(layers_per_step):
            events += _layer_events(t0 + layer * LAYER_US, layer, corr, ext)
            corr += 3
            ext += 5
        blob = b",\n".join(orjson.dumps(e) for e in events)
        size += len(blob)
        step += 1
        yield blob, len(events), layers_per_step


def write_large_trace(path: Path, *, target_bytes: int, rank: int = 0, world_size: int = 8, layers_per_step: int = 200) -> Expected:
    """Stream a realistic GPU trace of about `target_bytes` (uncompressed) to `path` (gzipped if
    it ends in .gz). Every layer contributes 80 µs of NCCL, 120 µs of compute and 20 µs of overlap."""
    opener = gzip.open if str(path).endswith(".gz") else open
    head = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85045870592}],
        "distributedInfo": {
            "backend": "nccl",
            "rank": rank,
            "world_size": world_size,
            "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "pg_size": world_size, "ranks": list(range(world_size))}],
        },
    }
    num_steps = num_events = layers = written = 0
    kwargs = {"compresslevel": 1} if opener is gzip.open else {}
    with opener(path, "wb", **kwargs) as f:
        prefix = orjson.dumps(head)[:-1] + b',\n"traceEvents": [\n'
        f.write(prefix)
        written += len(prefix)
        for blob, n, k in _large_events(target_bytes=target_bytes, layers_per_step=layers_per_step):
            if num_steps:
                f.write(b",\n")
                written += 2
            f.write(blob)
            written += len(blob)
            num_steps += 1
            num_events += n
            layers += k
        tail = b'\n],\n"traceName": "synthetic", "displayTimeUnit": "ms"}\n'
        f.write(tail)
        written += len(tail)
    return Expected(
        num_steps=num_steps,
        num_events=num_events,
        nbytes=written,
        comm_us=layers * COMM_PER_LAYER_US,
        compute_us=layers * COMPUTE_PER_LAYER_US,
        overlap_us=layers * OVERLAP_PER_LAYER_US,
    )
