"""`trace_handler(log_dir)`: a drop-in for torch.profiler.tensorboard_trace_handler, and
`profile(log_dir)`: a torch.profiler.profile wired to it.

    with profile_overlap.profile("runs/myjob") as prof:          # or, in your own profiler:
        for batch in data:                                       #   torch.profiler.profile(...,
            train_step(batch)                                    #       on_trace_ready=profile_overlap.trace_handler("runs/myjob"))
            prof.step()

At each completed profiler cycle, on each rank, the training loop waits only while the profiler
writes the trace (to a hidden partial file, checked whole: a full disk drops that trace with one
warning and training goes on). The rank's worker process (api/worker.py) then gzips it into place
as `<host>_<rank>.<time_ns>.pt.trace.json.gz`, analyses it and appends its scalars to TensorBoard;
rank 0's worker keeps the job's record up to date and, when the profiler stops (or the process
exits), waits for the other ranks' last traces and writes the record, report and TensorBoard files.
Without torch.distributed initialised the job is a one-rank job.
"""

from __future__ import annotations

import atexit
import datetime as dt
import errno
import os
import platform
import shlex
import socket
import sys
import time
import warnings
from pathlib import Path
from types import FrameType

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, schedule

from profile_overlap.api import layout
from profile_overlap.api.background import Worker
from profile_overlap.api.messages import DoneTask, TraceTask, WorkerConfig
from profile_overlap.core import status
from profile_overlap.core.errors import UserError
from profile_overlap.run.teardown import hold_default_group, release_group_defaults, wait_for_collectives

CLOSE_GRACE_S = 30.0
"""How long, beyond rank 0's wait for the other ranks (PROFILE_OVERLAP_JOB_WAIT_S), the process
waits at exit for its worker. A job's record that takes longer (traces of many GB) is left to
`python -m profile_overlap report <job folder>`; the worker is stopped, its traces are put in place."""


class LogDirError(UserError, ValueError):
    """log_dir cannot be created or written: raised when the handler is made, before training starts."""


class TraceHandler:
    """The on_trace_ready callable. `job_dir` is this job's folder under log_dir."""

    def __init__(self, log_dir: str | os.PathLike, *, worker_name: str | None = None, analyze: bool = True) -> None:
        # A profiled gloo job must end cleanly whatever the order of its imports and
        # init_process_group, and whether or not it destroys its group (run/teardown.py says why):
        # the profiler's first trace must not keep the group alive, and the group is freed at exit,
        # after this handler has closed (atexit runs hooks last-in first-out), never mid-interpreter.
        release_group_defaults()
        hold_default_group()
        self.log_dir = _writable(Path(log_dir))
        self.rank, self.world_size, store = _distributed()
        self.job_dir = self.log_dir / layout.job_name(self.log_dir, store=store, world_size=self.world_size)
        self.worker_name = worker_name or f"{socket.gethostname()}_{self.rank}"
        self.analyze = analyze
        try:
            self.job_dir.mkdir(exist_ok=True)
            layout.write_state(self.job_dir, self.rank, _state(self))
            if self.rank == 0 and analyze:
                status.write(self.job_dir, "running")
        except OSError as err:
            raise LogDirError(f"cannot write the job folder {self.job_dir} ({err.strerror or err}): pick a writable log_dir") from None
        self.num_traces = 0
        self.sessions = 0
        """Profiling sessions ended (finish() calls that had new traces, or the first)."""
        self._finished_at: int | None = None
        self.closed = False
        self._write_warned = False
        self._worker: Worker | None = None
        if analyze:
            config = WorkerConfig(
                job_dir=str(self.job_dir), rank=self.rank, world_size=self.world_size, worker=self.worker_name, analyze=analyze
            )
            try:
                self._worker = Worker(config)
            except OSError as err:
                warnings.warn(f"profile_overlap: no background worker ({err}); traces are compressed in the training process", stacklevel=2)
        atexit.register(self.close)

    def __call__(self, prof) -> None:
        step = getattr(prof, "step_num", None)
        name = f"{self.worker_name}.{time.time_ns()}.pt.trace.json"
        partial = self.job_dir / f"{layout.PARTIAL_PREFIX}{name}.part"
        final = self.job_dir / f"{name}.gz"
        try:
            prof.export_chrome_trace(str(partial))
            if not layout.complete(partial):
                raise OSError(errno.ENOSPC, "the profiler wrote an incomplete trace")
        except (OSError, RuntimeError) as err:
            self._drop(name, step, err)
        else:
            self.num_traces += 1
            if self._worker is None or not self._worker.send(TraceTask(partial=str(partial), final=str(final), step=step)):
                self._compress(partial, final, step)
        stopping = _inside_stop(prof)
        _hook_stop(prof, self)
        if stopping:
            self.finish()

    def _compress(self, partial: Path, final: Path, step: int | None) -> None:
        try:
            layout.compress(partial, final, level=6)
            partial.unlink()
        except OSError as err:
            self._drop(final.name[: -len(".gz")], step, err)

    def _drop(self, name: str, step: int | None, err: BaseException) -> None:
        self._guarded("cleaning up the dropped trace", layout.remove_partials, self.job_dir, name)
        reason = getattr(err, "strerror", None) or str(err)
        self._write_warned = True  # this warning says it: the marks that fail after it need not
        layout.record_drop(self.job_dir, self.rank, name=name + ".gz", step=step, reason=reason)
        warnings.warn(
            f"profile_overlap: dropped the trace of rank {self.rank} at step {step}: writing it into {self.job_dir} failed "
            f"({reason}; most likely the disk is full): free disk space or pick another log_dir. Training goes on.",
            RuntimeWarning,
            stacklevel=3,
        )

    def finish(self) -> None:
        """Profiling ended on this rank (the profiler stopped): the worker marks the rank done once
        its traces are in place, and on rank 0 then writes the job's record and report. Nothing
        happens when no trace came since the last call."""
        if self._finished_at == self.num_traces:
            return
        self._finished_at = self.num_traces
        self.sessions += 1
        task = DoneTask(traces=self.num_traces, session=self.sessions, finalize=self.rank == 0)
        if self._worker is None or not self._worker.send(task):
            self._guarded("the rank's done mark", layout.mark_done, self.job_dir, self.rank, traces=self.num_traces, session=self.sessions)

    def _guarded(self, what: str, write, *args, **kwargs) -> None:
        """A write the training process makes for us: on failure (a full disk) one warning per
        handler, and training goes on (the record then counts this rank as missing)."""
        try:
            write(*args, **kwargs)
        except OSError as err:
            if not self._write_warned:
                warnings.warn(
                    f"profile_overlap: writing {what} of rank {self.rank} into {self.job_dir} failed ({err.strerror or err}; "
                    "most likely the disk is full): free disk space or pick another log_dir. Training goes on.",
                    RuntimeWarning,
                    stacklevel=3,
                )
            self._write_warned = True

    def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until the worker has done everything sent so far (traces in place, scalars written,
        on rank 0 the record); False on timeout or without a worker."""
        return self._worker is not None and self._worker.flush(timeout_s)

    def close(self) -> None:
        """At the end (atexit calls it): finish, and wait for the worker to finish its queue."""
        if self.closed:
            return
        self.closed = True
        atexit.unregister(self.close)
        self.finish()
        limit_s = layout.wait_s() + CLOSE_GRACE_S
        if self._worker is not None and not self._worker.close(timeout_s=limit_s):
            later = f"python -m profile_overlap report {self.job_dir}" if self.rank == 0 else "the traces are in place"
            warnings.warn(
                f"profile_overlap: rank {self.rank}'s background worker failed or did not finish within {limit_s:.0f} s "
                f"and was stopped; {later}" + (" writes the job's record and report" if self.rank == 0 else ""),
                RuntimeWarning,
                stacklevel=2,
            )
        # Whatever the worker left (it died, or timed out): traces are never lost for its sake.
        for partial in sorted(self.job_dir.glob(f"{layout.PARTIAL_PREFIX}{self.worker_name}.*.pt.trace.json.part")):
            name = partial.name[len(layout.PARTIAL_PREFIX) : -len(".part")]
            self._compress(partial, self.job_dir / f"{name}.gz", None)


_HANDLERS: dict[tuple, TraceHandler] = {}


def trace_handler(log_dir: str | os.PathLike, *, worker_name: str | None = None, analyze: bool = True) -> TraceHandler:
    """A drop-in for torch.profiler.tensorboard_trace_handler(log_dir): pass it as on_trace_ready.

    worker_name: the trace files' prefix (default `<host>_<rank>`). analyze=False only writes the
    traces (gzipped, checked); `python -m profile_overlap report LOG_DIR` analyses them later.
    Raises LogDirError (a ValueError) at once when log_dir cannot be written. Asked again for the
    same log_dir in one process (a second profiler), it returns the same handler: one job, one worker.
    """
    key = (str(Path(log_dir).resolve()), worker_name, analyze)
    handler = _HANDLERS.get(key)
    if handler is None or handler.closed:
        handler = _HANDLERS[key] = TraceHandler(log_dir, worker_name=worker_name, analyze=analyze)
    return handler


class OverlapProfile(torch.profiler.profile):
    """torch.profiler.profile with our handler; leaving it ends this rank's profiling."""

    def __init__(self, handler: TraceHandler, **kwargs) -> None:
        super().__init__(on_trace_ready=handler, **kwargs)
        self.handler = handler

    def __exit__(self, exc_type, exc_val, exc_tb):
        _wait_before_stop()
        try:
            return super().__exit__(exc_type, exc_val, exc_tb)
        finally:
            self.handler.finish()


def profile(log_dir: str | os.PathLike, *, wait: int = 1, warmup: int = 1, active: int = 3, repeat: int = 0, **profiler_kwargs):
    """A torch.profiler.profile writing to trace_handler(log_dir) on the schedule (wait, warmup,
    active, repeat; repeat=0: cycles until the profiler stops), with record_shapes=True (sizes for
    the bandwidths) and CPU activities, plus CUDA when available. Other keywords go to torch."""
    for key in ("schedule", "on_trace_ready"):
        if key in profiler_kwargs:
            raise ValueError(
                f"profile_overlap.profile sets {key} itself: use wait=, warmup=, active=, repeat=, or torch.profiler.profile "
                "with on_trace_ready=profile_overlap.trace_handler(log_dir)"
            )
    # Each cycle is its own trace file by design: torch's warning that a cycle's events are cleared is not news here.
    warnings.filterwarnings("ignore", message="Warning: Profiler clears events at the end of each cycle")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    kwargs = {"activities": activities, "record_shapes": True, **profiler_kwargs}
    handler = trace_handler(log_dir)
    return OverlapProfile(handler, schedule=schedule(wait=wait, warmup=warmup, active=active, repeat=repeat), **kwargs)


def _writable(log_dir: Path) -> Path:
    probe = log_dir / f".profile_overlap-probe-{os.getpid()}"
    try:
        log_dir.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        raise LogDirError(
            f"cannot write to log_dir {log_dir} ({err.strerror or err}): pick a folder this job can create and write to "
            "(on several nodes, one they all share)"
        ) from None
    return log_dir


def _distributed() -> tuple[int, int, object]:
    """(rank, world size, the default store) with a process group; else torchrun's RANK and
    WORLD_SIZE, or a one-rank job."""
    if dist.is_available() and dist.is_initialized():
        try:
            store = dist.distributed_c10d._get_default_store()
        except (AttributeError, RuntimeError, ValueError):
            store = None
        return dist.get_rank(), dist.get_world_size(), store
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)), None


def _state(h: TraceHandler) -> dict:
    """What this rank is, for the job's record (env.json's fields)."""
    backend = dist.get_backend() if dist.is_available() and dist.is_initialized() else None
    cuda = torch.cuda.is_available()
    launcher = (
        ["torchrun", f"--nproc-per-node={os.environ.get('LOCAL_WORLD_SIZE', 1)}"] if "TORCHELASTIC_RUN_ID" in os.environ else ["python"]
    )
    return {
        "rank": h.rank,
        "world_size": h.world_size,
        "worker": h.worker_name,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "local_rank": int(os.environ.get("LOCAL_RANK", 0)),
        "node_rank": int(os.environ.get("GROUP_RANK", os.environ.get("NODE_RANK", 0))),
        "device": torch.cuda.get_device_name(job_gpu()) if cuda else platform.processor() or platform.machine(),
        "device_type": "cuda" if cuda else "cpu",
        "backend": backend,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "nccl": ".".join(map(str, torch.cuda.nccl.version())) if cuda and backend and "nccl" in backend else None,
        "gloo": f"bundled with torch {torch.__version__}" if backend and "gloo" in backend else None,
        "command": shlex.join([*launcher, *sys.argv]),
        "started": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }


def job_gpu() -> int | None:
    """The GPU this rank's job runs on, whether or not it called torch.cuda.set_device yet: the
    process group's bound device (init_process_group(device_id=...)), else LOCAL_RANK's (one rank
    per GPU, as torchrun starts them; modulo the visible GPUs, for a job that gives each rank one),
    else the current device. None without CUDA."""
    if not torch.cuda.is_available():
        return None
    if dist.is_available() and dist.is_initialized():
        bound = getattr(dist.group.WORLD, "bound_device_id", None)
        if bound is not None and bound.type == "cuda" and bound.index is not None:
            return bound.index
    if "LOCAL_RANK" in os.environ:
        return int(os.environ["LOCAL_RANK"]) % torch.cuda.device_count()
    return torch.cuda.current_device()


def _wait_before_stop() -> None:
    """On CUDA, let the job's last collectives end before the profiler stops (run/teardown.py)."""
    gpu = job_gpu()
    if gpu is not None:
        wait_for_collectives(torch.device("cuda", gpu))


def _inside_stop(prof) -> bool:
    """Whether this call comes from prof.stop() (the profiler's last trace), not from prof.step()."""
    frame: FrameType | None = sys._getframe(2)
    for _ in range(8):
        if frame is None:
            return False
        if frame.f_code.co_name in ("stop", "__exit__") and frame.f_locals.get("self") is prof:
            return True
        frame = frame.f_back
    return False


def _hook_stop(prof, handler: TraceHandler) -> None:
    """Finish when this profiler stops from now on (a profiler that never wrote a trace here is
    finished at exit)."""
    original = getattr(prof, "stop", None)
    if original is None or getattr(prof, "_profile_overlap_hooked", False) or isinstance(prof, OverlapProfile):
        return

    def stop() -> None:
        _wait_before_stop()
        original()
        handler.finish()

    prof.stop = stop
    prof._profile_overlap_hooked = True
