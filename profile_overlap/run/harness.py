"""The harness, run on every rank: process group, checks, warmup, timing, profiling, outputs.

Per mode: `warmup_steps` untimed steps (AllReduce == AllGather(ReduceScatter) is checked on
their real gradients), `steps` timed unprofiled steps, then one profiler warmup step and
`profile_steps` profiled steps. Every mode runs the same steps on the same data, so compare mode
can check that both end with equal parameters.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

import torch
import torch.distributed as dist

from profile_overlap.analysis.cross_rank import TraceAnalysis, combine
from profile_overlap.analysis.per_rank import analyze_rank
from profile_overlap.analysis.record import timeline_record, to_json
from profile_overlap.core import rank_output
from profile_overlap.core import status as run_status
from profile_overlap.core.errors import UserError
from profile_overlap.core.files import CONFIG_JSON, ENV_JSON, METRICS_JSON, TIMELINE_JSON
from profile_overlap.core.io import write_json_atomic
from profile_overlap.record import summary
from profile_overlap.record.metrics import (
    SCHEMA_VERSION,
    Memory,
    ModeMetrics,
    RunMetrics,
    StepTimes,
)
from profile_overlap.render import console, outputs
from profile_overlap.run import engines, pipelines
from profile_overlap.run.config import DTYPE_BYTES, ENGINES, Config
from profile_overlap.run.dtypes import torch_dtype
from profile_overlap.run.environment import environment
from profile_overlap.run.job import create_fresh_dir, failure_recorded, make_dir, process_group
from profile_overlap.run.profiler import profiled_steps
from profile_overlap.run.timing import timed_steps
from profile_overlap.run.verify import DecompositionChecker, compare_params, ranks_agree

DTYPES = {name: torch_dtype(name) for name in DTYPE_BYTES}


def run_mode(
    mode: str, *, config: Config, device: torch.device, run_dir: Path
) -> tuple[ModeMetrics, TraceAnalysis | None, list[torch.Tensor]]:
    rank, world = dist.get_rank(), dist.get_world_size()
    dtype = DTYPES[config.dtype]
    build = engines.build_state if mode in ENGINES else pipelines.build_state
    state = build(mode, config=config, rank=rank, world_size=world, device=device, dtype=dtype)
    step_fn = engines.engine_step if mode in ENGINES else pipelines.PIPELINES[mode]
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)

    checker = DecompositionChecker(state)
    step = 0
    state.check = checker.check_bucket
    for _ in range(config.warmup_steps):
        step_fn(state, step)
        step += 1
    state.check = None
    checks = [checker.result()] if checker.steps else []
    if checks and not checks[0].passed:
        state.finish()
        return *_mode_metrics(mode, state, checks=checks, times=[], trace=None, run_dir=run_dir, device=device), state.params

    times = timed_steps(step_fn, state, first_step=step, num_steps=config.steps, device=device)
    step += config.steps

    trace = None
    if config.profile:
        trace_dir = run_dir / mode
        trace_dir.mkdir(exist_ok=True)
        worker = f"{socket.gethostname()}_{rank}"
        trace = profiled_steps(step_fn, state, first_step=step, config=config, trace_dir=trace_dir, worker=worker, device=device)
        step += config.profile_steps + 1

    state.finish()
    checks.append(ranks_agree(state.params, name=f"{mode}: parameters equal on every rank", dtype=dtype))
    return *_mode_metrics(mode, state, checks=checks, times=times, trace=trace, run_dir=run_dir, device=device), state.params


def _mode_metrics(
    mode: str, state, *, checks, times, trace, run_dir: Path, device: torch.device
) -> tuple[ModeMetrics, TraceAnalysis | None]:
    """Build this mode's record. Step times and memory (a few numbers per rank) go to every rank;
    the trace analyses go to rank 0 only, which alone writes and renders the record, so traffic
    grows linearly with the number of ranks. On other ranks `analysis` is None (they only use the
    checks, which every rank already holds)."""
    world = dist.get_world_size()
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    mine = {"times": times, "memory": Memory(rank=state.rank, peak_allocated_bytes=peak, **state.memory_bytes())}
    gathered: list = [None] * world
    dist.all_gather_object(gathered, mine)
    combined = None
    if trace:
        # Each rank analyzes only its own trace; the small results travel, never the files, so this
        # scales to any number of ranks and needs no shared file system.
        analyses: list | None = [None] * world if dist.get_rank() == 0 else None
        # Measured inside the ProfilerStep ranges only (steps=(None, None)): not the wait for the
        # last step's collectives after its range closes (run/profiler.py).
        dist.gather_object(analyze_rank([trace], steps=(None, None)), analyses, dst=0)
        if analyses is not None:
            combined = combine(analyses, source=str(trace.parent))
    # A step takes as long as its slowest rank.
    step_times = [max(r["times"][i] for r in gathered) for i in range(len(times))]
    method = "cuda_events" if device.type == "cuda" else "perf_counter+barrier"
    return ModeMetrics(
        mode=mode,
        step_time=StepTimes.from_times(step_times, method=method),
        memory=tuple(r["memory"] for r in gathered),
        checks=tuple(checks),
        trace_dir=str(trace.parent.relative_to(run_dir)) if trace else None,
        analysis=to_json(combined) if combined else None,
        model_param_bytes=sum(p.numel() * p.element_size() for p in state.model.parameters()),
    ), combined


def run(config: Config) -> int:
    """Entry point on every rank. Returns the exit code.

    Every fault ends with the run folder's status.json saying failed or interrupted and why,
    and a one-line message instead of a traceback.
    """
    with process_group(config) as (backend, device):
        run_dir = make_dir(lambda: create_fresh_dir(config, backend=backend, world=dist.get_world_size()))
        with failure_recorded(run_dir):
            metrics = run_in_folder(config, backend=backend, device=device, run_dir=run_dir)
    if not metrics.passed:
        failed = [c for c in metrics.all_checks() if not c.passed]
        more = f" (and {len(failed) - 1} more check{'s' if len(failed) > 2 else ''})" if len(failed) > 1 else ""
        raise UserError(f"verification failed: {failed[0].describe()}{more}; {run_dir} is marked failed, its report says more", exit_code=1)
    return 0


def run_in_folder(config: Config, *, backend: str, device: torch.device, run_dir: Path) -> RunMetrics:
    env = environment(backend, device, config=config)
    rank = dist.get_rank()
    if rank == 0:
        write_json_atomic(run_dir / CONFIG_JSON, config.to_dict())
        write_json_atomic(run_dir / ENV_JSON, env)
        run_status.write(run_dir, "running")

    modes: dict[str, ModeMetrics] = {}
    analyses: dict[str, TraceAnalysis] = {}
    final_params: dict[str, list[torch.Tensor]] = {}
    if rank == 0:
        rank_output.say(f"profile_overlap {config.mode}: {env['world_size']} ranks, {backend} ({device.type}); run folder {run_dir}")
    for index, mode in enumerate(config.modes, start=1):
        started = time.perf_counter()
        modes[mode], analyses[mode], final_params[mode] = run_mode(mode, config=config, device=device, run_dir=run_dir)
        if rank == 0:
            warmup = f"{config.warmup_steps} warmup step{'s' if config.warmup_steps != 1 else ''}"
            done = [warmup if mode in ENGINES else f"{warmup} verified"]
            if modes[mode].checks and not modes[mode].checks[0].passed:
                done = ["verification FAILED on the warmup steps, so nothing was timed"]
            else:
                done.append(f"{len(modes[mode].step_time.times_ms)} timed")
            if modes[mode].trace_dir:
                done.append(f"{config.profile_steps} profiled and analysed")
            rank_output.say(f"  [{index}/{len(config.modes)}] {mode}: {', '.join(done)} ({time.perf_counter() - started:.1f} s)")
    cross = []
    trained = [m for m in config.modes if modes[m].step_time.times_ms]  # the same on every rank
    for other in trained[1:]:
        # Every mode against the first: the same steps on the same data end with equal parameters.
        name = f"{trained[0]} == {other}: final parameters"
        cross.append(compare_params(final_params[trained[0]], final_params[other], name=name, dtype=DTYPES[config.dtype]))
    metrics = summary.with_summary(
        RunMetrics(
            schema_version=SCHEMA_VERSION,
            run_dir=str(run_dir),
            config=config.to_dict(),
            env=env,
            modes=modes,
            checks=tuple(cross),
            speedup=summary.speedup(modes),
        )
    )
    if rank == 0:
        failed = [c for c in metrics.all_checks() if not c.passed]
        if failed:
            # Before any report is rendered, so that no report can claim success.
            run_status.write(run_dir, "failed", reason="verification failed: " + "; ".join(c.describe() for c in failed))
        rank_output.say("  writing metrics.json, the report and TensorBoard files")
        write_json_atomic(run_dir / METRICS_JSON, metrics.to_json())
        if any(analyses.values()):
            write_json_atomic(run_dir / TIMELINE_JSON, timeline_record(analyses))
        outputs.render_all(run_dir, metrics)
        console.print_run_summary(metrics)
        if not failed:
            run_status.write(run_dir, "succeeded")
    dist.barrier()
    return metrics
