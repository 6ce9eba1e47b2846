"""The harness, run on every rank: process group, checks, warmup, timing, profiling, outputs.

Per mode: `warmup_steps` untimed steps (AllReduce == AllGather(ReduceScatter) is checked on
their real gradients), `steps` timed unprofiled steps, then one profiler warmup step and
`profile_steps` profiled steps. Every mode runs the same steps on the same data, so compare mode
can check that both end with equal parameters.

With `repeats` R > 1 every mode's state is built and warmed up first, then R rounds each run one
block of `steps` timed steps per mode, the order rotating (see `rounds`), then each mode's profiled
steps: drift lands on every mode alike, and the blocks give intervals (record/noise.py).
"""

from __future__ import annotations

import contextlib
import gc
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist

from profile_overlap.analysis.options import IN_STEPS
from profile_overlap.analysis.rank.per_rank import analyze_rank
from profile_overlap.analysis.record import analysis_record, timeline_of
from profile_overlap.analysis.world.cross_rank import TraceAnalysis, combine
from profile_overlap.core import rank_output
from profile_overlap.core import status as run_status
from profile_overlap.core.errors import UserError
from profile_overlap.core.files import CONFIG_JSON, ENV_JSON, METRICS_JSON, TIMELINE_JSON
from profile_overlap.core.io import write_json_atomic
from profile_overlap.core.modes import ENGINE_MODES
from profile_overlap.record.build import build_record
from profile_overlap.record.metrics import (
    CheckResult,
    Memory,
    ModeMetrics,
    RunMetrics,
    StepTimes,
)
from profile_overlap.render import console, outputs
from profile_overlap.run import engines, models, pipelines
from profile_overlap.run.config import DTYPE_BYTES, Config
from profile_overlap.run.dtypes import torch_dtype
from profile_overlap.run.environment import env_json, environment
from profile_overlap.run.job import create_fresh_dir, failure_recorded, make_dir, process_group
from profile_overlap.run.profiler import profiled_steps
from profile_overlap.run.timing import timed_steps
from profile_overlap.run.verify import DecompositionChecker, compare_params, ranks_agree

DTYPES = {name: torch_dtype(name) for name in DTYPE_BYTES}


@dataclass
class ModeRun:
    """One mode on this rank while the job runs: its state, its next step and what it measured."""

    mode: str
    state: pipelines.State | engines.EngineState
    step_fn: Callable[..., None]
    """The mode's step: run/pipelines.py PIPELINES[mode] for a State, engines.engine_step for an EngineState."""
    step: int = 0
    checks: list[CheckResult] = field(default_factory=list)
    blocks: list[list[float]] = field(default_factory=list)
    """This rank's step times (ms) of each block of timed steps."""
    memory: OwnPeak = field(default_factory=lambda: OwnPeak())
    """This mode's own peak GPU allocation over its segments of steps."""

    @property
    def failed(self) -> bool:
        """The AllReduce == AllGather(ReduceScatter) check failed on the warmup steps: nothing is timed."""
        return bool(self.checks) and not self.checks[0].passed


class OwnPeak:
    """A mode's own peak GPU allocation (torch.cuda.max_memory_allocated), over the segments of steps
    it runs (build and warmup, each timed block, the profiled steps and the checks after them).

    Each segment resets the peak and subtracts what the other modes hold while it runs: all the
    memory allocated at its start but this mode's own (`resident`, what the mode held at the end of
    its last segment). With one block per mode (`--repeats 1`) the earlier modes are freed before a
    mode starts (their parameters for the final comparison wait on the host), so the others hold
    next to nothing; with `--repeats` R >= 2
    every mode's state is held at once, and the others are idle between their blocks (their
    collectives waited for), so what they hold is constant during this mode's segment and the
    difference is this mode's own peak. None on CPU, where nothing is measured."""

    def __init__(self) -> None:
        self.peak: int | None = None
        self.resident = 0

    @contextlib.contextmanager
    def segment(self, device: torch.device):
        if device.type != "cuda":
            yield
            return
        others = torch.cuda.memory_allocated(device) - self.resident
        torch.cuda.reset_peak_memory_stats(device)
        try:
            yield
        finally:
            self.peak = max(self.peak or 0, torch.cuda.max_memory_allocated(device) - others)
            self.resident = torch.cuda.memory_allocated(device) - others


def prepare_mode(mode: str, *, config: Config, device: torch.device) -> ModeRun:
    """Build the mode's state and run its warmup steps, checking the decomposition on each."""
    rank, world = dist.get_rank(), dist.get_world_size()
    build = engines.build_state if mode in ENGINE_MODES else pipelines.build_state
    memory = OwnPeak()
    with memory.segment(device):
        state = build(mode, config=config, rank=rank, world_size=world, device=device, dtype=DTYPES[config.workload.dtype])
        run = ModeRun(mode, state, engines.engine_step if mode in ENGINE_MODES else pipelines.PIPELINES[mode], memory=memory)
        # The engines reduce inside torch, where the bucket check cannot look: only our pipelines are checked.
        checker = None
        if isinstance(state, pipelines.State):
            checker = DecompositionChecker(state)
            state.check = checker.check_bucket
        for _ in range(config.schedule.warmup_steps):
            run.step_fn(state, run.step)
            run.step += 1
        if isinstance(state, pipelines.State):
            state.check = None
    run.checks = [checker.result()] if checker is not None and checker.steps else []
    return run


def timed_block(run: ModeRun, *, config: Config, device: torch.device, alone: bool) -> None:
    """One block of `config.schedule.steps` timed steps. Unless the mode runs `alone` (one block right after its
    warmup), the block starts with one untimed step and ends by waiting for the collectives still in
    flight: another mode's block just left the caches cold and must find nothing of this mode running."""
    with run.memory.segment(device):
        if not alone:
            run.step_fn(run.state, run.step)
            run.step += 1
        run.blocks.append(timed_steps(run.step_fn, run.state, first_step=run.step, num_steps=config.schedule.steps, device=device))
        run.step += config.schedule.steps
        if not alone:
            run.state.finish()


def rounds(modes: list[str], repeats: int) -> list[tuple[str, ...]]:
    """The order of each round's blocks: rotated by one mode per round (A B, B A, A B ...; A B C, B C A,
    C A B ...), so that over the rounds every mode runs in every position and drift favours none."""
    return [tuple(modes[r % len(modes) :] + modes[: r % len(modes)]) for r in range(repeats)] if modes else []


def finish_mode(run: ModeRun, *, config: Config, device: torch.device, run_dir: Path) -> tuple[ModeMetrics, TraceAnalysis | None]:
    """Profile the mode (unless it failed or --no-profile), check that every rank agrees, build its record."""
    trace = None
    with run.memory.segment(device):
        if config.schedule.profile and not run.failed:
            trace_dir = run_dir / run.mode
            trace_dir.mkdir(exist_ok=True)
            worker = f"{socket.gethostname()}_{dist.get_rank()}"
            trace = profiled_steps(
                run.step_fn, run.state, first_step=run.step, config=config, trace_dir=trace_dir, worker=worker, device=device
            )
            run.step += config.schedule.profile_steps + 1
        run.state.finish()
        if not run.failed:
            name = f"{run.mode}: parameters equal on every rank"
            run.checks.append(ranks_agree(run.state.params, name=name, dtype=DTYPES[config.workload.dtype]))
    return _mode_metrics(run, trace=trace, run_dir=run_dir, device=device)


def kept_for_comparison(run: ModeRun) -> list[torch.Tensor]:
    """What the final cross-mode comparison needs of a finished mode: its full parameters, on the
    host (on CPU the tensors themselves, no copy), so that nothing of it stays on the GPU. The mode
    is closed: nothing else of it is used again."""
    params = [p.detach().to("cpu") for p in run.state.params]
    run.state.close()
    return params


def release(device: torch.device) -> None:
    """Free what finished modes held, before the next one is measured: their states are reference
    cycles (the pipelines' hooks hold the state, DDP's reducer and FSDP2's hooks their modules), which
    only the cycle collector frees, and the CUDA cache gives their blocks back."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _mode_metrics(run: ModeRun, *, trace, run_dir: Path, device: torch.device) -> tuple[ModeMetrics, TraceAnalysis | None]:
    """Build this mode's record. Step times and memory (a few numbers per rank) go to every rank;
    the trace analyses go to rank 0 only, which alone writes and renders the record, so traffic
    grows linearly with the number of ranks. On other ranks `analysis` is None (they only use the
    checks, which every rank already holds)."""
    world = dist.get_world_size()
    state = run.state
    mine = {"blocks": run.blocks, "memory": Memory(rank=state.rank, peak_allocated_bytes=run.memory.peak, **state.memory_bytes())}
    gathered: list = [None] * world
    dist.all_gather_object(gathered, mine)
    combined = None
    if trace:
        # Each rank analyzes only its own trace; the small results travel, never the files, so this
        # scales to any number of ranks and needs no shared file system.
        analyses: list | None = [None] * world if dist.get_rank() == 0 else None
        # Measured inside the ProfilerStep ranges only (IN_STEPS).
        dist.gather_object(analyze_rank([trace], IN_STEPS), analyses, dst=0)
        if analyses is not None:
            combined = combine(analyses, source=str(trace.parent))
    # A step takes as long as its slowest rank.
    blocks = [[max(r["blocks"][b][i] for r in gathered) for i in range(len(block))] for b, block in enumerate(run.blocks)]
    method = "cuda_events" if device.type == "cuda" else "perf_counter+barrier"
    return ModeMetrics(
        mode=run.mode,
        step_time=StepTimes.from_times([t for block in blocks for t in block], method=method, blocks_ms=tuple(blocks)),
        memory=tuple(r["memory"] for r in gathered),
        checks=tuple(run.checks),
        trace_dir=str(trace.parent.relative_to(run_dir)) if trace else None,
        analysis=analysis_record(combined) if combined else None,
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
        write_json_atomic(run_dir / ENV_JSON, env_json(env))
        run_status.write(run_dir, "running")

    modes: dict[str, ModeMetrics] = {}
    analyses: dict[str, TraceAnalysis | None] = {}
    final_params: dict[str, list[torch.Tensor]] = {}
    if rank == 0:
        rank_output.say(f"profile_overlap {config.workload.mode}: {env.world_size} ranks, {backend} ({device.type}); run folder {run_dir}")
    count = len(config.workload.modes)
    if config.schedule.repeats == 1:
        # Each mode in turn: warmup, one block of timed steps, profiled steps.
        for index, mode in enumerate(config.workload.modes, start=1):
            started = time.perf_counter()
            run = prepare_mode(mode, config=config, device=device)
            if not run.failed:
                timed_block(run, config=config, device=device, alone=True)
            modes[mode], analyses[mode] = finish_mode(run, config=config, device=device, run_dir=run_dir)
            final_params[mode] = kept_for_comparison(run)
            _progress(f"[{index}/{count}] {mode}", _warmup_done(run, config) + _timed_done(modes[mode], config), started)
            del run  # the next mode is built and measured without this one's state
            release(device)
    else:
        # Every mode's state at once, then R rounds of one block per mode, then the profiled steps.
        runs = {}
        for index, mode in enumerate(config.workload.modes, start=1):
            started = time.perf_counter()
            runs[mode] = prepare_mode(mode, config=config, device=device)
            _progress(f"[{index}/{count}] {mode}", _warmup_done(runs[mode], config), started)
        order = rounds([m for m in config.workload.modes if not runs[m].failed], config.schedule.repeats)
        for index, modes_in_order in enumerate(order, start=1):
            started = time.perf_counter()
            for mode in modes_in_order:
                timed_block(runs[mode], config=config, device=device, alone=False)
            _progress(f"round {index}/{len(order)}", [f"{config.schedule.steps} timed steps of {', '.join(modes_in_order)}"], started)
        for index, mode in enumerate(list(runs), start=1):
            started = time.perf_counter()
            run = runs.pop(mode)
            modes[mode], analyses[mode] = finish_mode(run, config=config, device=device, run_dir=run_dir)
            final_params[mode] = kept_for_comparison(run)
            if not run.failed:
                _progress(f"[{index}/{count}] {mode}", _timed_done(modes[mode], config), started)
            del run
            release(device)
    cross = []
    trained = [m for m in config.workload.modes if modes[m].step_time.times_ms]  # the same on every rank
    for other in trained[1:]:
        # Every mode against the first: the same steps on the same data end with equal parameters.
        name = f"{trained[0]} == {other}: final parameters"
        cross.append(
            compare_params(final_params[trained[0]], final_params[other], name=name, dtype=DTYPES[config.workload.dtype], device=device)
        )
    metrics = build_record(
        run_dir=str(run_dir),
        config=config.to_dict(),
        env=env,
        modes=modes,
        checks=tuple(cross),
        rounds=tuple(order) if config.schedule.repeats > 1 else (tuple(m for m in config.workload.modes if modes[m].step_time.times_ms),),
        unit_param_bytes=models.unit_param_bytes(config),
    )
    if rank == 0:
        failed = [c for c in metrics.all_checks() if not c.passed]
        if failed:
            # Before any report is rendered, so that no report can claim success.
            run_status.write(run_dir, "failed", reason="verification failed: " + "; ".join(c.describe() for c in failed))
        rank_output.say("  writing metrics.json, the report and TensorBoard files")
        metrics.write(run_dir / METRICS_JSON)
        timeline = timeline_of(analyses) if any(analyses.values()) else None
        if timeline is not None:
            timeline.write(run_dir / TIMELINE_JSON)
        outputs.render_all(run_dir, metrics, timeline)
        console.print_run_summary(metrics)
        if not failed:
            run_status.write(run_dir, "succeeded")
    dist.barrier()
    return metrics


def _warmup_done(run: ModeRun, config: Config) -> list[str]:
    if run.failed:
        return ["verification FAILED on the warmup steps, so nothing was timed"]
    warmup = f"{config.schedule.warmup_steps} warmup step{'s' if config.schedule.warmup_steps != 1 else ''}"
    return [warmup if run.mode in ENGINE_MODES else f"{warmup} verified"]


def _timed_done(mode: ModeMetrics, config: Config) -> list[str]:
    done = []
    if mode.step_time.times_ms:
        blocks = len(mode.step_time.blocks_ms)
        done.append(f"{len(mode.step_time.times_ms)} timed" + (f" in {blocks} blocks" if blocks > 1 else ""))
    if mode.trace_dir:
        done.append(f"{config.schedule.profile_steps} profiled and analysed")
    return done


def _progress(what: str, done: list[str], started: float) -> None:
    """One console line from rank 0: what finished, and how long it took."""
    if dist.get_rank() == 0:
        rank_output.say(f"  {what}: {', '.join(done)} ({time.perf_counter() - started:.1f} s)")
