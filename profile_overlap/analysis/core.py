"""Trace files -> overlap metrics: classify events, then measure with interval arithmetic.

The metric definitions are the README's "Metrics" section (also shipped as static/metric_defs.md); in short:
comm = NCCL/RCCL kernels (GPU) or `gloo:*` work on gloo's worker threads (CPU); compute = every
other kernel except memcpy/memset/sync (GPU) or the main thread's operators outside `c10d::*`
(CPU); overlap_us = |∪comm ∩ ∪compute|; overlap_pct = 100 · overlap_us / comm_us.

Stages: `extract` reads one file into classified intervals (FileEvents, done in worker
processes), `finish_rank` measures one rank from its files (RankAnalysis, small and picklable
so a run can gather it across ranks), `combine` adds the cross-rank wait/transfer split.
"""

from __future__ import annotations

import math
import os
import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from profile_overlap.analysis import intervals as iv
from profile_overlap.analysis.bandwidth import algbw_gbps, busbw_gbps
from profile_overlap.analysis.trace import CPU_OP, USER_ANNOTATION, CollectiveArgs, Trace, load_trace
from profile_overlap.core.errors import UserError
from profile_overlap.core.files import BENCH_JSON, CONFIG_JSON, ENV_JSON, METRICS_JSON, REPORT_JSON, STATUS_JSON, SWEEP_JSON, TIMELINE_JSON

# Kernel classes, by name only. Never via `External id`: in current PyTorch an NCCL kernel's
# External id points at `record_param_comms`, which made the TensorBoard plugin count NCCL
# kernels as computation.
COMM_KERNEL_RE = re.compile(r"^nccl|ncclKernel|ncclDevKernel|^rccl")
MEMORY_KERNEL_RE = re.compile(r"Memcpy|Memset")
SYNC_KERNEL_RE = re.compile(r"^(?:Event|Stream|Context|Device) Sync")
PROFILER_STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")
GLOO_EVENT_PREFIX = "gloo:"
C10D_PREFIX = "c10d::"

MAX_TIMELINE_STEPS = 16
MAX_SPANS_PER_STEP = 256
"""Per step and class (comm / compute): the timeline is merged coarser until it fits."""
TIMELINE_GAP_FRACTION = 1 / 2000
PARALLEL_MIN_BYTES = 2 << 20
"""analyze_dir reads files in worker processes only when they hold more than this in total."""
"""Timeline spans closer than this fraction of the step merge."""

# Bytes per element, by the dtype names the profiler writes (`Input type`, kernel `dtype`).
_DTYPE_BYTES = {
    "float": 4,
    "Float": 4,
    "float32": 4,
    "double": 8,
    "Double": 8,
    "float64": 8,
    "c10::Half": 2,
    "Half": 2,
    "half": 2,
    "float16": 2,
    "c10::BFloat16": 2,
    "BFloat16": 2,
    "bfloat16": 2,
    "long int": 8,
    "Long": 8,
    "int64": 8,
    "long": 8,
    "int": 4,
    "Int": 4,
    "int32": 4,
    "short int": 2,
    "Short": 2,
    "signed char": 1,
    "Char": 1,
    "unsigned char": 1,
    "Byte": 1,
    "uint8": 1,
    "int8": 1,
    "bool": 1,
    "Bool": 1,
    "c10::Float8_e4m3fn": 1,
    "Float8_e4m3fn": 1,
    "c10::Float8_e5m2": 1,
    "Float8_e5m2": 1,
}
# Collective kinds in PyTorch's terms, from any spelling (`allreduce`, `nccl:_all_gather_base`,
# `c10d::_reduce_scatter_base_`, kernel `ncclDevKernel_ReduceScatter_...`): key is the name with
# prefixes, underscores and variant suffixes removed, lower case.
_KIND = {
    "allreduce": "all_reduce",
    "reducescatter": "reduce_scatter",
    "allgather": "all_gather",
    "broadcast": "broadcast",
    "alltoall": "all_to_all",
    "sendrecv": "send_recv",
    "send": "send_recv",
    "recv": "send_recv",
    "reduce": "reduce",
    "gather": "gather",
    "scatter": "scatter",
    "barrier": "barrier",
}
_KIND_NOISE = re.compile(r"^(?:nccl:|rccl:|gloo:|c10d::)|base|intotensor|tensor|coalesced|single|_|\s")
_KERNEL_KIND = re.compile(r"(?:nccl|rccl)(?:Dev)?Kernel_([A-Za-z]+)|^(?:nccl|rccl)([A-Za-z]+)")


def collective_kind(name: str) -> str | None:
    """PyTorch's name for a collective from any of its spellings, or None."""
    if m := _KERNEL_KIND.search(name):
        name = m.group(1) or m.group(2)
    key = _KIND_NOISE.sub("", name.lower())
    return _KIND.get(key)


# ---------------------------------------------------------------- results


@dataclass(frozen=True)
class StepMetrics:
    """One `ProfilerStep#N` window: the rank metrics clipped to it."""

    step: int
    start_us: float
    step_us: float
    comm_us: float
    compute_us: float
    overlap_us: float
    exposed_comm_us: float
    overlap_pct: float | None


@dataclass(frozen=True)
class CollectiveInstance:
    """One collective call on one rank, for cross-rank matching."""

    kind: str
    pg: str
    seq: int
    """Order of this call among the rank's calls of the same kind in the same process group."""
    nbytes: int | None
    """The full array size S of nccl-tests (None when the trace does not say)."""
    dur_us: float
    start_us: float
    group_size: int | None


@dataclass(frozen=True)
class CollectiveStats:
    """All calls of one kind on one rank. nbytes and dur_us are totals; the bandwidths are
    total bytes / total time (calls without a known size are left out of both)."""

    kind: str
    count: int
    nbytes: int | None
    dur_us: float
    algbw_gbps: float | None
    busbw_gbps: float | None
    group_size: int | None


@dataclass(frozen=True)
class TimelineSpan:
    """A merged stretch of comm or compute for the timeline figure, labelled with the
    record_function annotation around it (or the kernel / operator name)."""

    step: int | None
    start_us: float
    end_us: float
    kind: str  # "comm" or "compute"
    label: str


@dataclass(frozen=True)
class RankAnalysis:
    """One rank's metrics; small enough to gather across ranks."""

    rank: int
    device: str  # "cuda" or "cpu"
    backend: str | None
    files: tuple[str, ...]
    notes: tuple[str, ...]
    """Things the user should know, e.g. that the rank came from the file name."""
    world_size: int | None
    comm_us: float
    compute_us: float
    overlap_us: float
    exposed_comm_us: float
    overlap_pct: float | None
    steps: tuple[StepMetrics, ...]
    collectives: tuple[CollectiveStats, ...]
    instances: tuple[CollectiveInstance, ...]
    timeline: tuple[TimelineSpan, ...]


@dataclass(frozen=True)
class RankWait:
    """Cross-rank split of one rank's collective time: transfer_us is the sum over its calls of
    the fastest rank's duration of that call; wait_us is the rest (time spent waiting for peers)."""

    rank: int
    wait_us: float
    transfer_us: float
    matched: int
    """Calls matched on at least two ranks."""


@dataclass(frozen=True)
class TraceAnalysis:
    source: str
    world_size: int
    hta_compat: bool
    ranks: tuple[RankAnalysis, ...]
    waits: tuple[RankWait, ...]
    slowest_rank: int | None
    """The rank the others wait for: the one with the least wait (None with fewer than two ranks)."""


# ---------------------------------------------------------------- stage 1: one file


@dataclass(frozen=True)
class _Intervals:
    start: np.ndarray
    end: np.ndarray
    launch: np.ndarray
    """When the CPU launched it (GPU kernels, NaN if unknown) or its own start (CPU events)."""
    label: np.ndarray  # int32 codes into FileEvents.labels

    def take(self, mask: np.ndarray) -> _Intervals:
        return _Intervals(self.start[mask], self.end[mask], self.launch[mask], self.label[mask])


@dataclass(frozen=True)
class _Call:
    kind: str
    pg: str
    nbytes: int | None
    dur_us: float
    start_us: float
    launch_us: float
    group_size: int | None


@dataclass(frozen=True)
class FileEvents:
    """One trace file, classified: what `finish_rank` needs and nothing more."""

    path: str
    rank: int | None
    rank_source: str
    device: str
    backend: str | None
    world_size: int | None
    comm: _Intervals
    compute: _Intervals
    labels: tuple[str, ...]
    step_num: np.ndarray
    step_start: np.ndarray
    step_end: np.ndarray
    calls: tuple[_Call, ...]
    exclude: iv.Union
    """Time that never counts as compute (CPU: the c10d ops, with everything inside them)."""
    t_min: float
    t_max: float


def _short_name(name: str) -> str:
    name = name.removeprefix("void ")
    for stop in ("(", "<"):
        name = name.split(stop, 1)[0]
    return name[:80]


def _numel(dims) -> int:
    if not isinstance(dims, list) or not dims:
        return 0
    if all(isinstance(d, int) for d in dims):
        return math.prod(dims)
    return sum(_numel(d) for d in dims)  # a TensorList: [[d0, d1], [d0]]


def _itemsize(types) -> int | None:
    for t in types or ():
        if isinstance(t, str) and t in _DTYPE_BYTES:
            return _DTYPE_BYTES[t]
    return None


def _nbytes(args: CollectiveArgs | None, fallback_types=None) -> int | None:
    """nccl-tests' S: the full array. For every collective that is the larger of its input and
    output (all_gather: the output; reduce_scatter: the input; the rest: equal)."""
    if args is None:
        return None
    if args.in_nelems is not None or args.out_nelems is not None:
        size = _DTYPE_BYTES.get(args.dtype or "")
        nelems = max(args.in_nelems or 0, args.out_nelems or 0)
        return nelems * size if size and nelems else None
    if args.input_dims:
        size = _itemsize(args.input_type) or _itemsize(fallback_types)
        nelems = max((_numel(d) for d in args.input_dims), default=0)
        return nelems * size if size and nelems else None
    return None


def _main_tid(trace: Trace) -> int | None:
    """The thread holding the ProfilerStep annotations; else the one whose tid is the pid."""
    cpu = trace.cpu
    step_codes = [i for i, n in enumerate(cpu.names) if PROFILER_STEP_RE.match(n)]
    if step_codes:
        tids = cpu.tid[np.isin(cpu.name, step_codes)]
        return int(np.bincount(tids).argmax())
    return cpu.tids.index(trace.pid) if trace.pid in cpu.tids else None


class _Labeller:
    """Label events with the innermost record_function annotation (not ProfilerStep) open on
    their thread when they started (or were launched); else with their own name."""

    def __init__(self, trace: Trace) -> None:
        cpu = trace.cpu
        self.labels: dict[str, int] = {}
        self.by_tid: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        if not len(cpu):
            return
        is_step = np.array([bool(PROFILER_STEP_RE.match(n)) for n in cpu.names])
        sel = (cpu.cat == USER_ANNOTATION) & ~is_step[cpu.name]
        for tid in np.unique(cpu.tid[sel]):
            rows = np.flatnonzero(sel & (cpu.tid == tid))
            rows = rows[np.argsort(cpu.ts[rows], kind="stable")]
            codes = np.array([self.code(cpu.names[cpu.name[r]]) for r in rows], dtype=np.int32)
            self.by_tid[int(tid)] = (cpu.ts[rows], cpu.ts[rows] + cpu.dur[rows], codes)

    def code(self, label: str) -> int:
        code = self.labels.get(label)
        if code is None:
            code = self.labels[label] = len(self.labels)
        return code

    def label(self, t: np.ndarray, tid: np.ndarray, fallback: np.ndarray) -> np.ndarray:
        """t: event times; tid: thread codes (-1: none); fallback: label codes to use otherwise."""
        out = fallback.astype(np.int32, copy=True)
        for code, (starts, ends, labels) in self.by_tid.items():
            rows = np.flatnonzero(tid == code)
            if rows.size == 0:
                continue
            j = np.searchsorted(starts, t[rows], side="right") - 1
            hit = (j >= 0) & (ends[np.maximum(j, 0)] > t[rows])
            out[rows[hit]] = labels[j[hit]]
        return out


def extract(trace: Trace) -> FileEvents:
    """Classify one trace's events into comm and compute intervals, steps and collective calls."""
    cpu, kernels = trace.cpu, trace.kernels
    main = _main_tid(trace)
    labeller = _Labeller(trace)

    steps = (
        [
            (int(m.group(1)), cpu.ts[r], cpu.ts[r] + cpu.dur[r])
            for r in range(len(cpu))
            if cpu.tid[r] == main and cpu.cat[r] == USER_ANNOTATION and (m := PROFILER_STEP_RE.match(cpu.name_of(r)))
        ]
        if main is not None and len(cpu)
        else []
    )
    steps.sort()

    if len(kernels):
        device = "cuda"
        comm, compute, calls = _gpu_events(trace, labeller)
        exclude = iv.EMPTY
    else:
        device = "cpu"
        comm, compute, calls, exclude = _cpu_events(trace, labeller, main)
        if comm.start.size == 0:
            raise UserError(
                f"{trace.path} has no GPU kernels and no gloo communication events, so there is no "
                "overlap to measure; profile with ProfilerActivity.CUDA on GPU runs, or use the gloo "
                "backend on CPU"
            )
    every = np.concatenate([comm.start, comm.end, compute.start, compute.end, [s for _, s, _ in steps], [e for _, _, e in steps]])
    return FileEvents(
        path=str(trace.path),
        rank=trace.rank,
        rank_source=trace.rank_source,
        device=device,
        backend=trace.backend,
        world_size=trace.world_size,
        comm=comm,
        compute=compute,
        labels=tuple(labeller.labels),
        step_num=np.array([n for n, _, _ in steps], dtype=np.int64),
        step_start=np.array([s for _, s, _ in steps], dtype=np.float64),
        step_end=np.array([e for _, _, e in steps], dtype=np.float64),
        calls=tuple(calls),
        exclude=exclude,
        t_min=float(every.min()) if every.size else 0.0,
        t_max=float(every.max()) if every.size else 0.0,
    )


def _gpu_events(trace: Trace, labeller: _Labeller):
    k = trace.kernels
    is_comm_name = np.array([bool(COMM_KERNEL_RE.search(n)) for n in k.names])
    is_other_name = np.array([bool(MEMORY_KERNEL_RE.search(n) or SYNC_KERNEL_RE.search(n)) for n in k.names])
    comm_mask = is_comm_name[k.name]
    compute_mask = ~comm_mask & ~is_other_name[k.name]

    # The CPU call that launched each kernel, through `correlation` (runtime event -> kernel).
    # Used for HTA's step assignment, for labels and, for collectives, to find the op's sizes.
    launch = np.full(len(k), np.nan)
    launch_tid = np.full(len(k), -1, dtype=np.int64)
    rt_order = np.argsort(trace.runtime_correlation, kind="stable")
    rt_corr = trace.runtime_correlation[rt_order]
    if rt_corr.size:
        j = np.clip(np.searchsorted(rt_corr, k.correlation), 0, rt_corr.size - 1)
        found = (rt_corr[j] == k.correlation) & (k.correlation >= 0)
        launch[found] = trace.runtime_ts[rt_order[j[found]]]
        launch_tid[found] = trace.runtime_tid[rt_order[j[found]]]

    fallback = np.array([labeller.code(_short_name(n)) for n in k.names], dtype=np.int32)[k.name] if len(k) else np.zeros(0, np.int32)
    labels = labeller.label(launch, launch_tid, fallback)
    end = k.ts + k.dur
    every = _Intervals(k.ts, end, launch, labels)
    calls = _gpu_calls(trace, np.flatnonzero(comm_mask), launch, launch_tid)
    return every.take(comm_mask), every.take(compute_mask), calls


def _gpu_calls(trace: Trace, rows: np.ndarray, launch: np.ndarray, launch_tid: np.ndarray) -> list[_Call]:
    """One call per NCCL kernel. Kind and size from the kernel's own args (recent PyTorch), else
    from the CPU collective op it belongs to, linked through `External id` or, failing that,
    the collective op open on the launching thread at launch time. Links are used for sizes
    and kinds only, never to decide what is communication."""
    k, cpu = trace.kernels, trace.cpu
    by_ext = {int(cpu.external_id[r]): r for r in cpu.args if cpu.external_id[r] >= 0}
    ops_by_tid: dict[int, list[int]] = defaultdict(list)
    for r in sorted(cpu.args, key=lambda r: cpu.ts[r]):
        if cpu.name_of(r).startswith(("nccl:", "rccl:", "c10d::")) and cpu.args[r].input_dims:
            ops_by_tid[int(cpu.tid[r])].append(r)
    op_starts = {tid: np.array([cpu.ts[r] for r in rs]) for tid, rs in ops_by_tid.items()}

    def enclosing_op(row: int) -> int | None:
        tid = int(launch_tid[row])
        if tid not in op_starts or np.isnan(launch[row]):
            return None
        j = int(np.searchsorted(op_starts[tid], launch[row], side="right")) - 1
        if j < 0:
            return None
        r = ops_by_tid[tid][j]
        return r if cpu.ts[r] + cpu.dur[r] >= launch[row] else None

    calls = []
    for row in rows:
        args = k.args.get(int(row))
        op = by_ext.get(int(k.external_id[row]))
        if op is None or not cpu.args[op].input_dims:
            op = enclosing_op(int(row)) if op is None or args is None else op
        op_args = cpu.args.get(op) if op is not None else None
        name = k.name_of(row)
        kind = (
            (collective_kind(args.collective_name) if args and args.collective_name else None)
            or (collective_kind(cpu.name_of(op)) if op is not None else None)
            or collective_kind(name)
            or _short_name(name)
        )
        nbytes = _nbytes(args) if args else None
        if nbytes is None:
            nbytes = _nbytes(op_args)
        pg = (args.pg_name if args else None) or (op_args.pg_name if op_args else None) or "default"
        group = (args.group_size if args else None) or trace.pg_sizes.get(pg) or trace.world_size
        calls.append(
            _Call(
                kind=kind,
                pg=pg,
                nbytes=nbytes,
                dur_us=float(k.dur[row]),
                start_us=float(k.ts[row]),
                launch_us=float(launch[row]),
                group_size=group,
            )
        )
    return calls


def _cpu_events(trace: Trace, labeller: _Labeller, main: int | None):
    cpu = trace.cpu
    # gloo:* annotations off the main thread are communication. Not by thread name alone: Kineto
    # can record a gloo worker under its pre-rename name ("python"), seen on torch 2.13, and a
    # name-based filter then silently drops that worker's collectives.
    is_gloo = np.array([n.startswith(GLOO_EVENT_PREFIX) for n in cpu.names] or [False])[cpu.name] & (cpu.cat == USER_ANNOTATION)
    if main is not None:
        is_gloo &= cpu.tid != main
    is_c10d = np.array([n.startswith(C10D_PREFIX) for n in cpu.names] or [False])[cpu.name]
    on_main = (cpu.tid == main) & (cpu.cat == CPU_OP)
    compute_mask = on_main & ~is_c10d
    c10d_rows = np.flatnonzero(on_main & is_c10d)
    c10d_rows = c10d_rows[np.argsort(cpu.ts[c10d_rows], kind="stable")]
    gloo_rows = np.flatnonzero(is_gloo)
    gloo_rows = gloo_rows[np.argsort(cpu.ts[gloo_rows], kind="stable")]

    end = cpu.ts + cpu.dur
    own_names = np.array([labeller.code(n) for n in cpu.names], dtype=np.int32)[cpu.name] if len(cpu) else np.zeros(0, np.int32)
    tids = cpu.tid.astype(np.int64)
    # Gloo runs each work item in submission order, so the k-th gloo event is the k-th c10d op
    # (a reduce_scatter shows up as `gloo:all_reduce`); label it like the op.
    ops = [r for r in c10d_rows if collective_kind(cpu.name_of(r))]
    matched = len(ops) == gloo_rows.size
    comm_t = cpu.ts[gloo_rows].copy()
    comm_tid = tids[gloo_rows].copy()
    if matched and ops:
        comm_t = cpu.ts[ops]
        comm_tid = tids[ops]
    comm = _Intervals(cpu.ts[gloo_rows], end[gloo_rows], cpu.ts[gloo_rows], labeller.label(comm_t, comm_tid, own_names[gloo_rows]))
    compute_rows = np.flatnonzero(compute_mask)
    compute = _Intervals(
        cpu.ts[compute_rows],
        end[compute_rows],
        cpu.ts[compute_rows],
        labeller.label(cpu.ts[compute_rows], tids[compute_rows], own_names[compute_rows]),
    )
    # Operators inside a c10d op are not compute. Drop them per event (for the timeline); the
    # measured union subtracts the c10d union exactly (`finish_rank`).
    exclude = iv.union(cpu.ts[c10d_rows], end[c10d_rows])
    compute = compute.take(~iv.covers(exclude, compute.start))

    calls = []
    for i, row in enumerate(gloo_rows):
        gloo_args = cpu.args.get(int(row))
        op = ops[i] if matched else None
        op_args = cpu.args.get(int(op)) if op is not None else None
        kind = (collective_kind(cpu.name_of(op)) if op is not None else None) or collective_kind(cpu.name_of(row)) or cpu.name_of(row)
        nbytes = _nbytes(op_args, gloo_args.input_type if gloo_args else None) if op_args else None
        if nbytes is None:
            nbytes = _nbytes(gloo_args)
        pg = next(iter(trace.pg_sizes), "default") if len(trace.pg_sizes) == 1 else "default"
        group = trace.pg_sizes.get(pg) or trace.world_size
        calls.append(
            _Call(
                kind=kind,
                pg=pg,
                nbytes=nbytes,
                dur_us=float(cpu.dur[row]),
                start_us=float(cpu.ts[row]),
                launch_us=float(cpu.ts[row]),
                group_size=group,
            )
        )
    return comm, compute, calls, exclude


# ---------------------------------------------------------------- stage 2: one rank


def _measure(comm: iv.Union, compute: iv.Union) -> tuple[float, float, float, float, float | None]:
    comm_us = iv.length(comm)
    compute_us = iv.length(compute)
    overlap_us = iv.intersection_length(comm, compute)
    pct = 100 * overlap_us / comm_us if comm_us > 0 else None
    return comm_us, compute_us, overlap_us, comm_us - overlap_us, pct


def _hta_round(x: _Intervals) -> _Intervals:
    # HTA's parser stores times as whole microseconds: start rounded up, end rounded down.
    start = np.ceil(x.start)
    end = np.maximum(np.floor(x.end), start)
    return _Intervals(start, end, np.ceil(x.launch), x.label)


def finish_rank(
    files: Sequence[FileEvents], *, hta_compat: bool = False, steps: tuple[int | None, int | None] | None = None
) -> RankAnalysis:
    """Measure one rank from its file(s). Several files of one rank must be successive profiler
    spans of the same worker (disjoint in time); their events are pooled."""
    assert files
    files = sorted(files, key=lambda f: f.t_min)
    rank = files[0].rank
    assert all(f.rank == rank for f in files)
    for a, b in zip(files, files[1:]):
        if b.t_min < a.t_max:
            raise UserError(
                f"{a.path} and {b.path} both claim rank {rank} and cover the same time, so they are not "
                "successive profiler spans of one worker; remove the duplicate or analyze each run's folder separately"
            )
    notes = []
    if rank is None:
        assert len(files) == 1
        rank = 0
        notes.append(f"{files[0].path}: no distributedInfo.rank and no number in the file name; taken as rank 0")
    elif files[0].rank_source == "file name":
        notes.append(f"rank {rank} taken from the file name {Path(files[0].path).name} (the trace has no distributedInfo.rank)")
    device = files[0].device
    labels, remap = _pool_labels(files)
    comm = _cat([f.comm for f in files], remap)
    compute = _cat([f.compute for f in files], remap)
    step_num = np.concatenate([f.step_num for f in files])
    step_start = np.concatenate([f.step_start for f in files])
    step_end = np.concatenate([f.step_end for f in files])
    calls = [c for f in files for c in f.calls]

    if hta_compat:
        comm, compute, calls, step_num, step_start, step_end, note = _hta_filter(comm, compute, calls, step_num, step_start, step_end)
        if note:
            notes.append(note)

    if steps is not None:
        lo, hi = steps
        sel = np.ones(step_num.size, bool)
        if lo is not None:
            sel &= step_num >= lo
        if hi is not None:
            sel &= step_num < hi
        if not sel.any():
            have = ", ".join(str(n) for n in step_num) or "none"
            raise UserError(
                f"rank {rank} has no ProfilerStep in --steps {lo if lo is not None else ''}:{hi if hi is not None else ''} "
                f"(its steps: {have}); pick steps the traces contain"
            )
        step_num, step_start, step_end = step_num[sel], step_start[sel], step_end[sel]
        windows = iv.union(step_start, step_end)
        in_window = iv.covers(windows, np.array([c.start_us for c in calls]))
        calls = [c for c, ok in zip(calls, in_window) if ok]
    else:
        windows = None

    comm_u = iv.union(comm.start, comm.end)
    # No c10d time counts as compute, even of an operator that only partly overlaps a c10d op.
    exclude = iv.union(np.concatenate([f.exclude[0] for f in files]), np.concatenate([f.exclude[1] for f in files]))
    compute_u = iv.difference(iv.union(compute.start, compute.end), exclude)
    if windows is not None:
        comm_u, compute_u = iv.intersect(comm_u, windows), iv.intersect(compute_u, windows)
    comm_us, compute_us, overlap_us, exposed_us, pct = _measure(comm_u, compute_u)

    step_metrics = []
    for n, s, e in zip(step_num, step_start, step_end):
        c_us, k_us, o_us, x_us, p = _measure(iv.clip(comm_u, s, e), iv.clip(compute_u, s, e))
        step_metrics.append(
            StepMetrics(
                step=int(n),
                start_us=float(s),
                step_us=float(e - s),
                comm_us=c_us,
                compute_us=k_us,
                overlap_us=o_us,
                exposed_comm_us=x_us,
                overlap_pct=p,
            )
        )

    instances = _number(calls)
    world = max((f.world_size for f in files if f.world_size), default=None)
    return RankAnalysis(
        rank=rank,
        device=device,
        backend=files[0].backend,
        files=tuple(f.path for f in files),
        notes=tuple(notes),
        world_size=world,
        comm_us=comm_us,
        compute_us=compute_us,
        overlap_us=overlap_us,
        exposed_comm_us=exposed_us,
        overlap_pct=pct,
        steps=tuple(step_metrics),
        collectives=collective_stats(instances),
        instances=instances,
        timeline=_timeline(comm, compute, labels, step_num, step_start, step_end),
    )


def _pool_labels(files: Sequence[FileEvents]) -> tuple[tuple[str, ...], list[np.ndarray]]:
    labels: dict[str, int] = {}
    remap = []
    for f in files:
        remap.append(np.array([labels.setdefault(lab, len(labels)) for lab in f.labels] or [0], dtype=np.int32))
    return tuple(labels), remap


def _cat(parts: list[_Intervals], remap: list[np.ndarray]) -> _Intervals:
    return _Intervals(
        np.concatenate([p.start for p in parts]),
        np.concatenate([p.end for p in parts]),
        np.concatenate([p.launch for p in parts]),
        np.concatenate([m[p.label] if p.label.size else p.label for p, m in zip(parts, remap)]),
    )


def _hta_filter(comm, compute, calls, step_num, step_start, step_end):
    """Holistic Trace Analysis's default (`include_last_profiler_step=False`), reproduced:
    HTA's `Trace._filter_irrelevant_gpu_kernels` keeps the CPU events that start before the
    *start* of the last ProfilerStep, then keeps only the GPU kernels whose `correlation`
    matches one of them. So a kernel belongs to the step of the runtime call that launched it,
    not to the step its own timestamp falls in, and a kernel with no launch event in the trace
    is dropped too. HTA's parser also rounds times to whole microseconds (start up, end
    down). With these two rules we reproduce HTA's 11.81 / 20.05 (trace_filter) and 14.31
    (nccl_data); by kernel timestamps alone nccl_data gives 14.76. HTA does nothing when a rank
    has fewer than two steps. On CPU traces (which HTA does not analyse) the same cut applies to
    the events' own start times."""
    comm, compute = _hta_round(comm), _hta_round(compute)
    if step_num.size < 2:
        return comm, compute, calls, step_num, step_start, step_end, None
    last = int(np.argmax(step_start))
    cut = math.ceil(step_start[last])
    comm = comm.take(comm.launch < cut)  # NaN (no launch event) compares False: dropped, as in HTA
    compute = compute.take(compute.launch < cut)
    calls = [c for c in calls if math.ceil(c.launch_us) < cut]
    keep = np.arange(step_num.size) != last
    note = f"--hta-compat: dropped the last profiler step (ProfilerStep#{int(step_num[last])}) as HTA does"
    return comm, compute, calls, step_num[keep], step_start[keep], step_end[keep], note


def _number(calls: list[_Call]) -> tuple[CollectiveInstance, ...]:
    seq: Counter = Counter()
    out = []
    for c in sorted(calls, key=lambda c: c.start_us):
        key = (c.pg, c.kind)
        out.append(
            CollectiveInstance(
                kind=c.kind, pg=c.pg, seq=seq[key], nbytes=c.nbytes, dur_us=c.dur_us, start_us=c.start_us, group_size=c.group_size
            )
        )
        seq[key] += 1
    return tuple(out)


def collective_stats(instances: Sequence[CollectiveInstance], *, default_group_size: int | None = None) -> tuple[CollectiveStats, ...]:
    """Per kind: count, total bytes and time, and the bandwidths of the total."""
    by_kind: dict[str, list[CollectiveInstance]] = defaultdict(list)
    for inst in instances:
        by_kind[inst.kind].append(inst)
    out = []
    for kind, group in sorted(by_kind.items()):
        sized = [i for i in group if i.nbytes is not None]
        nbytes = sum(i.nbytes for i in sized) if sized else None
        sized_us = sum(i.dur_us for i in sized)
        sizes = Counter(i.group_size for i in group if i.group_size)
        n = sizes.most_common(1)[0][0] if sizes else default_group_size
        out.append(
            CollectiveStats(
                kind=kind,
                count=len(group),
                nbytes=nbytes,
                dur_us=sum(i.dur_us for i in group),
                algbw_gbps=algbw_gbps(nbytes, sized_us) if nbytes else None,
                busbw_gbps=busbw_gbps(kind, nbytes, sized_us, n) if nbytes else None,
                group_size=n,
            )
        )
    return tuple(out)


def _timeline(comm: _Intervals, compute: _Intervals, labels: tuple[str, ...], step_num, step_start, step_end) -> tuple[TimelineSpan, ...]:
    """Per step (at most MAX_TIMELINE_STEPS), each class merged into at most MAX_SPANS_PER_STEP
    spans: spans closer than step_us · TIMELINE_GAP_FRACTION merge (coarser until it fits), and a
    merged span keeps the label of its longest piece."""
    if step_num.size:
        windows = list(zip(step_num.tolist(), step_start.tolist(), step_end.tolist()))[:MAX_TIMELINE_STEPS]
    else:
        every = np.concatenate([comm.start, comm.end, compute.start, compute.end])
        windows = [(None, float(every.min()), float(every.max()))] if every.size else []
    spans = []
    for step, lo, hi in windows:
        for kind, x in (("comm", comm), ("compute", compute)):
            s, e = np.clip(x.start, lo, hi), np.clip(x.end, lo, hi)
            keep = e > s
            if not keep.any():
                continue
            s, e, lab = s[keep], e[keep], x.label[keep]
            gap = (hi - lo) * TIMELINE_GAP_FRACTION
            while True:
                order, group = iv.group_ids(s, e, gap=gap)
                if group[-1] + 1 <= MAX_SPANS_PER_STEP:
                    break
                gap = gap * 4 if gap > 0 else 1.0
            ss, ee, ll = s[order], e[order], lab[order]
            first = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
            starts = np.minimum.reduceat(ss, first)
            ends = np.maximum.reduceat(ee, first)
            # The longest piece of each group: sort by (group, -duration), take each group's first.
            best = np.lexsort((-(ee - ss), group))[first]
            for a, b, code in zip(starts.tolist(), ends.tolist(), ll[best].tolist()):
                spans.append(TimelineSpan(step=step, start_us=a, end_us=b, kind=kind, label=labels[code]))
    return tuple(spans)


def analyze_rank(paths: Sequence[Path], *, hta_compat: bool = False, steps: tuple[int | None, int | None] | None = None) -> RankAnalysis:
    """One rank's trace file(s) -> its metrics."""
    return finish_rank([extract(load_trace(Path(p))) for p in paths], hta_compat=hta_compat, steps=steps)


# ---------------------------------------------------------------- stage 3: all ranks


def combine(ranks: list[RankAnalysis], *, source: str, hta_compat: bool = False) -> TraceAnalysis:
    """Add the cross-rank view: world size and the wait/transfer split of every collective call,
    matched across ranks by (process group, kind, order)."""
    assert ranks
    ranks = sorted(ranks, key=lambda r: r.rank)
    assert len({r.rank for r in ranks}) == len(ranks), "one RankAnalysis per rank"
    world = max((r.world_size for r in ranks if r.world_size), default=None) or len(ranks)
    # A trace without group sizes (no distributedInfo, no kernel args): assume the whole world.
    ranks = [
        r if all(c.group_size for c in r.collectives) else _replace(r, collectives=collective_stats(r.instances, default_group_size=world))
        for r in ranks
    ]

    durations: dict[tuple, list[float]] = defaultdict(list)
    for r in ranks:
        for inst in r.instances:
            durations[(inst.pg, inst.kind, inst.seq)].append(inst.dur_us)
    waits = []
    for r in ranks:
        wait = transfer = 0.0
        matched = 0
        for inst in r.instances:
            peers = durations[(inst.pg, inst.kind, inst.seq)]
            if len(peers) < 2:
                continue
            matched += 1
            fastest = min(peers)
            transfer += fastest
            wait += inst.dur_us - fastest
        waits.append(RankWait(rank=r.rank, wait_us=wait, transfer_us=transfer, matched=matched))
    with_calls = [w for w in waits if w.matched]
    slowest = min(with_calls, key=lambda w: w.wait_us).rank if len(with_calls) >= 2 else None
    return TraceAnalysis(
        source=source, world_size=world, hta_compat=hta_compat, ranks=tuple(ranks), waits=tuple(waits), slowest_rank=slowest
    )


def _replace(obj, **changes):
    from dataclasses import replace

    return replace(obj, **changes)


TIMELINE_SCHEMA = "spans are [step, start_us, end_us, kind (comm|compute), label]"


def timeline_record(analyses: dict[str, TraceAnalysis | None]) -> dict:
    """timeline.json: per mode and rank, the profiled steps' windows and their compute and
    communication spans (merged at display resolution by the analysis), for the figures."""
    record = {}
    for mode, result in analyses.items():
        if result is None:
            continue
        record[mode] = {
            "ranks": [
                {
                    "rank": r.rank,
                    "steps": [{"step": s.step, "start_us": s.start_us, "step_us": s.step_us} for s in r.steps],
                    "spans": [[sp.step, round(sp.start_us, 3), round(sp.end_us, 3), sp.kind, sp.label] for sp in r.timeline],
                }
                for r in result.ranks
            ],
        }
    return {"schema": TIMELINE_SCHEMA, "modes": record}


# profile_overlap's own records, which sit beside traces in a run folder (or an analyze --tensorboard
# output folder) and are not traces. Skipped only in folders that are ours (a metrics.json or
# status.json beside them): a stray config.json among a user's traces still gets its error.
OWN_RECORDS = frozenset({"metrics.json", TIMELINE_JSON, CONFIG_JSON, ENV_JSON, STATUS_JSON, REPORT_JSON, SWEEP_JSON, BENCH_JSON})


def _is_own_record(path: Path) -> bool:
    return path.name in OWN_RECORDS and any((path.parent / name).is_file() for name in (METRICS_JSON, STATUS_JSON))


def find_trace_files(folder: Path) -> list[Path]:
    """Every *.json and *.json.gz under `folder`, recursively, sorted, except our own records."""
    return sorted(
        p
        for p in Path(folder).rglob("*")
        if p.is_file() and not _is_own_record(p) and (p.name.endswith(".json") or p.name.endswith(".json.gz"))
    )


def _extract_path(path: str) -> FileEvents | UserError:
    try:
        return extract(load_trace(Path(path)))
    except UserError as err:
        return err


def analyze_dir(
    folder: Path,
    *,
    hta_compat: bool = False,
    steps: tuple[int | None, int | None] | None = None,
    skip_bad: bool = False,
    warn=None,
    max_workers: int | None = None,
) -> TraceAnalysis:
    """Every trace under `folder`, grouped by rank; files are read in parallel processes.
    With skip_bad, a bad file is reported through `warn(message)` and left out."""
    folder = Path(folder)
    if not folder.exists():
        raise UserError(f"{folder} does not exist; pass the folder that holds the *.pt.trace.json(.gz) files")
    if not folder.is_dir():
        raise UserError(f"{folder} is not a folder; pass the folder that holds the trace files")
    paths = find_trace_files(folder)
    if not paths:
        raise UserError(
            f"no *.json or *.json.gz trace files under {folder}; point analyze at a "
            "torch.profiler output folder (tensorboard_trace_handler's dir_name)"
        )
    workers = max_workers or min(len(paths), os.cpu_count() or 1)
    # Worker processes cost ~0.3 s to start: only worth it when there is real parsing to share.
    total_bytes = sum(p.stat().st_size for p in paths)
    if len(paths) > 1 and workers > 1 and total_bytes > PARALLEL_MIN_BYTES:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            results = list(pool.map(_extract_path, [str(p) for p in paths]))
    else:
        results = [_extract_path(str(p)) for p in paths]

    def bad(message: str) -> None:
        if not skip_bad:
            raise UserError(message)
        if warn is not None:
            warn(message)

    files: list[FileEvents] = []
    for result in results:
        if isinstance(result, UserError):
            bad(str(result))
        else:
            files.append(result)
    if not files:
        raise UserError(f"no usable trace under {folder}: every file was bad (see the warnings above)")
    unknown = [f for f in files if f.rank is None]
    if unknown and len(files) > 1:
        for f in unknown:
            bad(
                f"cannot tell the rank of {f.path}: it has no distributedInfo.rank and no number in its "
                "name; rename it with its rank (e.g. rank3.json)"
            )
        files = [f for f in files if f.rank is not None]
    by_rank: dict[int | None, list[FileEvents]] = defaultdict(list)
    for f in sorted(files, key=lambda f: f.t_min):
        # Several files of one rank are fine when they are successive profiler spans (one file
        # per `on_trace_ready` cycle); two that cover the same time are copies or two runs.
        clash = next((g for g in by_rank[f.rank] if f.t_min < g.t_max), None)
        if clash is None:
            by_rank[f.rank].append(f)
        else:
            bad(
                f"{clash.path} and {f.path} both claim rank {f.rank} and cover the same time, so they are "
                "not successive profiler spans of one worker; remove the duplicate or analyze each run's folder separately"
            )
    ranks = []
    for _rank, group in sorted(by_rank.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)):
        try:
            ranks.append(finish_rank(group, hta_compat=hta_compat, steps=steps))
        except UserError as err:
            bad(str(err))
    if not ranks:
        raise UserError(f"no usable trace under {folder}: every rank was bad (see the warnings above)")
    return combine(ranks, source=str(folder), hta_compat=hta_compat)


# ---------------------------------------------------------------- the JSON record


def _num(x: float | None, digits: int = 3) -> float | None:
    return None if x is None else round(float(x), digits)


def to_json(analysis: TraceAnalysis) -> dict:
    """The `analyze --json` record (schema in DESIGN.md); wait/transfer are extra per-rank keys."""
    waits = {w.rank: w for w in analysis.waits}
    ranks = []
    for r in analysis.ranks:
        w = waits.get(r.rank)
        ranks.append(
            {
                "rank": r.rank,
                "device": r.device,
                "comm_us": _num(r.comm_us),
                "compute_us": _num(r.compute_us),
                "overlap_us": _num(r.overlap_us),
                "exposed_comm_us": _num(r.exposed_comm_us),
                "overlap_pct": _num(r.overlap_pct),
                "steps": [
                    {
                        "step": s.step,
                        "step_us": _num(s.step_us),
                        "comm_us": _num(s.comm_us),
                        "compute_us": _num(s.compute_us),
                        "overlap_us": _num(s.overlap_us),
                        "exposed_comm_us": _num(s.exposed_comm_us),
                        "overlap_pct": _num(s.overlap_pct),
                    }
                    for s in r.steps
                ],
                "collectives": [
                    {
                        "kind": c.kind,
                        "count": c.count,
                        "nbytes": c.nbytes,
                        "dur_us": _num(c.dur_us),
                        "algbw_gbps": _num(c.algbw_gbps, 4),
                        "busbw_gbps": _num(c.busbw_gbps, 4),
                    }
                    for c in r.collectives
                ],
                "wait_us": _num(w.wait_us) if w else None,
                "transfer_us": _num(w.transfer_us) if w else None,
            }
        )
    return {"ranks": ranks, "world_size": analysis.world_size, "source": analysis.source}
