"""The job around the runs: backend and device checks, the process group (and what lets it end
cleanly), fresh run folders, and failures recorded in one line."""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import torch
import torch.distributed as dist

from profile_overlap.core import rank_output
from profile_overlap.core import status as run_status
from profile_overlap.core.errors import UserError
from profile_overlap.core.io import ensure_writable_dir
from profile_overlap.run.config import Config, JobSection
from profile_overlap.run.teardown import release_group_defaults

RUN_NAME = "{stamp}-{mode}-{backend}-w{world}"


def resolve_backend(config: JobSection) -> str:
    if config.job.backend != "auto":
        return config.job.backend
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


def _agree_on_config(config: JobSection) -> None:
    """Every rank must run the same config; compare a digest and name the differing fields."""
    world = dist.get_world_size()
    mine = (config.digest(), config.to_dict())
    everyone: list[tuple[str, dict[str, Any]] | None] = [None] * world
    dist.all_gather_object(everyone, mine)
    gathered = [e for e in everyone if e is not None]
    if all(digest == gathered[0][0] for digest, _ in gathered):
        return
    reference = gathered[0][1]
    differing = sorted(
        {k for _, cfg in gathered for k, v in cfg.items() if v != reference[k] and k not in ("nproc_per_node", "name", "out")}
    )
    detail = ", ".join(f"{k}: " + "/".join(str(cfg[k]) for _, cfg in gathered) for k in differing)
    raise UserError(f"ranks were started with different configs ({detail}): start every node with the same flags")


def make_dir(create: Callable[..., Path]) -> Path:
    """Rank 0 creates a fresh folder with `create()` (never reusing one); every rank learns its path.
    The job's first folder (the run, sweep or benchmark folder) receives every rank's log."""
    box: list[str | UserError | None] = [None]
    if dist.get_rank() == 0:
        try:
            box[0] = str(create())
        except UserError as err:
            box[0] = err
    dist.broadcast_object_list(box, src=0)
    made = box[0]
    if isinstance(made, UserError):
        raise made
    assert made is not None  # rank 0's path, broadcast
    rank_output.attach(Path(made), dist.get_rank())
    return Path(made)


def create_fresh_dir(config: JobSection, *, backend: str, world: int, label: str | None = None) -> Path:
    """A new folder in --out: --name, else RUN_NAME of `label` (a run's: its --mode)."""
    out = ensure_writable_dir(Path(config.job.out))
    if config.job.name:
        path = out / config.job.name
        try:
            path.mkdir()
        except FileExistsError:
            raise UserError(f"run folder {path} already exists and is never overwritten: pick another --name") from None
        return path
    if label is None:
        assert isinstance(config, Config)  # the other job commands name their folders
        label = config.workload.mode
    base = RUN_NAME.format(stamp=time.strftime("%Y%m%d-%H%M%S"), mode=label, backend=backend, world=world)
    for suffix in ["", *(f"-{i}" for i in range(2, 1000))]:
        try:
            (out / (base + suffix)).mkdir()
            return out / (base + suffix)
        except FileExistsError:
            continue
    raise UserError(f"too many runs named {base}* in {out}; give --name")


class Terminated(Exception):
    """SIGTERM: the launcher stops every rank when one fails, or the job was cancelled."""


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise Terminated("stopped by SIGTERM from the launcher (another rank failed, or the job was cancelled)")


def _failure_reason(err: BaseException) -> str:
    if isinstance(err, KeyboardInterrupt):
        return "interrupted by the user (Ctrl-C)"
    text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    # An async collective's wait() raises gloo's own words, without its source path.
    transport = any(word in text for word in ("/gloo/", "Timed out", "Application timeout", "pair closure")) or "nccl" in text.lower()
    if isinstance(err, dist.DistError) or transport:
        # gloo appends advice and an emoji after the first sentence; the first sentence is the fact.
        text = f"a collective failed: another rank crashed, hung or timed out ({text.split('. ')[0][:300]})"
    return f"rank {dist.get_rank() if dist.is_initialized() else '?'}: {text}"


def init_process_group(backend: str, device: torch.device, timeout_s: float) -> None:
    """dist.init_process_group, then release_group_defaults(): torch.profiler's first trace imports
    torch.distributed.nn.functional, whose default arguments would otherwise hold the group past
    destroy_process_group, to be destroyed during interpreter finalization, where a gloo worker can
    abort the process after a run that succeeded (run/teardown.py explains it). Our runs free every
    object that holds the group before process_group() destroys it, so the group ends there, its
    workers joined. tests/test_teardown.py checks that no gloo thread is left."""
    dist.init_process_group(backend=backend, timeout=dt.timedelta(seconds=timeout_s), device_id=device if device.type == "cuda" else None)
    release_group_defaults()


@contextlib.contextmanager
def process_group(config: JobSection) -> Iterator[tuple[str, torch.device]]:
    """Checks, then the process group for the whole job (one run, or every point of a sweep).
    Yields (backend, device). On the way out, destroy_process_group frees the group and joins its
    threads (see init_process_group for what makes this true)."""
    backend = resolve_backend(config)
    device = check_devices(backend)
    signal.signal(signal.SIGTERM, _raise_terminated)
    init_process_group(backend, device, config.job.timeout_s)
    try:
        _agree_on_config(config)
        try:
            config.check_world_size(dist.get_world_size())
        except ValueError as err:
            raise UserError(str(err)) from None
        yield backend, device
    except BaseException:
        # A failure, its status written: the rank still owes its one-line error (printed by
        # cli.main). The launcher SIGTERMs the other ranks the moment one exits, and a rank killed
        # during destroy_process_group would end without a word, so SIGTERM waits until the
        # process exits (the launcher sends SIGKILL if it ever has to wait too long).
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        dist.destroy_process_group()
        raise
    else:
        # Status is written: a SIGTERM from here on (the launcher stopping us) just ends the process.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        dist.destroy_process_group()


class _CtrlC:
    """SIGINT while a run is recorded: remembered, then KeyboardInterrupt once.

    What a rank sees of a Ctrl-C depends on when it lands: in Python, a KeyboardInterrupt; in a
    collective, nothing until the collective returns, perhaps failed because the other rank has
    already stopped; in a callback that swallows exceptions, nothing at all. And the launcher
    forwards a second SIGINT, which can land in the bookkeeping itself. So the rank remembers that
    it was interrupted (whatever exception then reaches failure_recorded, the run is marked
    interrupted) and raises KeyboardInterrupt for the first SIGINT only."""

    def __init__(self) -> None:
        self.seen = False
        self.armed = True  # False once the bookkeeping has begun: it must not be cut short

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        first, self.seen = not self.seen, True
        if first and self.armed:
            raise KeyboardInterrupt


@contextlib.contextmanager
def failure_recorded(run_dir: Path) -> Iterator[None]:
    """Any fault inside marks run_dir failed or interrupted (the first rank to fail names the
    reason) and becomes a one-line error; PROFILE_OVERLAP_DEBUG=1 keeps the traceback. A Ctrl-C
    (SIGINT) at any moment inside marks it interrupted (_CtrlC says why that needs a handler)."""
    ctrl_c = _CtrlC()
    # Signal handlers can be set only from the main thread; elsewhere a Ctrl-C arrives as the main thread's.
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, ctrl_c) if main_thread else None
    try:
        yield
    except BaseException as err:
        ctrl_c.armed = False
        if main_thread:
            # The launcher SIGTERMs this rank the moment another one dies, often while a collective
            # that failed for that reason is being recorded here: a Terminated raised inside the
            # status write would leave the run marked running. The rank is ending either way
            # (process_group ignores SIGTERM from here on too; the launcher SIGKILLs a rank that lingers).
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        interrupted = ctrl_c.seen or isinstance(err, KeyboardInterrupt)
        reason = _failure_reason(KeyboardInterrupt() if interrupted else err)
        run_status.write_if_running(run_dir, "interrupted" if interrupted else "failed", reason=reason)
        if isinstance(err, KeyboardInterrupt):
            raise
        if interrupted:  # what the Ctrl-C caused (a collective failed, the launcher's SIGTERM): it stops the rank as one
            raise KeyboardInterrupt from err
        if isinstance(err, UserError) or os.environ.get("PROFILE_OVERLAP_DEBUG"):
            raise
        raise UserError(f"run failed, {reason}; {run_dir} is marked failed{rank_output.where_logs(run_dir)}", exit_code=1) from None
    finally:
        # Interrupted: later SIGINTs (the launcher forwards one) stay ignored through the teardown.
        if main_thread:
            signal.signal(signal.SIGINT, signal.SIG_IGN if ctrl_c.seen else (previous if previous is not None else signal.SIG_DFL))
