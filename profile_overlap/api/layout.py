"""The job folder: one per job under the log_dir given to trace_handler, so that two jobs writing
into one log_dir never mix their traces.

    <log_dir>/<job>/                         a TensorBoard run and a run folder of ours
        <host>_<rank>.<time_ns>.pt.trace.json.gz   one per rank and profiler cycle
        rank<r>/events.out.tfevents.*        rank r's scalars, x = the global training step
        metrics.json timeline.json status.json report.html report.md report.json timeline.png
        job/events.out.tfevents.*            the record's TensorBoard files (HParams, text, timeline image)
        .profile_overlap/rank<r>.state       what rank r is (host, device, versions, traces it dropped)
        .profile_overlap/rank<r>.done        rank r stopped profiling: every trace it wrote is final
        .profile_overlap/rank<r>.dropped     one line per trace rank r dropped (a full disk)

<job> is `<YYYYmmdd-HHMMSS>-<id>`, agreed by all ranks through the process group's store (the first
rank to ask sets it), else `job-<TORCHELASTIC_RUN_ID>`; PROFILE_OVERLAP_JOB names it outright.
Nothing here imports torch. The state files are JSON with other suffixes: `analyze` takes every
*.json under a folder for a trace.
"""

from __future__ import annotations

import glob
import gzip
import json
import os
import re
import shutil
import time
from pathlib import Path

import msgspec

from profile_overlap.core.errors import UserError
from profile_overlap.core.files import METRICS_JSON
from profile_overlap.core.io import write_text_atomic
from profile_overlap.record import metrics

STATE_DIR = ".profile_overlap"
TRACE_SUFFIX = ".pt.trace.json.gz"
PARTIAL_PREFIX = ".partial-"
"""A trace being written: hidden, and never ending in .json, so no reader takes it for a trace."""
JOB_MODE = metrics.JOB_MODE
"""The one mode of a job's record."""
JOB_ENV = "PROFILE_OVERLAP_JOB"
WAIT_ENV = "PROFILE_OVERLAP_JOB_WAIT_S"
DEFAULT_WAIT_S = 60.0
"""How long rank 0 waits at the end for the other ranks to finish their traces."""


def wait_s() -> float:
    return float(os.environ.get(WAIT_ENV, DEFAULT_WAIT_S))


def _run_id() -> str | None:
    """torchrun's rendezvous id (a uuid with --standalone, --rdzv-id otherwise), per restart."""
    run_id = os.environ.get("TORCHELASTIC_RUN_ID", "")
    if not run_id or run_id == "none":
        return None
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    return run_id if restart == "0" else f"{run_id}-r{restart}"


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._") or "job"


def job_name(log_dir: Path, *, store=None, world_size: int = 1) -> str:
    """The job's folder name, the same on every rank. `store`: the default process group's store
    (any rank may ask first: compare_set keeps the first answer), None without a process group."""
    if os.environ.get(JOB_ENV):
        return _safe(os.environ[JOB_ENV])
    run_id = _run_id()
    mine = f"{time.strftime('%Y%m%d-%H%M%S')}-{_safe(run_id)[:8] if run_id else f'p{os.getpid()}'}"
    if store is not None:
        try:
            key = f"profile_overlap/job/{Path(log_dir).resolve()}"
            return store.compare_set(key, "", mine).decode()
        except (AttributeError, RuntimeError):
            pass  # a store without compare_set: fall back on the launcher's id
    if world_size > 1 and run_id:
        return f"job-{_safe(run_id)}"
    return mine


def state_path(job_dir: Path, rank: int) -> Path:
    return Path(job_dir) / STATE_DIR / f"rank{rank}.state"


def done_path(job_dir: Path, rank: int) -> Path:
    return Path(job_dir) / STATE_DIR / f"rank{rank}.done"


def write_state(job_dir: Path, rank: int, state: dict) -> None:
    path = state_path(job_dir, rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(state, indent=1), durable=True)


class RankState(msgspec.Struct, frozen=True, kw_only=True):
    """A rank's state file: what the rank is (handler._state writes it; env.json's fields for a job)."""

    rank: int
    world_size: int = 1
    worker: str = ""
    """The trace file name's worker part (torch.profiler's worker_name)."""
    host: str | None = None
    pid: int | None = None
    local_rank: int | None = None
    node_rank: int | None = None
    device: str | None = None
    device_type: str | None = None
    backend: str | None = None
    python: str | None = None
    torch: str | None = None
    cuda: str | None = None
    nccl: str | None = None
    gloo: str | None = None
    command: str | None = None
    started: str | None = None
    """When the rank's handler started (UTC, ISO 8601)."""


def read_states(job_dir: Path) -> dict[int, RankState]:
    """Every rank's state file, by rank (unreadable ones left out: the record says what is missing)."""
    states = {}
    for path in sorted((Path(job_dir) / STATE_DIR).glob("rank*.state")):
        try:
            state = msgspec.json.decode(path.read_bytes(), type=RankState)
        except (OSError, msgspec.DecodeError):
            continue
        states[state.rank] = state
    return states


class DoneMark(msgspec.Struct, frozen=True):
    """A rank's done file: it ended its `session`-th profiling session (1, 2, ...; a job may stop and
    start its profiler) with `traces` traces written in all."""

    traces: int = 0
    session: int = 1


def mark_done(job_dir: Path, rank: int, *, traces: int, session: int) -> None:
    """Rank `rank` ended its `session`-th profiling session."""
    done_path(job_dir, rank).parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(done_path(job_dir, rank), msgspec.json.encode(DoneMark(traces, session)).decode(), durable=True)


def record_drop(job_dir: Path, rank: int, *, name: str, step: int | None, reason: str) -> None:
    """Best effort (the disk may be full): one line per dropped trace, for the record's count."""
    try:
        (Path(job_dir) / STATE_DIR).mkdir(exist_ok=True)
        with open(Path(job_dir) / STATE_DIR / f"rank{rank}.dropped", "a") as f:
            f.write(json.dumps({"name": name, "step": step, "reason": reason}) + "\n")
    except OSError:
        pass


def num_dropped(job_dir: Path) -> int:
    total = 0
    for path in (Path(job_dir) / STATE_DIR).glob("rank*.dropped"):
        try:
            total += sum(1 for line in path.read_text().splitlines() if line.strip())
        except OSError:
            continue
    return total


def compress(partial: Path, final: Path, *, level: int) -> None:
    """Gzip a complete trace into `final` atomically (a hidden partial, then a rename); the partial
    gzip is removed when writing fails (a full disk)."""
    tmp = final.with_name(PARTIAL_PREFIX + final.name + ".part")
    try:
        with open(partial, "rb") as src, gzip.open(tmp, "wb", compresslevel=level) as dst:
            shutil.copyfileobj(src, dst, length=1 << 20)
        os.replace(tmp, final)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise


def complete(path: Path) -> bool:
    """A whole Chrome trace is one JSON object: Kineto's writer stops silently when the disk fills,
    so look at the last bytes rather than trust the export call."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64))
            return f.read().rstrip().endswith(b"}")
    except OSError:
        return False


def remove_partials(job_dir: Path, name: str) -> None:
    """A dropped trace's pieces: ours and Kineto's own <path>.tmp."""
    for leftover in Path(job_dir).glob(PARTIAL_PREFIX + glob.escape(name) + "*"):
        leftover.unlink(missing_ok=True)


def done_ranks(job_dir: Path, *, session: int = 1) -> set[int]:
    """The ranks that ended their `session`-th profiling session (or a later one)."""
    done = set()
    for path in (Path(job_dir) / STATE_DIR).glob("rank*.done"):
        try:
            if msgspec.json.decode(path.read_bytes(), type=DoneMark).session >= session:
                done.add(int(path.name[4:-5]))
        except (OSError, ValueError, msgspec.DecodeError):
            continue
    return done


def traces_of(job_dir: Path, worker: str) -> list[Path]:
    """The final traces one worker (`<host>_<rank>`) wrote into the job folder."""
    return sorted(p for p in Path(job_dir).iterdir() if p.name.startswith(worker + ".") and p.name.endswith(TRACE_SUFFIX))


def _has_traces(folder: Path) -> bool:
    return any(p.name.endswith((".pt.trace.json", TRACE_SUFFIX)) for p in folder.iterdir() if p.is_file())


def find_job_dir(path: Path) -> Path:
    """The job folder `path` names: itself when it is one (or a folder of traces, or a run folder),
    else the latest job folder in it (a log_dir)."""
    path = Path(path)
    if not path.is_dir():
        raise UserError(f"{path} is not a folder: give the log_dir of profile_overlap.trace_handler or profile, or a job folder in it")
    if (path / METRICS_JSON).is_file() or (path / STATE_DIR).is_dir() or _has_traces(path):
        return path
    jobs = [d for d in path.iterdir() if d.is_dir() and ((d / STATE_DIR).is_dir() or (d / METRICS_JSON).is_file())]
    if not jobs:
        raise UserError(
            f"{path} is not a run folder (no status.json or metrics.json) and holds no job (no trace files, no job folder): "
            "give a folder made by `profile_overlap run`, the log_dir of profile_overlap.trace_handler or profile, "
            "or a folder of torch.profiler traces"
        )
    return max(jobs, key=_started)


def _started(job_dir: Path) -> tuple:
    """When the job began (its earliest rank state), then its name: the latest job sorts last."""
    times = [s.started or "" for s in read_states(job_dir).values()]
    return (min(times) if times else "", job_dir.name)
