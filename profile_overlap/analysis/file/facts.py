"""The facts the integrity checks rest on, kept beside the metrics (stages 1 and 2).

`file_facts` reads them from one classified trace file (in the worker process that read it),
`rank_facts` pools a rank's files and adds what needs its step windows. Both are small and
picklable, like the metrics they travel with; `integrity` turns them into checks. Cheap by
design: per-name totals by `np.bincount`, one sort per GPU stream, no per-event Python loop.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from profile_overlap.analysis.file.call_columns import Calls, Instances
from profile_overlap.analysis.read.classify import COLLECTIVE_OP_PREFIXES, RECORD_PARAM_COMMS
from profile_overlap.analysis.read.trace import CPU_OP, Events, Trace
from profile_overlap.core import intervals as iv
from profile_overlap.core.codes import coded_in

TOP_NAMES = 10
"""Names listed per check (the longest in total)."""
STREAM_OVERLAP_TOLERANCE_US = 1.0
"""Two kernels on one stream overlapping by less than this are clock rounding, not an overlap."""
DEFAULT_STREAMS = frozenset({"0", "7"})
"""The default (legacy) stream's ids as Kineto writes them: 7 (CUPTI's id for it in every PyTorch trace we have,
where all compute of tests/data runs), or 0. Not verified on a GPU here: a trace whose default stream has
another id gets no warning from streams.default_stream."""
COMM_LIKE_RE = re.compile(r"nccl|rccl|msccl|all_?reduce|reduce_?scatter|all_?gather|all_?to_?all|send_?recv", re.IGNORECASE)
"""Names that look like communication. A kernel counted as compute whose name matches is a
communication kernel the classification table does not know (NCCL renamed `ncclKernel` to
`ncclDevKernel` once), or a fused communication + compute kernel."""

Named = tuple[tuple[str, int, float], ...]
"""(name, count, total µs), longest total first."""


@dataclass(frozen=True)
class FileFacts:
    """What the integrity checks need from one trace file, beyond its metrics."""

    first_event_us: float
    """Start of the earliest event of any kind (the profiler's start, near enough)."""
    last_event_us: float
    unclassified: Named
    """Events counted as neither communication, compute nor ignored (CPU: operators off the main
    thread and outside gloo's work); GPU traces have none, every kernel has a class."""
    unclassified_us: float
    comm_like: Named
    """Compute kernels whose names look like communication (COMM_LIKE_RE)."""
    collective_ops: int
    """CPU events of collective ops (`nccl:*`, `c10d::*`, `gloo:*`, record_param_comms)."""
    comm_events: int
    """Events counted as communication (kernels or gloo work)."""
    no_group_calls: int
    """Collective calls whose process group the trace does not name (matched as group "default")."""
    declared_groups: int
    """Process groups in distributedInfo.pg_config."""
    comm_streams: tuple[str, ...]
    compute_streams: tuple[str, ...]
    default_stream_comm: int
    """Communication kernels on a default stream (DEFAULT_STREAMS)."""
    stream_overlaps: int
    """Kernels that start before the previous kernel on their stream ended (by more than the tolerance)."""
    stream_overlap_max_us: float
    negative: int
    """Communication and compute events with a negative duration..."""
    zero: int
    """...and with a zero duration."""
    ignored: Named = ()
    """GPU kernels ignored by rule (memcpy, memset, sync), the longest by name: neither comm nor compute."""


@dataclass(frozen=True, kw_only=True)
class RankFacts(FileFacts):
    """A rank's files pooled (rank_facts), and what only the whole rank can tell."""

    in_steps: bool
    """The rank's totals were measured inside its ProfilerStep windows only (runs, jobs, --steps)."""
    outside_comm_us: float
    """Communication (union) outside every ProfilerStep window, and the same for compute; the
    whole union when the rank has no steps."""
    outside_compute_us: float
    all_comm_us: float
    """The communication union over the whole trace, inside steps or not; the same for compute."""
    all_compute_us: float
    calls: Instances | None = None
    """Every collective call of the trace, numbered before any step window (what cross-rank matching uses)."""


def _named(names: Sequence[str], codes: np.ndarray, dur: np.ndarray, rows: np.ndarray) -> Named:
    """(name, count, total µs) of the rows, by name code, longest first, at most TOP_NAMES."""
    if rows.size == 0:
        return ()
    count = np.bincount(codes[rows], minlength=len(names))
    total = np.bincount(codes[rows], weights=dur[rows], minlength=len(names))
    top = count.nonzero()[0]
    top = top[np.argsort(-total[top], kind="stable")][:TOP_NAMES]
    return tuple((names[int(c)], int(count[c]), float(total[c])) for c in top)


def _stream_overlaps(k: Events, comm_rows: np.ndarray, compute_rows: np.ndarray) -> tuple[int, float]:
    """Kernels (of comm_rows, then compute_rows) starting before an earlier kernel on the same
    stream ended, and the largest such overlap. One stream at a time: the temporaries are one
    stream's kernels, not every kernel's (at 1 GB of trace they were the file's peak)."""
    count, worst = 0, 0.0
    if comm_rows.size + compute_rows.size < 2:
        return count, worst
    for code in np.union1d(np.unique(k.tid[comm_rows]), np.unique(k.tid[compute_rows])).tolist():
        # In a function: one stream's temporaries are gone before the next stream's rows are taken.
        n, most = _overlaps_on(k, np.concatenate([comm_rows[k.tid[comm_rows] == code], compute_rows[k.tid[compute_rows] == code]]))
        count += n
        worst = max(worst, most) if n else worst
    return count, worst


def _overlaps_on(k: Events, rows: np.ndarray) -> tuple[int, float]:
    """Of one stream's kernels (rows): how many start before an earlier one ended, and the largest overlap."""
    start = k.ts[rows]
    if not (start[1:] >= start[:-1]).all():  # a stream's kernels are mostly in start order already
        order = start.argsort(kind="stable")  # ties in the rows' order, as a lexsort by (stream, start)
        rows, start = rows[order], start[order]
        del order
    end = k.dur[rows]
    del rows
    end += start
    np.maximum.accumulate(end, out=end)  # the running maximum of the ends
    over = end[:-1]
    over -= start[1:]  # in place: the ends are not needed past this
    del start
    hit = over > STREAM_OVERLAP_TOLERANCE_US
    return (int(hit.sum()), float(over[hit].max())) if hit.any() else (0, 0.0)


@dataclass(frozen=True)
class KernelFacts:
    """The facts that only the kernels' own columns give (`kernel_facts`), read before `extract`
    frees those columns: the rest of FileFacts needs the classified events and the calls."""

    first_us: float | None = None
    """The earliest kernel start (None without kernels), and the latest kernel end."""
    last_us: float | None = None
    comm_streams: tuple[str, ...] = ()
    compute_streams: tuple[str, ...] = ()
    default_stream_comm: int = 0
    stream_overlaps: int = 0
    stream_overlap_max_us: float = 0.0
    comm_like: Named = ()
    ignored: Named = ()


NO_KERNELS = KernelFacts()


def _max_end(e: Events, block: int = 1 << 16) -> float:
    """The latest end (ts + dur) of the events, a block at a time (not a copy of every end)."""
    return float(np.max([(e.ts[a : a + block] + e.dur[a : a + block]).max() for a in range(0, len(e), block)]))


def kernel_facts(k: Events, *, comm_rows: np.ndarray, compute_rows: np.ndarray) -> KernelFacts:
    """comm_rows / compute_rows: the kernel rows of each class."""
    if not len(k):
        return NO_KERNELS
    stream_of = np.array([t.removeprefix("stream ").strip() for t in k.tids])
    # By stream code, not per kernel: a string per kernel costs more than the kernel's columns.
    overlaps, overlap_max = _stream_overlaps(k, comm_rows, compute_rows)
    like = np.array([bool(COMM_LIKE_RE.search(n)) for n in k.names])
    other = np.ones(len(k), dtype=bool)
    other[comm_rows] = False
    other[compute_rows] = False
    return KernelFacts(
        first_us=float(k.ts.min()),
        last_us=_max_end(k),
        comm_streams=tuple(sorted(set(stream_of[np.unique(k.tid[comm_rows])].tolist()), key=_stream_key)),
        compute_streams=tuple(sorted(set(stream_of[np.unique(k.tid[compute_rows])].tolist()), key=_stream_key)),
        default_stream_comm=int(np.array([s in DEFAULT_STREAMS for s in stream_of.tolist()] or [False])[k.tid[comm_rows]].sum()),
        stream_overlaps=overlaps,
        stream_overlap_max_us=overlap_max,
        comm_like=_named(k.names, k.name, k.dur, compute_rows[like[k.name[compute_rows]]]),
        ignored=_named(k.names, k.name, k.dur, other.nonzero()[0]),
    )


@dataclass(frozen=True)
class CpuFacts:
    """The facts that the CPU events' own columns give (`cpu_facts`), read before `extract` frees
    the columns of a GPU trace (`Events.release`)."""

    first_us: float | None = None
    """The earliest CPU event's start (None without CPU events), and the latest one's end."""
    last_us: float | None = None
    unclassified: Named = ()
    unclassified_us: float = 0.0
    collective_ops: int = 0


def cpu_facts(cpu: Events, unclassified_rows: np.ndarray | None = None) -> CpuFacts:
    """unclassified_rows: the CPU rows counted as neither communication, compute nor ignored (none,
    the default, on GPU: every CPU event there has a class)."""
    if unclassified_rows is None:
        unclassified_rows = np.zeros(0, dtype=np.int64)
    if not len(cpu):
        return CpuFacts()
    collective_codes = [i for i, n in enumerate(cpu.names) if n.startswith((*COLLECTIVE_OP_PREFIXES, RECORD_PARAM_COMMS))]
    return CpuFacts(
        first_us=float(cpu.ts.min()),
        last_us=_max_end(cpu),
        unclassified=_named(cpu.names, cpu.name, cpu.dur, unclassified_rows),
        unclassified_us=float(cpu.dur[unclassified_rows].sum()),
        collective_ops=int(coded_in(cpu.name, collective_codes, len(cpu.names)).sum()) if collective_codes else 0,
    )


def file_facts(
    trace: Trace,
    *,
    kernels: KernelFacts,
    cpu: CpuFacts,
    comm_dur: np.ndarray,
    compute_dur: np.ndarray,
    calls: Calls,
) -> FileFacts:
    """kernels, cpu: `kernel_facts` and `cpu_facts` of the trace's events; comm_dur / compute_dur:
    durations of the classified events (either device). Reads none of the trace's events (their
    columns may be freed by now)."""
    starts = [a for a in (kernels.first_us, cpu.first_us) if a is not None]
    ends = [a for a in (kernels.last_us, cpu.last_us) if a is not None]
    return FileFacts(
        first_event_us=min(starts) if starts else 0.0,
        last_event_us=max(ends) if ends else 0.0,
        unclassified=cpu.unclassified,
        unclassified_us=cpu.unclassified_us,
        comm_like=kernels.comm_like,
        collective_ops=cpu.collective_ops,
        comm_events=int(comm_dur.size),
        no_group_calls=int((calls.pg == calls.pgs.index("default")).sum()) if "default" in calls.pgs else 0,
        declared_groups=len(trace.pg_sizes),
        comm_streams=kernels.comm_streams,
        compute_streams=kernels.compute_streams,
        default_stream_comm=kernels.default_stream_comm,
        stream_overlaps=kernels.stream_overlaps,
        stream_overlap_max_us=kernels.stream_overlap_max_us,
        negative=int((comm_dur < 0).sum() + (compute_dur < 0).sum()),
        zero=int((comm_dur == 0).sum() + (compute_dur == 0).sum()),
        ignored=kernels.ignored,
    )


def cpu_unclassified(trace: Trace, main: int | None, comm: iv.Union) -> np.ndarray:
    """CPU rows counted as neither communication, compute nor ignored: operators off the main
    thread that do not run inside gloo's work (gloo copies its buffers with aten ops there)."""
    cpu = trace.cpu
    rows = np.flatnonzero((cpu.cat == CPU_OP) & (cpu.tid != (main if main is not None else -1)))
    return rows[~iv.covers(comm, cpu.ts[rows])] if rows.size else rows


def _stream_key(s: str) -> tuple[int, int | str]:
    return (0, int(s)) if s.isdigit() else (1, s)


def _merge(parts: Sequence[Named]) -> Named:
    counts: dict[str, int] = {}
    totals: dict[str, float] = {}
    for part in parts:
        for name, count, total in part:
            counts[name] = counts.get(name, 0) + count
            totals[name] = totals.get(name, 0.0) + total
    return tuple(sorted(((n, counts[n], totals[n]) for n in counts), key=lambda x: -x[2])[:TOP_NAMES])


def rank_facts(
    files: Sequence[FileFacts],
    *,
    comm_u: iv.Union,
    compute_u: iv.Union,
    windows: iv.Union,
    in_steps: bool,
    calls: Instances,
) -> RankFacts:
    """Pool a rank's files; comm_u / compute_u: its unions before any clipping to steps;
    windows: the union of its ProfilerStep windows."""
    unclassified = _merge([f.unclassified for f in files])
    all_comm, all_compute = iv.length(comm_u), iv.length(compute_u)
    return RankFacts(
        first_event_us=min(f.first_event_us for f in files),
        last_event_us=max(f.last_event_us for f in files),
        unclassified=unclassified,
        unclassified_us=sum(f.unclassified_us for f in files),
        comm_like=_merge([f.comm_like for f in files]),
        collective_ops=sum(f.collective_ops for f in files),
        comm_events=sum(f.comm_events for f in files),
        no_group_calls=sum(f.no_group_calls for f in files),
        declared_groups=max(f.declared_groups for f in files),
        comm_streams=tuple(sorted({s for f in files for s in f.comm_streams}, key=_stream_key)),
        compute_streams=tuple(sorted({s for f in files for s in f.compute_streams}, key=_stream_key)),
        default_stream_comm=sum(f.default_stream_comm for f in files),
        stream_overlaps=sum(f.stream_overlaps for f in files),
        stream_overlap_max_us=max(f.stream_overlap_max_us for f in files),
        negative=sum(f.negative for f in files),
        zero=sum(f.zero for f in files),
        in_steps=in_steps,
        outside_comm_us=all_comm - iv.intersection_length(comm_u, windows),
        outside_compute_us=all_compute - iv.intersection_length(compute_u, windows),
        all_comm_us=all_comm,
        all_compute_us=all_compute,
        calls=calls,
        ignored=_merge([f.ignored for f in files]),
    )
