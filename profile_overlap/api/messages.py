"""What a rank's trace handler (api/handler.py) tells its worker process (api/worker.py): the
worker's configuration, on its command line, and the tasks, one JSON object per line on its stdin.
Typed here once for both sides; on the wire each task is an object whose "op" names it."""

from __future__ import annotations

import msgspec


class WorkerConfig(msgspec.Struct, frozen=True):
    job_dir: str
    rank: int
    world_size: int
    worker: str
    """The rank's worker name, the prefix of its trace files (api/layout.py)."""
    analyze: bool = True
    """Whether the worker analyses each trace (its scalars, rank 0's live and final record)."""


class TraceTask(msgspec.Struct, frozen=True, tag="trace", tag_field="op"):
    """Move a trace the profiler has written (`partial`) into place, gzipped (`final`), and analyse it."""

    partial: str
    final: str
    step: int | None = None
    """The profiler's step number when it wrote the trace (for a dropped trace's message)."""


class DoneTask(msgspec.Struct, frozen=True, tag="done", tag_field="op"):
    """The rank wrote `traces` traces in all (its `session`-th stop); rank 0 then finalizes the job."""

    traces: int
    session: int
    finalize: bool = False


class Ping(msgspec.Struct, frozen=True, tag="ping", tag_field="op"):
    """Answered with a line `pong ID` once every earlier task is done."""

    id: int


Task = TraceTask | DoneTask | Ping

_TASK = msgspec.json.Decoder(Task)
_CONFIG = msgspec.json.Decoder(WorkerConfig)


def encode(message: WorkerConfig | Task) -> str:
    return msgspec.json.encode(message).decode()


def decode_task(line: bytes) -> Task:
    return _TASK.decode(line)


def decode_config(text: str) -> WorkerConfig:
    return _CONFIG.decode(text)
