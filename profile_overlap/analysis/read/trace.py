"""Load one PyTorch profiler (Kineto) Chrome-trace file into compact numpy columns.

JSON only (plain or gzip, detected by content, any file name); never pickle. Does not import torch,
so `analyze` starts fast.

Memory: a 100 MB trace decoded into Python dicts takes well over 1 GB. We stream instead: the
file is decompressed in chunks, each chunk is cut at an event boundary and decoded with msgspec
into typed Structs that carry only the fields the analysis reads (unknown keys are skipped
without being built), and the events we need are appended to compact columns before the next
chunk is read. Peak memory is then about one chunk plus the columns, not the whole file. The
chunking is `stream`; what is decoded and kept is here.
"""

from __future__ import annotations

import contextlib
import gzip
import re
import sys
import zlib
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import msgspec
import numpy as np

from profile_overlap.analysis.read.classify import is_collective_op
from profile_overlap.analysis.read.stream import WHOLE_BYTES, NotATrace, chunks_of, read_chunks, small_content, stream_events
from profile_overlap.analysis.read.trace_args import CollectiveArgs, RowArgs
from profile_overlap.core.errors import UserError

CHUNK_BYTES = 128 << 10
"""Decompressed bytes decoded at a time (decoded Structs cost several times their JSON). Measured on a
76 MB trace: 8 MiB chunks peak at 2x the file, 2 MiB at 1.2x. Smaller is faster too, the decoded
chunk staying in the CPU's caches: 2 x 76 MB parsed in 0.89 s at 128 KiB against 1.18 s at 2 MiB, and
a 1 GB trace's load_trace peaks 116 MiB against 132 (its Structs leave fewer holes in the heap)."""

KERNEL_CATS = frozenset({"kernel", "Kernel"})
CPU_CATS = frozenset({"cpu_op", "user_annotation", "gpu_user_annotation"})
RUNTIME_CATS = frozenset({"cuda_runtime", "cuda_driver", "runtime"})
# Kernel arguments that describe a collective (recent PyTorch adds them to NCCL kernels).
_KERNEL_COMM_ARGS = ("collective_name", "in_nelems", "out_nelems", "group_size")
# A rank number in a file name, e.g. rank3.*, rank-3, worker3, host_3; else any short number.
_RANK_IN_NAME = re.compile(r"(?:rank|worker|host|node|trainer)[-_]?(\d{1,5})(?!\d)", re.IGNORECASE)
_NUMBER_IN_NAME = re.compile(r"(?<!\d)(\d{1,5})(?!\d)")


# ---------------------------------------------------------------- what msgspec decodes


# Numbers the analysis keeps in int64 columns, bounded as they are decoded: a larger one is one line
# ("not a PyTorch profiler trace ... Expected `int` <= ..."), not an OverflowError later.
_Int64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]
_Count = Annotated[int, msgspec.Meta(ge=0, le=2**53)]
"""Elements of a message: times a dtype's bytes, still an exact float and an int64."""
_Rank = Annotated[int, msgspec.Meta(ge=0, le=2**31 - 1)]


class _Args(msgspec.Struct, gc=False):
    correlation: _Int64 = -1
    external_id: _Int64 = msgspec.field(default=-1, name="External id")
    external_id_lower: _Int64 = msgspec.field(default=-1, name="external id")
    stream: int | str | None = None
    input_dims: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Input Dims")
    input_type: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Input type")
    concrete_inputs: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Concrete Inputs")
    collective_name: str | None = msgspec.field(default=None, name="Collective name")
    in_nelems: _Count | None = msgspec.field(default=None, name="In msg nelems")
    out_nelems: _Count | None = msgspec.field(default=None, name="Out msg nelems")
    dtype: str | None = None
    group_size: _Rank | None = msgspec.field(default=None, name="Group size")
    pg_name: str | None = msgspec.field(default=None, name="Process Group Name")
    pg_desc: str | None = msgspec.field(default=None, name="Process Group Description")
    src_rank: int | None = msgspec.field(default=None, name="Src Rank")
    dst_rank: int | None = msgspec.field(default=None, name="Dst Rank")
    pg_ranks: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Process Group Ranks")
    name: str | None = None  # thread_name / process_name metadata


class _Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: int | str = 0
    tid: int | str = 0
    ts: float = 0.0
    dur: float = 0.0
    args: _Args | None = None


class _PgConfig(msgspec.Struct):
    pg_name: str = ""
    pg_desc: str = ""
    pg_size: _Rank = 0
    ranks: list[int] | str | None = None


class _DistributedInfo(msgspec.Struct):
    backend: str | None = None
    rank: _Rank | None = None
    world_size: _Int64 | None = None
    pg_config: list[_PgConfig] = []


class _Outer(msgspec.Struct):
    traceEvents: list[msgspec.Raw]
    distributedInfo: _DistributedInfo | None = None


class _Whole(msgspec.Struct):
    """A small trace decoded in one go (`_decode_whole`): the events and the metadata together."""

    traceEvents: list[_Event]
    distributedInfo: _DistributedInfo | None = None


_EVENTS = msgspec.json.Decoder(list[_Event])
_OUTER = msgspec.json.Decoder(_Outer)
_WHOLE = msgspec.json.Decoder(_Whole)


def _decode_whole(content: bytes) -> tuple[_Sink, _DistributedInfo | None] | None:
    """A small, well-formed trace read with one decode of its whole content (a sixth of reading a
    100 kB trace went to cutting it into runs of events): its sink and its distributedInfo. None for
    anything else (over WHOLE_BYTES, one `traceEvents` key not found exactly once, not decodable, no
    events), which the streaming reader reads, and explains, as it always has."""
    if len(content) > WHOLE_BYTES or content.count(b'"traceEvents"') != 1:
        return None
    try:
        doc = _WHOLE.decode(content)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None
    if not doc.traceEvents:
        return None
    sink = _Sink()
    sink.add(doc.traceEvents)
    return sink, doc.distributedInfo


# ---------------------------------------------------------------- what the analysis gets


@dataclass(frozen=True)
class Events:
    """One kind of event as columns. `name` and `tid` index into `names` / `tids`."""

    names: tuple[str, ...]
    tids: tuple[str, ...]
    name: np.ndarray  # int16 codes (int32 when there are over 32,767 names)
    tid: np.ndarray  # int16 codes (int32 when there are over 32,767 threads)
    ts: np.ndarray  # float64, µs
    dur: np.ndarray  # float64, µs
    cat: np.ndarray  # int8: index into the category tuple of the table
    external_id: np.ndarray  # int32 (int64 when an id needs it), -1 if absent; kernels only (empty for CPU events: see args)
    args: RowArgs  # row -> collective args, only for collective events
    shape: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int32))
    """int16 (int32 past 32,767 shapes) code of each CPU op's `Input Dims` in `shapes`, -1 without (interference matches
    operators by name and shapes); empty for kernels."""
    shapes: tuple[str, ...] = ()

    def __len__(self) -> int:
        return int(self.name.size)  # not ts: a reader may have released it

    def name_of(self, row: int | np.integer) -> str:
        return self.names[int(self.name[row])]

    def release(self, *columns: str) -> None:
        """Free these columns, for a reader that is done with them (`extract(trace, release=True)`,
        peak memory). Reading one of them afterwards raises AttributeError."""
        for name in columns:
            object.__delattr__(self, name)


@dataclass(frozen=True)
class ProcessGroupInfo:
    """One process group a rank's trace declares (Kineto's `distributedInfo.pg_config`)."""

    name: str
    desc: str
    """`pg_desc`: "default_pg", a DeviceMesh dimension ("mesh_dp", "mesh_tp"), or "" when absent."""
    size: int
    ranks: tuple[int, ...]
    """The group's global ranks, in group-rank order; empty when the trace does not list them."""


def _ranks(value: list[int] | str | None) -> tuple[int, ...]:
    """pg_config's `ranks`: a list, or a string such as "[0, 1]" (older Kineto)."""
    if isinstance(value, list):
        return tuple(value)  # msgspec decoded them as int (list[int]): at 1,024 ranks, no per-rank int()
    if isinstance(value, str):
        return tuple(int(x) for x in re.findall(r"\d+", value))
    return ()


@dataclass(frozen=True)
class Trace:
    """The parts of one trace file that the analysis reads."""

    path: Path
    rank: int | None
    rank_source: str
    """Where `rank` came from: "distributedInfo.rank", "file name", or "unknown"."""
    pid: str
    """The process id of the CPU events (the first seen), as a string."""
    backend: str | None
    world_size: int | None
    pg_sizes: dict[str, int]
    groups: tuple[ProcessGroupInfo, ...]
    """The rank's process groups as pg_config declares them, in the order they were created."""
    thread_names: dict[str, tuple[str, ...]]
    """tid -> every name given to that thread by `thread_name` metadata events."""
    kernels: Events
    cpu: Events
    """cpu_op (cat 0), user_annotation (cat 1) and gpu_user_annotation (cat 2) events."""
    launch: np.ndarray
    launch_tid: np.ndarray
    """Per kernel, the start (NaN: unknown) and thread code (into cpu.tids, -1: unknown; int16 when the
    codes fit, like `Events.tid`) of the runtime call that launched it (cudaLaunchKernel ...), linked
    by `correlation` when the file is read (`_launches`); the runtime events themselves are not kept."""

    def release_launches(self) -> None:
        """Free `launch` and `launch_tid` (as Events.release does for its columns)."""
        for name in ("launch", "launch_tid"):
            object.__delattr__(self, name)


CPU_OP, USER_ANNOTATION, GPU_USER_ANNOTATION = 0, 1, 2
_CPU_CAT_CODE = {"cpu_op": CPU_OP, "user_annotation": USER_ANNOTATION, "gpu_user_annotation": GPU_USER_ANNOTATION}


class _Columns:
    def __init__(self, names: dict[str, int], tids: dict[int | str, int], *, ids: bool) -> None:
        """ids: keep every event's External id and correlation (kernels); else only the External
        id of events with args (CPU ops: nothing reads the rest, 16 bytes an event)."""
        self.names, self.tids, self.ids = names, tids, ids
        # Each column in its final type from the start (codes int16, ids int32), widened in place the
        # first time a value does not fit (`_append`): no full-width copy while reading, none to narrow after.
        self.name, self.tid, self.cat = array("h"), array("h"), array("b")
        self.ts, self.dur = array("d"), array("d")
        self.ext, self.corr = array("i"), array("i")
        self.arg_rows, self.arg_codes, self.arg_ext = array("i"), array("i"), array("i")
        self.shape, self.shapes = array("h"), dict[bytes, int]()

    def extend(self, events: list[_Event], cats: list[int]) -> list[int]:
        """Append events (list comprehensions: several times faster than a per-event method).
        Returns their name codes."""
        names, tids = self.names, self.tids
        codes = [names.setdefault(e.name, len(names)) for e in events]
        _append(self, "name", codes)
        _append(self, "tid", [tids.setdefault(e.tid, len(tids)) for e in events])
        self.cat.extend(cats)
        self.ts.extend([e.ts for e in events])
        self.dur.extend([e.dur for e in events])
        if self.ids:
            _append(self, "ext", [max(a.external_id, a.external_id_lower) if (a := e.args) is not None else -1 for e in events])
            _append(self, "corr", [a.correlation if (a := e.args) is not None else -1 for e in events])
        else:
            shapes = self.shapes
            _append(
                self,
                "shape",
                [shapes.setdefault(bytes(a.input_dims), len(shapes)) if (a := e.args) is not None and a.input_dims else -1 for e in events],
            )
        return codes

    def add_args(self, row: int, args: _Args, shared: _SharedArgs) -> None:
        self.arg_rows.append(row)
        self.arg_codes.append(shared.code(args))
        ext = max(args.external_id, args.external_id_lower)
        try:
            self.arg_ext.append(ext)
        except OverflowError:
            _widen(self, "arg_ext").append(ext)

    def freeze(self, shared: _SharedArgs) -> Events:
        # Views of the arrays, not copies: a copy would double the peak for a moment.
        return Events(
            names=tuple(self.names),
            tids=tuple(str(t) for t in self.tids),
            name=_view(self.name),
            tid=_view(self.tid),
            ts=_column(self.ts, np.float64),
            dur=_column(self.dur, np.float64),
            cat=_column(self.cat, np.int8),
            external_id=_view(self.ext),
            args=RowArgs(self.arg_rows, self.arg_codes, tuple(shared.values), _view(self.arg_ext)),
            shape=_view(self.shape),
            shapes=tuple(x.decode() for x in self.shapes),
        )


_WIDER = {"h": "i", "i": "q"}
_DTYPE = {"h": np.int16, "i": np.int32, "q": np.int64}


def _append(owner: Any, attr: str, values: list[int]) -> None:
    """Append to the int column `owner.attr`, widened (int16 -> int32 -> int64) the first time a
    value does not fit: a trace has a few hundred names and threads, and ids that count its events,
    so the narrow type is the usual one."""
    a = getattr(owner, attr)
    n = len(a)
    try:
        a.extend(values)
    except OverflowError:
        del a[n:]  # extend() keeps what it appended before the value that did not fit
        _widen(owner, attr)
        _append(owner, attr, values)


def _widen(owner: Any, attr: str) -> array[int]:
    """The int column `owner.attr` copied into the next wider type, in its place (returned)."""
    a = getattr(owner, attr)
    wide = array(_WIDER[a.typecode], a)
    setattr(owner, attr, wide)
    return wide


def _view(a: array[int]) -> np.ndarray:
    """A read-only numpy view of an int column in its type (`_append`); empty: int16 for codes, int64 for ids."""
    if not len(a):
        return np.zeros(0, dtype=np.int16 if a.typecode == "h" else np.int64)
    return _column(a, _DTYPE[a.typecode])


def _column(a: array[int] | array[float], dtype: Any) -> np.ndarray:
    """A read-only numpy view of a compact array (an empty array cannot be viewed)."""
    col = np.frombuffer(a, dtype=dtype) if len(a) else np.zeros(0, dtype=dtype)
    col.flags.writeable = False
    return col


class _SharedArgs:
    """One CollectiveArgs per distinct set of arguments, shared by the events that have it (a
    trace repeats the same few collectives every step), coded by position in `values`."""

    def __init__(self) -> None:
        self.codes: dict[tuple[Any, ...], int] = {}
        self.values: list[CollectiveArgs] = []

    def code(self, a: _Args) -> int:
        # bytes() of the raw fields: a msgspec.Raw pins the whole chunk in memory.
        key = (
            a.collective_name,
            a.in_nelems,
            a.out_nelems,
            a.dtype,
            a.group_size,
            a.pg_name,
            a.pg_desc,
            a.src_rank,
            a.dst_rank,
            bytes(a.pg_ranks),
            bytes(a.input_dims),
            bytes(a.input_type),
            bytes(a.concrete_inputs),
        )
        code = self.codes.get(key)
        if code is None:
            code = self.codes[key] = len(self.values)
            self.values.append(
                CollectiveArgs(
                    collective_name=a.collective_name,
                    in_nelems=a.in_nelems,
                    out_nelems=a.out_nelems,
                    dtype=a.dtype,
                    group_size=a.group_size,
                    pg_name=a.pg_name,
                    pg_desc=a.pg_desc,
                    src_rank=a.src_rank,
                    dst_rank=a.dst_rank,
                    pg_ranks=msgspec.json.decode(key[9]) if key[9] else None,
                    input_dims=msgspec.json.decode(key[10]) if key[10] else None,
                    input_type=msgspec.json.decode(key[11]) if key[11] else None,
                    concrete_inputs=msgspec.json.decode(key[12]) if key[12] else None,
                )
            )
        return code


class _Sink:
    """Receives decoded events chunk by chunk and keeps what the analysis needs."""

    def __init__(self) -> None:
        tids: dict[int | str, int] = {}
        self.kernels = _Columns({}, {}, ids=True)
        self.cpu = _Columns({}, tids, ids=False)
        self.shared = _SharedArgs()
        self.rt_corr, self.rt_ts, self.rt_tid = array("i"), array("d"), array("h")
        self.thread_names: dict[str, list[str]] = {}
        self.pid: str | None = None
        self.collective_codes: set[int] = set()
        self.checked_names = 0

    def add(self, events: list[_Event]) -> None:
        kernels = [e for e in events if e.cat in KERNEL_CATS]
        if kernels:
            base = len(self.kernels.ts)
            self.kernels.extend(kernels, [0] * len(kernels))
            for i, e in enumerate(kernels):
                a = e.args
                if a is not None and (a.collective_name is not None or a.in_nelems is not None):
                    self.kernels.add_args(base + i, a, self.shared)
        cpu = [e for e in events if e.cat in CPU_CATS]
        if cpu:
            if self.pid is None:
                self.pid = next((str(e.pid) for e in cpu if e.cat == "cpu_op"), None)
            base = len(self.cpu.ts)
            codes = self.cpu.extend(cpu, [_CPU_CAT_CODE[e.cat] for e in cpu])
            names = list(self.cpu.names)
            # CPU events whose arguments (shapes, dtypes) we keep: the ones that describe a collective.
            self.collective_codes.update(c for c in range(self.checked_names, len(names)) if is_collective_op(names[c]))
            self.checked_names = len(names)
            wanted = self.collective_codes
            for i, code in enumerate(codes):
                args = cpu[i].args
                if code in wanted and args is not None:
                    self.cpu.add_args(base + i, args, self.shared)
        runtime = [
            (e.args.correlation, e.ts, e.tid) for e in events if e.cat in RUNTIME_CATS and e.args is not None and e.args.correlation != -1
        ]
        if runtime:
            tids = self.cpu.tids
            _append(self, "rt_corr", [correlation for correlation, _, _ in runtime])
            self.rt_ts.extend([ts for _, ts, _ in runtime])
            _append(self, "rt_tid", [tids.setdefault(tid, len(tids)) for _, _, tid in runtime])
        for e in events:
            if e.ph == "M" and e.name == "thread_name" and e.args is not None and e.args.name:
                self.thread_names.setdefault(str(e.tid), []).append(e.args.name)


# ---------------------------------------------------------------- entry point


def rank_from_file_name(path: Path) -> int | None:
    """The rank in a file name like rank3.json, worker1.pt.trace.json or host_0.123.pt.trace.json.gz."""
    name = path.name
    m = _RANK_IN_NAME.search(name)
    if m is None:
        m = _NUMBER_IN_NAME.search(name)
    return int(m.group(1)) if m else None


@contextlib.contextmanager
def decode_errors(path: Path) -> Iterator[None]:
    """Reading and decoding a trace file (load_trace, and perfetto's passes over it): each way it
    can fail is a UserError, one line naming the file, the problem and the fix."""
    fix = "remove it from the folder or pass --skip-bad"
    try:
        yield
    except (EOFError, gzip.BadGzipFile, zlib.error) as err:
        raise UserError(f"{path} is a truncated or corrupt gzip file ({err}); re-copy it or {fix}") from None
    except NotATrace as err:
        raise UserError(f"{path} is not a PyTorch profiler trace: {err}; {fix}") from None
    except msgspec.ValidationError as err:
        raise UserError(f"{path} is not a PyTorch profiler trace ({err}); {fix}") from None
    except msgspec.DecodeError as err:
        raise UserError(f"{path} is not valid JSON ({err}); {fix}") from None
    except RecursionError:
        # msgspec's decoder recurses per level of arrays and objects, up to Python's recursion limit.
        raise UserError(
            f"{path} is not a PyTorch profiler trace: its arrays or objects nest over {sys.getrecursionlimit()} deep "
            f"(a profiler's nest a few levels); {fix}"
        ) from None
    except OSError as err:
        raise UserError(f"cannot read {path}: {err}; {fix}") from None


MAX_TIME_US = 2**63 / 1e3
"""The furthest time or duration a profiler clock holds (Kineto counts int64 nanoseconds)."""


def _magnitude(col: np.ndarray) -> float:
    """The largest |value| of a float column, NaN ignored (0 when empty or all NaN), without a
    full-length temporary: at 1 GB, np.abs of the CPU events' ts and dur is 3 x 15 MB at once."""
    if not col.size:
        return 0.0
    top = max(float(np.fmax.reduce(col)), -float(np.fmin.reduce(col)))
    return 0.0 if top != top else top


def load_trace(path: Path, *, chunk_bytes: int = CHUNK_BYTES) -> Trace:
    """Read one trace file. Raises UserError naming the problem and the fix for a file that is
    empty, not JSON, a cut-short gzip or JSON that is not a PyTorch profiler trace."""
    path = Path(path)
    fix = "remove it from the folder or pass --skip-bad"
    try:
        size = path.stat().st_size
    except OSError as err:
        raise UserError(f"cannot read {path}: {err.strerror}; check the path and its permissions") from None
    if size == 0:
        raise UserError(f"{path} is empty (0 bytes), probably an interrupted write; {fix}")
    with decode_errors(path):
        content = small_content(path)  # read once: decoded whole, or streamed from memory
    # Another chunk size than CHUNK_BYTES: the streaming reader's own tests.
    whole = _decode_whole(content) if content is not None and chunk_bytes == CHUNK_BYTES else None
    if whole is not None:
        sink, info = whole
    else:
        sink = _Sink()
        chunks = chunks_of(content, chunk_bytes) if content is not None else read_chunks(path, chunk_bytes)
        with decode_errors(path):
            info = _OUTER.decode(stream_events(chunks, _EVENTS.decode, sink.add)).distributedInfo

    kernels, cpu = sink.kernels.freeze(sink.shared), sink.cpu.freeze(sink.shared)
    launch, launch_tid = _launches(_view(sink.kernels.corr), _view(sink.rt_corr), _column(sink.rt_ts, np.float64), _view(sink.rt_tid))
    pid, thread_names = sink.pid or "", {tid: tuple(names) for tid, names in sink.thread_names.items()}
    del sink  # the runtime calls and the kernels' correlations: not needed past the links
    for events in (kernels, cpu):
        if _magnitude(events.ts) + _magnitude(events.dur) <= MAX_TIME_US:
            continue  # no event's |ts| + |dur| exceeds it: found without full-length temporaries
        with np.errstate(over="ignore"):  # times near the float limit add to inf, which is beyond the bound too
            far = np.abs(events.ts) + np.abs(events.dur) > MAX_TIME_US  # NaN compares False: those are dropped later
        if far.any():
            with np.errstate(over="ignore"):
                t = float(np.abs(events.ts[far]).max() + np.abs(events.dur[far]).max())
            raise UserError(
                f"{path} has an event at or lasting {t:.4g} µs, beyond any profiler clock (±{MAX_TIME_US:.3g} µs, "
                f"int64 nanoseconds): a corrupt trace; {fix}"
            )
    rank: int | None
    if info is not None and info.rank is not None:
        rank, rank_source = info.rank, "distributedInfo.rank"
    else:
        rank = rank_from_file_name(path)
        rank_source = "file name" if rank is not None else "unknown"
    return Trace(
        path=path,
        rank=rank,
        rank_source=rank_source,
        pid=pid,
        backend=info.backend if info else None,
        world_size=info.world_size if info else None,
        pg_sizes={pg.pg_name: pg.pg_size for pg in (info.pg_config if info else [])},
        groups=tuple(ProcessGroupInfo(pg.pg_name, pg.pg_desc, pg.pg_size, _ranks(pg.ranks)) for pg in (info.pg_config if info else [])),
        thread_names=thread_names,
        kernels=kernels,
        cpu=cpu,
        launch=launch,
        launch_tid=launch_tid,
    )


_LINK_BLOCK = 1 << 16


def _launches(corr: np.ndarray, rt_corr: np.ndarray, rt_ts: np.ndarray, rt_tid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per kernel (its `correlation`, -1 if absent), the start and thread code of the runtime call
    that launched it (of runtime calls sharing a correlation, the first in the file): NaN and -1
    without one. Used for the steps' device windows, for labels and, for collectives, to find the op's sizes."""
    launch = np.full(corr.size, np.nan)
    tid = np.full(corr.size, -1, dtype=rt_tid.dtype)
    if rt_corr.size and corr.size:
        order = rt_corr.argsort(kind="stable")
        keys = rt_corr[order]
        # The kernels a block at a time: per-kernel temporaries of the whole file were the peak of reading it.
        for lo in range(0, corr.size, _LINK_BLOCK):
            c = corr[lo : lo + _LINK_BLOCK]
            j = np.minimum(keys.searchsorted(c), keys.size - 1)
            found = (keys[j] == c) & (c >= 0)
            at = order[j[found]]
            launch[lo : lo + c.size][found] = rt_ts[at]
            tid[lo : lo + c.size][found] = rt_tid[at]
    launch.flags.writeable = tid.flags.writeable = False
    return launch, tid
