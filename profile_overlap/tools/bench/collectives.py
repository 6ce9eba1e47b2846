"""`bench-collectives`: all_reduce, reduce_scatter and all_gather timed and checked, nccl-tests style.

    torchrun --standalone --nproc-per-node 4 -m profile_overlap bench-collectives --sizes 1K:16M:4
    python -m profile_overlap bench-collectives --nproc-per-node 4 --sizes 1K:256M --dtype bfloat16

Per size S (bytes of the full array, nccl-tests' convention) and per collective: `--warmup`
untimed iterations, then `--iters` timed ones. An iteration's time is its slowest rank's; the
table shows the median. CPU (gloo): a barrier before each iteration, perf_counter around the
call. GPU (NCCL): CUDA events around each call, no host sync inside the loop.

Correctness beside speed, like nccl-tests' `-c`: every rank's input holds known values,
x(r, i) = (r + 1) * (1 + i mod 7) at index i of the full array, so the reduced sum is
N(N+1)/2 * (1 + i mod 7) and the gathered array is x(i // chunk, i). After the last timed
iteration every element of every rank's output is compared against that closed form; `#wrong`
counts the elements outside the dtype's tolerance, over all ranks.

This module measures, on every rank. The flags are in config.py; the record (BenchResult,
record.py) is built once, then rendered: console table (rank 0), bench.json in the run
folder (and --json), TensorBoard scalars with the size in bytes as the step.

Test-only fault: PROFILE_OVERLAP_FAULT=corrupt:rank=R:step=I:layer=C adds 1 to rank R's output
of collective C (index into COLLECTIVES) at size index I, before the check.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.distributed as dist

from profile_overlap.core import rank_output
from profile_overlap.core import status as run_status
from profile_overlap.core.files import BENCH_JSON, CONFIG_JSON, ENV_JSON
from profile_overlap.core.io import write_json_atomic
from profile_overlap.run import environment, job
from profile_overlap.run.config import DTYPE_BYTES
from profile_overlap.run.dtypes import torch_dtype
from profile_overlap.run.pipelines import Fault, all_gather_single, reduce_scatter_single
from profile_overlap.run.timing import time_calls
from profile_overlap.run.verify import TOLERANCE
from profile_overlap.tools.bench.config import COLLECTIVES, COMMAND, BenchConfig
from profile_overlap.tools.bench.record import BenchResult, build_result, render_table, write_tensorboard

_PATTERN_PERIOD = 7
"""x(r, i) = (r + 1) * (1 + i mod 7): 7 is odd, so every rank's chunk starts at a different phase
and a chunk landing in the wrong place is caught."""


def _pattern(*, count: int, device: torch.device) -> torch.Tensor:
    """Per index i of the full array: 1 + i mod 7, as float32 (exact in every dtype)."""
    return (torch.arange(count, device=device) % _PATTERN_PERIOD + 1).to(torch.float32)


def _expected(kind: str, *, count: int, rank: int, world_size: int, device: torch.device) -> torch.Tensor:
    """The closed form of this rank's output of `kind`, as float32."""
    pattern = _pattern(count=count, device=device)
    chunk = count // world_size
    if kind == "all_gather":
        return (torch.arange(count, device=device) // chunk + 1).to(torch.float32) * pattern
    reduced = world_size * (world_size + 1) / 2 * pattern
    return reduced if kind == "all_reduce" else reduced[rank * chunk : (rank + 1) * chunk]


def _count_wrong(out: torch.Tensor, expected: torch.Tensor, *, tolerance: float) -> int:
    err = (out.to(torch.float32) - expected).abs()
    bound = tolerance * expected.abs().clamp(min=1.0)
    # NaN compares False with <=, so it counts as wrong.
    return int((~(err <= bound)).sum())


def _measure_size(*, nbytes: int, size_index: int, config: BenchConfig, device: torch.device, fault: Fault | None) -> tuple[dict, dict]:
    """This rank's times (µs per iteration) and wrong-element counts for the three collectives."""
    rank, world = dist.get_rank(), dist.get_world_size()
    dtype = torch_dtype(config.dtype)
    count = nbytes // DTYPE_BYTES[config.dtype]
    chunk = count // world
    mine = slice(rank * chunk, (rank + 1) * chunk)
    full_input = ((rank + 1) * _pattern(count=count, device=device)).to(dtype)

    buffers = {
        "all_reduce": (full_input, torch.empty_like(full_input)),
        "reduce_scatter": (full_input, torch.empty(chunk, device=device, dtype=dtype)),
        "all_gather": (full_input[mine].clone(), torch.empty(count, device=device, dtype=dtype)),
    }

    def call_for(kind: str):
        src, out = buffers[kind]
        if kind == "all_reduce":
            return lambda: dist.all_reduce(out, op=dist.ReduceOp.SUM)
        if kind == "reduce_scatter":
            return lambda: reduce_scatter_single(out, src, op=dist.ReduceOp.SUM)
        return lambda: all_gather_single(out, src)

    times, wrong = {}, {}
    for index, kind in enumerate(COLLECTIVES):
        src, out = buffers[kind]
        # all_reduce works in place: restore its input before every iteration, outside the timing.
        refill = (lambda out=out, src=src: out.copy_(src)) if kind == "all_reduce" else None
        times_ms = time_calls(call_for(kind), count=config.iters, warmup=config.warmup, before=refill, device=device)
        times[kind] = [t * 1e3 for t in times_ms]
        if fault and fault.kind == "corrupt" and fault.hits(rank=rank, step=size_index, layer=index):
            out.add_(1)
        expected = _expected(kind, count=count, rank=rank, world_size=world, device=device)
        wrong[kind] = _count_wrong(out, expected, tolerance=TOLERANCE[dtype])
        del expected
    return times, wrong


def run_rank(config: BenchConfig) -> int:
    """Entry point on every rank (under torchrun, or started by launch.launch_or_run). The
    harness's process group and failure handling: a fault marks the run folder failed, in one line."""
    with job.process_group(config) as (backend, device):
        world = dist.get_world_size()
        run_dir = job.make_dir(lambda: job.create_fresh_dir(config, backend=backend, world=world, label=COMMAND))
        with job.failure_recorded(run_dir):
            result = bench_in_folder(config, backend=backend, device=device, run_dir=run_dir)
    return 0 if result.passed else 1


def bench_in_folder(config: BenchConfig, *, backend: str, device: torch.device, run_dir: Path) -> BenchResult:
    world, rank = dist.get_world_size(), dist.get_rank()
    sizes = config.byte_sizes(world)
    env = environment.environment(backend, device)
    if rank == 0:
        write_json_atomic(run_dir / CONFIG_JSON, config.to_dict())
        write_json_atomic(run_dir / ENV_JSON, environment.env_json(env))
        run_status.write(run_dir, "running")
    fault = Fault.from_env()

    times_us: dict[tuple[int, str], list[float]] = {}
    wrong: dict[tuple[int, str], int] = {}
    for index, nbytes in enumerate(sizes):
        mine = _measure_size(nbytes=nbytes, size_index=index, config=config, device=device, fault=fault)
        everyone: list = [None] * world
        dist.all_gather_object(everyone, mine)
        for kind in COLLECTIVES:
            # An iteration takes as long as its slowest rank.
            times_us[nbytes, kind] = [max(t) for t in zip(*(r[0][kind] for r in everyone))]
            wrong[nbytes, kind] = sum(r[1][kind] for r in everyone)

    result = build_result(
        times_us=times_us,
        wrong=wrong,
        sizes=sizes,
        element_bytes=DTYPE_BYTES[config.dtype],
        world_size=world,
        backend=backend,
        device_type=device.type,
        config=config,
        env=env,
        run_dir=str(run_dir),
    )
    if rank == 0:
        write_json_atomic(run_dir / BENCH_JSON, result.to_json())
        if config.json:
            write_json_atomic(Path(config.json), result.to_json())
        write_tensorboard(result, run_dir)
        rank_output.say(render_table(result))
        if result.passed:
            run_status.write(run_dir, "succeeded")
        else:
            run_status.write(run_dir, "failed", reason=f"{result.num_wrong} wrong values in collective outputs")
    dist.barrier()
    return result
