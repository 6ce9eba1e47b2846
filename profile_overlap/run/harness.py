"""The harness, run on every rank: process group, checks, warmup, timing, profiling, outputs.

Per mode: `warmup_steps` untimed steps (AllReduce == AllGather(ReduceScatter) is checked on
their real gradients), `steps` timed unprofiled steps, then one profiler warmup step and
`profile_steps` profiled steps. Every mode runs the same steps on the same data, so compare mode
can check that both end with equal parameters.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import gzip
import os
import platform
import shlex
import shutil
import signal
import socket
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile, schedule

from profile_overlap.analysis import core as analysis
from profile_overlap.core import rank_output
from profile_overlap.core import status as run_status
from profile_overlap.core.errors import UserError
from profile_overlap.core.files import CONFIG_JSON, ENV_JSON, METRICS_JSON, TIMELINE_JSON
from profile_overlap.core.io import write_json_atomic
from profile_overlap.record.metrics import (
    SCHEMA_VERSION,
    Memory,
    ModeMetrics,
    RunMetrics,
    Speedup,
    StepTimes,
    ensure_writable_dir,
)
from profile_overlap.render import outputs
from profile_overlap.run import pipelines
from profile_overlap.run.config import Config
from profile_overlap.run.verify import DecompositionChecker, compare_params, ranks_agree

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
RUN_NAME = "{stamp}-{mode}-{backend}-w{world}"


def resolve_backend(config: Config) -> str:
    if config.backend != "auto":
        return config.backend
    return "nccl" if torch.cuda.is_available() else "gloo"


def check_devices(backend: str) -> torch.device:
    """Fail before any collective when the backend cannot run here."""
    if backend == "gloo":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise UserError("--backend nccl needs CUDA, and this machine has no usable GPU: use --backend gloo (CPU)")
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
    if local_world > torch.cuda.device_count():
        raise UserError(
            f"{local_world} ranks on this node but only {torch.cuda.device_count()} GPU(s): "
            f"use --nproc-per-node {torch.cuda.device_count()} or fewer, or --backend gloo"
        )
    torch.cuda.set_device(local_rank)
    return torch.device("cuda", local_rank)


def _agree_on_config(config: Config) -> None:
    """Every rank must run the same config; compare a digest and name the differing fields."""
    world = dist.get_world_size()
    mine = (config.digest(), config.to_dict())
    everyone: list = [None] * world
    dist.all_gather_object(everyone, mine)
    if all(digest == everyone[0][0] for digest, _ in everyone):
        return
    reference = everyone[0][1]
    differing = sorted(
        {k for _, cfg in everyone for k, v in cfg.items() if v != reference[k] and k not in ("nproc_per_node", "name", "out")}
    )
    detail = ", ".join(f"{k}: " + "/".join(str(cfg[k]) for _, cfg in everyone) for k in differing)
    raise UserError(f"ranks were started with different configs ({detail}): start every node with the same flags")


def make_dir(create) -> Path:
    """Rank 0 creates a fresh folder with `create()` (never reusing one); every rank learns its path.
    The job's first folder (the run, sweep or benchmark folder) receives every rank's log."""
    box: list = [None]
    if dist.get_rank() == 0:
        try:
            box[0] = str(create())
        except UserError as err:
            box[0] = err
    dist.broadcast_object_list(box, src=0)
    if isinstance(box[0], UserError):
        raise box[0]
    rank_output.attach(Path(box[0]), dist.get_rank())
    return Path(box[0])


def create_fresh_dir(config: Config, *, backend: str, world: int, label: str | None = None) -> Path:
    out = ensure_writable_dir(Path(config.out))
    if config.name:
        path = out / config.name
        try:
            path.mkdir()
        except FileExistsError:
            raise UserError(f"run folder {path} already exists and is never overwritten: pick another --name") from None
        return path
    base = RUN_NAME.format(stamp=time.strftime("%Y%m%d-%H%M%S"), mode=label or config.mode, backend=backend, world=world)
    for suffix in ["", *(f"-{i}" for i in range(2, 1000))]:
        try:
            (out / (base + suffix)).mkdir()
            return out / (base + suffix)
        except FileExistsError:
            continue
    raise UserError(f"too many runs named {base}* in {out}; give --name")


def _launcher() -> str:
    """torchrun, or this package's own launcher (which also goes through torch elastic)."""
    return "python" if os.environ.get("PROFILE_OVERLAP_SELF_LAUNCHED") else "torchrun"


def reproduce_command(*, num_nodes: int, config: Config | None = None) -> str:
    """The command line that reruns this job. For a run, every flag is spelled out from the
    config (a later change of defaults cannot change the rerun) and --name is left out (that
    folder exists); other commands repeat their own arguments."""
    args = config_flags(config) if config else sys.argv[1:]
    if _launcher() == "torchrun":
        local = os.environ.get("LOCAL_WORLD_SIZE", "1")
        where = ["--standalone"] if num_nodes == 1 else [f"--nnodes={num_nodes}", "--rdzv-backend=c10d", "--rdzv-endpoint=<host>:<port>"]
        return shlex.join(["torchrun", *where, f"--nproc-per-node={local}", "-m", "profile_overlap", *args])
    nproc = ["--nproc-per-node", os.environ.get("LOCAL_WORLD_SIZE", "1")] if config else []
    return shlex.join(["python", "-m", "profile_overlap", *args, *nproc])


def config_flags(config: Config) -> list[str]:
    """`run` flags that recreate this config (all of them, defaults included)."""
    flags = ["run"]
    for name, value in config.to_dict().items():
        if name in ("name", "nproc_per_node") or value is None:
            continue
        if isinstance(value, bool):
            flags.append(f"--{name}" if value else f"--no-{name}")
            continue
        flag = "--timeout" if name == "timeout_s" else "--" + name.replace("_", "-")
        flags += [flag, str(value)]
    return flags


def environment(backend: str, device: torch.device, *, config: Config | None = None) -> dict:
    world = dist.get_world_size()
    mine = {
        "rank": dist.get_rank(),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "local_rank": int(os.environ.get("LOCAL_RANK", 0)),
        "node_rank": int(os.environ.get("GROUP_RANK", os.environ.get("NODE_RANK", 0))),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or platform.machine(),
    }
    ranks: list = [None] * world
    dist.all_gather_object(ranks, mine)
    nccl = None
    if backend == "nccl":
        nccl = ".".join(map(str, torch.cuda.nccl.version()))
    return {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": reproduce_command(num_nodes=len({r["node_rank"] for r in ranks}), config=config),
        "launcher": _launcher(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "nccl": nccl,
        "gloo": f"bundled with torch {torch.__version__}" if backend == "gloo" else None,
        "backend": backend,
        "device_type": device.type,
        "world_size": world,
        "num_nodes": len({r["node_rank"] for r in ranks}),
        "hosts": sorted({r["host"] for r in ranks}),
        "ranks": ranks,
    }


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed_steps(step_fn, state, *, first_step: int, num_steps: int, device: torch.device, after_step=None) -> list[float]:
    """This rank's step times in ms. GPU: CUDA events, no host sync inside the loop. CPU: a
    barrier before each step so all ranks start together, perf_counter around it.
    `after_step` (the profiler's step(), in the overhead benchmark) is timed with the step."""
    if device.type == "cuda":
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(num_steps)]
        for i, (start, end) in enumerate(events):
            start.record()
            step_fn(state, first_step + i)
            if after_step:
                after_step()
            end.record()
        torch.cuda.synchronize(device)
        return [start.elapsed_time(end) for start, end in events]
    times = []
    for i in range(num_steps):
        dist.barrier()
        t0 = time.perf_counter()
        step_fn(state, first_step + i)
        if after_step:
            after_step()
        times.append((time.perf_counter() - t0) * 1e3)
    dist.barrier()
    return times


def _ends_with_brace(path: Path) -> bool:
    """A complete Chrome trace is one JSON object; Kineto's writer truncates silently when the
    disk fills, so check the last byte rather than trusting the export call."""
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        f.seek(max(0, f.tell() - 64))
        return f.read().rstrip().endswith(b"}")


def _trace_writer(trace_dir: Path, worker: str, *, use_gzip: bool, written: list[Path]):
    """Like torch's tensorboard_trace_handler (same <worker>.<span>.pt.trace.json[.gz] names, which
    torch-tb-profiler expects), but the trace is exported to a hidden partial file, checked, then
    compressed and renamed: a full disk leaves no trace that looks whole."""

    def handler(prof) -> None:
        name = f"{worker}.{time.time_ns()}.pt.trace.json"
        final = trace_dir / (name + (".gz" if use_gzip else ""))
        partial = trace_dir / f".partial-{name}"
        partial_gz = trace_dir / f".partial-{name}.gz"
        try:
            prof.export_chrome_trace(str(partial))
            if not partial.exists() or not _ends_with_brace(partial):
                raise OSError(errno.ENOSPC, "the profiler wrote an incomplete trace, most likely the disk is full")
            if use_gzip:
                with open(partial, "rb") as src, gzip.open(partial_gz, "wb", compresslevel=6) as dst:
                    shutil.copyfileobj(src, dst, length=1 << 20)
                os.replace(partial_gz, final)
                partial.unlink()
            else:
                os.replace(partial, final)
        except OSError as err:
            for leftover in trace_dir.glob(f".partial-{name}*"):  # ours, and Kineto's own .tmp
                leftover.unlink(missing_ok=True)
            raise UserError(
                f"writing trace {final} failed ({err.strerror or err}): free disk space or pick another --out", exit_code=1
            ) from None
        written.append(final)

    return handler


def _profiled_steps(step_fn, state, *, first_step: int, config: Config, trace_dir: Path, worker: str, device: torch.device) -> Path:
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    written: list[Path] = []
    with profile(
        activities=activities,
        schedule=schedule(wait=0, warmup=1, active=config.profile_steps, repeat=1),
        record_shapes=True,
        on_trace_ready=_trace_writer(trace_dir, worker, use_gzip=config.gzip, written=written),
    ) as prof:
        for i in range(config.profile_steps + 1):
            step_fn(state, first_step + i)
            prof.step()
    _sync(device)
    assert len(written) == 1, f"expected one trace for {worker}, got {written}"
    return written[0]


def run_mode(
    mode: str, *, config: Config, device: torch.device, run_dir: Path
) -> tuple[ModeMetrics, analysis.TraceAnalysis | None, list[torch.Tensor]]:
    rank, world = dist.get_rank(), dist.get_world_size()
    dtype = DTYPES[config.dtype]
    state = pipelines.build_state(mode, config=config, rank=rank, world_size=world, device=device, dtype=dtype)
    step_fn = pipelines.PIPELINES[mode]
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)

    checker = DecompositionChecker(state)
    step = 0
    for _ in range(config.warmup_steps):
        pipelines.fill_gradients(state, step)
        checker.check_step(step)
        step_fn(state, step)
        step += 1
    checks = [checker.result()] if config.warmup_steps else []
    if checks and not checks[0].passed:
        return *_mode_metrics(mode, state, checks=checks, times=[], trace=None, run_dir=run_dir, device=device), state.params

    times = timed_steps(step_fn, state, first_step=step, num_steps=config.steps, device=device)
    step += config.steps

    trace = None
    if config.profile:
        trace_dir = run_dir / mode
        trace_dir.mkdir(exist_ok=True)
        worker = f"{socket.gethostname()}_{rank}"
        trace = _profiled_steps(step_fn, state, first_step=step, config=config, trace_dir=trace_dir, worker=worker, device=device)
        step += config.profile_steps + 1

    checks.append(ranks_agree(state.params, name=f"{mode}: parameters equal on every rank", dtype=dtype))
    return *_mode_metrics(mode, state, checks=checks, times=times, trace=trace, run_dir=run_dir, device=device), state.params


def _mode_metrics(
    mode: str, state, *, checks, times, trace, run_dir: Path, device: torch.device
) -> tuple[ModeMetrics, analysis.TraceAnalysis | None]:
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
        dist.gather_object(analysis.analyze_rank([trace]), analyses, dst=0)
        if analyses is not None:
            combined = analysis.combine(analyses, source=str(trace.parent))
    # A step takes as long as its slowest rank.
    step_times = [max(r["times"][i] for r in gathered) for i in range(len(times))]
    method = "cuda_events" if device.type == "cuda" else "perf_counter+barrier"
    return ModeMetrics(
        mode=mode,
        step_time=StepTimes.from_times(step_times, method=method),
        memory=tuple(r["memory"] for r in gathered),
        checks=tuple(checks),
        trace_dir=str(trace.parent.relative_to(run_dir)) if trace else None,
        analysis=analysis.to_json(combined) if combined else None,
    ), combined


def _speedup(modes: dict[str, ModeMetrics]) -> Speedup | None:
    if set(modes) != {"sequential", "split"} or not all(m.step_time.times_ms for m in modes.values()):
        return None
    seq, split = modes["sequential"], modes["split"]
    measured = seq.step_time.median_ms / split.step_time.median_ms
    predicted = None
    if seq.analysis:
        ranks = seq.analysis["ranks"]
        comm = sum(r["comm_us"] for r in ranks) / len(ranks)
        compute = sum(r["compute_us"] for r in ranks) / len(ranks)
        if max(comm, compute) > 0:
            predicted = (comm + compute) / max(comm, compute)
    return Speedup(measured=measured, predicted=predicted)


class Terminated(Exception):
    """SIGTERM: the launcher stops every rank when one fails, or the job was cancelled."""


def _raise_terminated(signum, frame) -> None:
    raise Terminated("stopped by SIGTERM from the launcher (another rank failed, or the job was cancelled)")


def _failure_reason(err: BaseException) -> str:
    if isinstance(err, KeyboardInterrupt):
        return "interrupted by the user (Ctrl-C)"
    text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    transport = "/gloo/" in text or "nccl" in text.lower() or "Timed out" in text
    if isinstance(err, dist.DistError) or transport:
        # gloo appends advice and an emoji after the first sentence; the first sentence is the fact.
        text = f"a collective failed: another rank crashed, hung or timed out ({text.split('. ')[0][:300]})"
    return f"rank {dist.get_rank() if dist.is_initialized() else '?'}: {text}"


def init_process_group(backend: str, device: torch.device, timeout_s: float) -> None:
    """dist.init_process_group, after the one import that must come first.

    Ordering rule: `torch.distributed.nn` is imported BEFORE the process group exists. Its
    functions take `group=group.WORLD` as a default argument, evaluated at import time. Imported
    after init_process_group, ten of them hold the default process group for the life of the
    interpreter, and torch.profiler imports them on its first trace (prepare_trace touches
    torch._inductor, which pulls in torch.distributed.nn). Then destroy_process_group cannot free
    the gloo process group: its worker threads (pt_gloo_runloop) and TCP loop outlive our code,
    and the group is destroyed during interpreter finalization. If a worker is still releasing
    its last work item then (the final barrier's AsyncBarrierWork, which holds an all_gather's
    tensors), dropping a tensor's Python object needs the GIL; a finalizing interpreter answers
    with pthread_exit, whose forced unwind through a noexcept destructor calls std::terminate:
    "terminate called without an active exception", SIGABRT, after a run that succeeded
    (issue 11; about 1 run in 20 to 1 in 4 depending on the machine). Imported first, the defaults
    hold None, destroy_process_group frees the group, and its destructor joins the workers while
    the interpreter is fully alive. tests/test_teardown.py checks that no gloo thread is left.
    """
    import torch.distributed.nn.functional  # noqa: F401  (see above: must precede init)

    dist.init_process_group(backend=backend, timeout=dt.timedelta(seconds=timeout_s), device_id=device if device.type == "cuda" else None)


@contextlib.contextmanager
def process_group(config: Config):
    """Checks, then the process group for the whole job (one run, or every point of a sweep).
    Yields (backend, device). On the way out, destroy_process_group frees the group and joins its
    threads (see init_process_group for the ordering rule that makes this true)."""
    backend = resolve_backend(config)
    device = check_devices(backend)
    signal.signal(signal.SIGTERM, _raise_terminated)
    init_process_group(backend, device, config.timeout_s)
    try:
        _agree_on_config(config)
        try:
            config.check_world_size(dist.get_world_size())
        except ValueError as err:
            raise UserError(str(err)) from None
        yield backend, device
    finally:
        # Status is written: a SIGTERM from here on (the launcher stopping us) just ends the process.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        dist.destroy_process_group()


@contextlib.contextmanager
def failure_recorded(run_dir: Path):
    """Any fault inside marks run_dir failed or interrupted (the first rank to fail names the
    reason) and becomes a one-line error; PROFILE_OVERLAP_DEBUG=1 keeps the traceback."""
    try:
        yield
    except BaseException as err:
        interrupted = isinstance(err, KeyboardInterrupt)
        if interrupted:  # a second Ctrl-C (the launcher forwards one) must not cut the bookkeeping short
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        reason = _failure_reason(err)
        run_status.write_if_running(run_dir, "interrupted" if interrupted else "failed", reason=reason)
        if interrupted or isinstance(err, UserError) or os.environ.get("PROFILE_OVERLAP_DEBUG"):
            raise
        raise UserError(f"run failed, {reason}; {run_dir} is marked failed{rank_output.where_logs(run_dir)}", exit_code=1) from None


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
    analyses: dict[str, analysis.TraceAnalysis] = {}
    final_params: dict[str, list[torch.Tensor]] = {}
    if rank == 0:
        rank_output.say(f"profile_overlap {config.mode}: {env['world_size']} ranks, {backend} ({device.type}); run folder {run_dir}")
    for index, mode in enumerate(config.modes, start=1):
        started = time.perf_counter()
        modes[mode], analyses[mode], final_params[mode] = run_mode(mode, config=config, device=device, run_dir=run_dir)
        if rank == 0:
            done = [f"{config.warmup_steps} warmup step{'s' if config.warmup_steps != 1 else ''} verified"]
            if modes[mode].checks and not modes[mode].checks[0].passed:
                done = ["verification FAILED on the warmup steps, so nothing was timed"]
            else:
                done.append(f"{len(modes[mode].step_time.times_ms)} timed")
            if modes[mode].trace_dir:
                done.append(f"{config.profile_steps} profiled and analysed")
            rank_output.say(f"  [{index}/{len(config.modes)}] {mode}: {', '.join(done)} ({time.perf_counter() - started:.1f} s)")
    cross = []
    if len(final_params) == 2 and all(m.step_time.times_ms and m.checks[0].passed for m in modes.values()):
        cross.append(
            compare_params(
                final_params["sequential"], final_params["split"], name="sequential == split: final parameters", dtype=DTYPES[config.dtype]
            )
        )
    metrics = RunMetrics(
        schema_version=SCHEMA_VERSION,
        run_dir=str(run_dir),
        config=config.to_dict(),
        env=env,
        modes=modes,
        checks=tuple(cross),
        speedup=_speedup(modes),
    )
    if rank == 0:
        failed = [c for c in metrics.all_checks() if not c.passed]
        if failed:
            # Before any report is rendered, so that no report can claim success.
            run_status.write(run_dir, "failed", reason="verification failed: " + "; ".join(c.describe() for c in failed))
        rank_output.say("  writing metrics.json, the report and TensorBoard files")
        write_json_atomic(run_dir / METRICS_JSON, metrics.to_json())
        if any(analyses.values()):
            write_json_atomic(run_dir / TIMELINE_JSON, analysis.timeline_record(analyses))
        outputs.render_all(run_dir, metrics)
        from profile_overlap.render import console

        console.print_run_summary(metrics)
        if not failed:
            run_status.write(run_dir, "succeeded")
    dist.barrier()
    return metrics
