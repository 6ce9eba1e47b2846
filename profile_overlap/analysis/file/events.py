"""One trace file -> classified events (stage 1, run in worker processes by `folder.analyze_dir`).

What counts (docs/metrics.md, also shipped as render/static/metric_defs.md): comm =
NCCL/RCCL kernels (GPU) or `gloo:*` work on gloo's worker threads (CPU); compute = every other
kernel except memcpy/memset/sync (GPU) or the main thread's operators outside `c10d::*` (CPU).
The names behind these rules are in `classify`. `extract` turns a Trace into FileEvents: comm and
compute intervals with labels, the ProfilerStep windows, and the collective calls (as columns).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from profile_overlap.analysis.file.call_columns import RECV, SEND, UNKNOWN, Calls
from profile_overlap.analysis.file.collectives import collective_nbytes
from profile_overlap.analysis.file.facts import NO_KERNELS, FileFacts, cpu_facts, cpu_unclassified, file_facts, kernel_facts
from profile_overlap.analysis.file.fsdp_units import fsdp_busy
from profile_overlap.analysis.file.gloo_groups import infer_groups
from profile_overlap.analysis.file.gloo_match import match_gloo_pools, match_gloo_work, merge_p2p_ops
from profile_overlap.analysis.file.phases import PhaseWindows, phase_windows
from profile_overlap.analysis.file.steps import device_windows
from profile_overlap.analysis.rank.interference import Operators, cpu_operators, gpu_operators, seen_done
from profile_overlap.analysis.read.classify import (
    AUTOGRAD_FRAME_RE,
    C10D_PREFIX,
    COMM_KERNEL_RE,
    FUNCTIONAL_PREFIX,
    GLOO_EVENT_PREFIX,
    LIBRARY_OP_PREFIXES,
    MEMORY_KERNEL_RE,
    PROFILER_STEP_RE,
    SCHEDULE_WAIT_RANGES,
    SYNC_KERNEL_RE,
    collective_kind,
    p2p_direction,
)
from profile_overlap.analysis.read.labels import Labeller
from profile_overlap.analysis.read.trace import CPU_OP, USER_ANNOTATION, ProcessGroupInfo, Trace
from profile_overlap.analysis.read.trace_args import CollectiveArgs
from profile_overlap.core import intervals as iv
from profile_overlap.core.codes import coded_in
from profile_overlap.core.errors import UserError
from profile_overlap.record.analysis import FsdpRecord


@dataclass(frozen=True)
class EventIntervals:
    """Classified events of one class (comm or compute) as columns."""

    start: np.ndarray
    end: np.ndarray
    launch: np.ndarray
    """When the CPU launched it (GPU kernels, NaN if unknown) or its own start (CPU events)."""
    label: np.ndarray  # int32 codes into FileEvents.labels

    def take(self, mask: np.ndarray) -> EventIntervals:
        return EventIntervals(self.start[mask], self.end[mask], self.launch[mask], self.label[mask])


@dataclass(frozen=True)
class FileEvents:
    """One trace file, classified: what `finish_rank` needs and nothing more."""

    path: str
    rank: int | None
    rank_source: str
    device: str
    backend: str | None
    world_size: int | None
    comm: EventIntervals
    compute: EventIntervals
    labels: tuple[str, ...]
    step_num: np.ndarray
    step_start: np.ndarray
    step_end: np.ndarray
    """The steps' windows: on CPU their `ProfilerStep#N` ranges, on GPU their device windows
    (analysis/file/steps.py: the span of the kernels each step's range launched, never overlapping)."""
    step_cpu_start: np.ndarray
    """The start of each step's `ProfilerStep#N` range on the CPU (what --hta-compat cuts at)."""
    calls: Calls
    exclude: iv.Union
    """Time that never counts as compute (CPU: the c10d ops, with everything inside them)."""
    phases: PhaseWindows
    """The phase windows: labelled, or found from torch's own ranges in steps without labels."""
    t_min: float
    t_max: float
    facts: FileFacts
    """What the integrity checks need beyond the metrics (analysis/file/facts.py)."""
    operators: Operators
    """The leaf compute calls and which operator each is (analysis/rank/interference.py)."""
    groups: tuple[ProcessGroupInfo, ...] = ()
    """The process groups the trace declares (pg_config), in creation order."""
    group_method: str = ""
    """How the calls' process groups were found, in words (the integrity check says it per rank)."""
    fsdp: FsdpRecord | None = None
    """FSDP2's work on the training thread (analysis/file/fsdp_units.py): CPU traces with FSDP:: ranges only."""

    def release_intervals(self) -> None:
        """Free the comm and compute intervals and the operators, for a caller that is done with
        them (`finish_rank(..., release=True)`, past their last reader: at 1 GB of trace 23 MB
        beside the rank's call columns). Reading one of them afterwards raises AttributeError."""
        for name in ("comm", "compute", "operators"):
            object.__delattr__(self, name)

    def comm_and_compute(self) -> tuple[iv.Union, iv.Union]:
        """The union of communication and of compute, `exclude` taken out of compute (one file's
        rank_pool.busy)."""
        return iv.union(self.comm.start, self.comm.end), iv.difference(iv.union(self.compute.start, self.compute.end), self.exclude)


@dataclass(frozen=True, eq=False)
class _GpuEvents:
    """`_gpu_events`: comm and compute kernels, their rows, each comm kernel's launching thread code (-1: unknown)."""

    comm: EventIntervals
    compute: EventIntervals
    comm_rows: np.ndarray
    compute_rows: np.ndarray
    comm_tid: np.ndarray
    comm_dur: np.ndarray
    """The comm kernels' own durations (the calls' `dur_us`; end - start need not be them to the bit)."""


@dataclass(frozen=True, eq=False)
class _CpuEvents:
    """`_cpu_events`: comm, compute, the calls, the c10d time, the compute operators' rows, how the groups were found."""

    comm: EventIntervals
    compute: EventIntervals
    calls: Calls
    exclude: iv.Union
    compute_rows: np.ndarray
    group_method: str


def _short_name(name: str) -> str:
    name = name.removeprefix("void ")
    for stop in ("(", "<"):
        name = name.split(stop, 1)[0]
    return name[:80]


def main_tid(trace: Trace) -> int | None:
    """The thread holding the ProfilerStep annotations; else the one whose tid is the pid."""
    cpu = trace.cpu
    step_codes = [i for i, n in enumerate(cpu.names) if PROFILER_STEP_RE.match(n)]
    if step_codes:
        tids = cpu.tid[coded_in(cpu.name, step_codes, len(cpu.names))]
        return int(np.bincount(tids).argmax())
    return cpu.tids.index(trace.pid) if trace.pid in cpu.tids else None


def extract(trace: Trace, *, release: bool = False) -> FileEvents:
    """Classify one trace's events into comm and compute intervals, steps and collective calls.
    release: the caller is done with the trace; on GPU its kernels' times and launches, then the CPU
    events' times, threads and shapes, are freed once read (`Events.release`: at 1 GB of trace 18 MB
    beside the kernels in launch order, 44 MB beside the calls being built)."""
    cpu, kernels = trace.cpu, trace.kernels
    main = main_tid(trace)
    labeller = Labeller(trace)

    steps = (
        [
            (int(m.group(1)), cpu.ts[r], cpu.ts[r] + cpu.dur[r])
            for r in np.flatnonzero((cpu.tid == main) & (cpu.cat == USER_ANNOTATION)).tolist()
            if (m := PROFILER_STEP_RE.match(cpu.name_of(r)))
        ]
        if main is not None and len(cpu)
        else []
    )
    steps.sort()
    step_cpu_start = np.array([s for _, s, _ in steps], dtype=np.float64)
    step_cpu_end = np.array([e for _, _, e in steps], dtype=np.float64)
    if len(kernels):
        device = "cuda"
        if release:  # each column freed past its last reader (peak memory): the CPU operators' shapes are cpu_operators'
            cpu.release("shape")
        gpu = _gpu_events(trace, labeller)
        if release:
            trace.release_launches()
        comm, compute, comm_rows, compute_rows, comm_tid = gpu.comm, gpu.compute, gpu.comm_rows, gpu.compute_rows, gpu.comm_tid
        comm_dur = gpu.comm_dur
        del gpu  # so that `del comm_tid` below frees it
        kernels_known = kernel_facts(kernels, comm_rows=comm_rows, compute_rows=compute_rows)
        # The calls' phase hints now, so that the labeller's per-annotation columns go before the
        # kernels are put in launch order (peak memory).
        hints = labeller.hints(comm.launch, comm_tid)
        labels = tuple(labeller.labels)
        del labeller
        if release:  # what follows reads the kernels' names, ids and args only
            kernels.release("ts", "dur", "tid", "cat")
        kernel_times = _by_launch(comm, compute)
        # The windows before the calls, and the calls once these 24 bytes a kernel are freed (peak memory).
        phases = phase_windows(trace, main, steps, kernel_times)
        step_start, step_end = device_windows(step_cpu_start, step_cpu_end, kernel_times)
        del kernel_times
        cpu_known = cpu_facts(cpu)
        calls = _gpu_calls(trace, comm_rows, comm, comm_dur, comm_tid, hints, release=release)
        del comm_rows, comm_tid, comm_dur, hints
        operators = gpu_operators(kernels, compute_rows, compute.start, compute.end)
        del compute_rows
        exclude = iv.EMPTY
        named = int(sum(1 for pg in calls.pg.tolist() if calls.pgs[pg] != "default"))
        group_method = f"the calls' arguments: {named} of {len(calls)} call(s) name their group"
    else:
        device = "cpu"
        c = _cpu_events(trace, labeller, main)
        comm, compute, calls, exclude, compute_rows, group_method = c.comm, c.compute, c.calls, c.exclude, c.compute_rows, c.group_method
        operators = cpu_operators(cpu, compute_rows, seen_done(cpu, main))
        del compute_rows
        kernels_known = NO_KERNELS
        cpu_known = cpu_facts(cpu, cpu_unclassified(trace, main, iv.union(comm.start, comm.end)))
        # One process without a process group (a one-rank job profiled with the trace handler) has
        # nothing to communicate: its steps still have compute and phases, and zero communication.
        solo = trace.world_size in (None, 1) and trace.backend is None and bool(steps)
        if comm.start.size == 0 and not solo:
            raise UserError(
                f"{trace.path} has no GPU kernels and no gloo communication events, so there is no "
                "overlap to measure; profile with ProfilerActivity.CUDA on GPU runs, or use the gloo "
                "backend on CPU"
            )
        phases = phase_windows(trace, main, steps)
        step_start, step_end = step_cpu_start, step_cpu_end
        labels = tuple(labeller.labels)
        del labeller  # its per-annotation columns: not needed past the calls
    t_min, t_max = _bounds(comm.start, comm.end, compute.start, compute.end, step_cpu_start, step_cpu_end, step_start, step_end)
    fsdp = None
    if device == "cpu" and main is not None:
        # On GPU this work runs ahead of the kernels, and the step does not wait for it.
        comm_u = iv.union(comm.start, comm.end)
        exposed = iv.difference(comm_u, iv.difference(iv.union(compute.start, compute.end), exclude))
        fsdp = fsdp_busy(cpu, main, step_start=step_cpu_start, step_end=step_cpu_end, phases=phases, exposed=exposed)
    return FileEvents(
        path=str(trace.path),
        rank=trace.rank,
        rank_source=trace.rank_source,
        device=device,
        backend=trace.backend,
        world_size=trace.world_size,
        comm=comm,
        compute=compute,
        labels=labels,
        step_num=np.array([n for n, _, _ in steps], dtype=np.int64),
        step_start=step_start,
        step_end=step_end,
        step_cpu_start=step_cpu_start,
        calls=calls,
        exclude=exclude,
        phases=phases,
        t_min=t_min,
        t_max=t_max,
        facts=file_facts(
            trace,
            kernels=kernels_known,
            cpu=cpu_known,
            comm_dur=comm.end - comm.start,
            compute_dur=compute.end - compute.start,
            calls=calls,
        ),
        operators=operators,
        groups=trace.groups,
        group_method=group_method,
        fsdp=fsdp,
    )


def _by_launch(*parts: EventIntervals) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(launch, start, end) of the kernels with a known launch, in launch order (ties: the parts' order), sorted once.
    One stable sort of every launch puts the unknown (NaN) last, the rest as sorting the known alone
    would; the order is int32 and each column is built and ordered in turn (at 1 GB of trace the
    peak of `extract`)."""
    launch = np.concatenate([p.launch for p in parts])
    order = launch.argsort(kind="stable").astype(np.int32)
    order = order[: launch.size - int(np.isnan(launch).sum())]
    out = [launch[order]]
    del launch
    for column in ("start", "end"):
        out.append(np.concatenate([getattr(p, column) for p in parts])[order])
    return out[0], out[1], out[2]


def _bounds(*times: np.ndarray) -> tuple[float, float]:
    """The earliest and latest of all the times (0, 0 without any), without copying them into one array."""
    parts = [a for a in times if a.size]
    if not parts:
        return 0.0, 0.0
    return float(np.min([a.min() for a in parts])), float(np.max([a.max() for a in parts]))


def _gpu_events(trace: Trace, labeller: Labeller) -> _GpuEvents:
    """Communication and compute kernels, their rows, and the thread code that launched each comm kernel (-1: unknown)."""
    k = trace.kernels
    is_comm_name = np.array([bool(COMM_KERNEL_RE.search(n)) for n in k.names])
    is_other_name = np.array([bool(MEMORY_KERNEL_RE.search(n) or SYNC_KERNEL_RE.search(n)) for n in k.names])
    comm_mask = is_comm_name[k.name]
    compute_mask = ~comm_mask & ~is_other_name[k.name]

    # The CPU call that launched each kernel (the reader links them through `correlation`).
    # Used for HTA's step assignment, for labels and, for collectives, to find the op's sizes.
    launch, launch_tid = trace.launch, trace.launch_tid
    fallback = np.array([labeller.code(_short_name(n)) for n in k.names], dtype=np.int32)[k.name] if len(k) else np.zeros(0, np.int32)
    labels = labeller.label(launch, launch_tid, fallback)
    del fallback
    # int32: rows of one file's kernels (4 bytes a kernel less than int64; held to the end of `extract`).
    comm_rows, compute_rows = (m.nonzero()[0].astype(np.int32) for m in (comm_mask, compute_mask))
    del comm_mask, compute_mask
    comm, compute = (EventIntervals(k.ts[r], k.ts[r] + k.dur[r], launch[r], labels[r]) for r in (comm_rows, compute_rows))
    return _GpuEvents(comm, compute, comm_rows, compute_rows, launch_tid[comm_rows], k.dur[comm_rows])


def _gpu_calls(
    trace: Trace,
    rows: np.ndarray,
    comm: EventIntervals,
    dur: np.ndarray,
    launch_tid: np.ndarray,
    hints: list[str | None],
    *,
    release: bool = False,
) -> Calls:
    """One call per NCCL kernel. Kind and size from the kernel's own args (recent PyTorch), else
    from the CPU collective op it belongs to, linked through `External id` or, failing that,
    the collective op open on the launching thread at launch time. Links are used for sizes
    and kinds only, never to decide what is communication. comm: the comm kernels (`_gpu_events`),
    rows: their kernel rows, dur: their own durations, launch_tid: their launching threads, hints:
    their phase hints (`Labeller.hints`). Reads no kernel times; with release, frees the CPU events'
    times, threads and categories once the ops a kernel can be launched inside are found."""
    k, cpu = trace.kernels, trace.cpu
    launch = comm.launch
    # Columns, not dicts: a 1 GB trace has hundreds of thousands of collective ops.
    arg_rows, ext = cpu.args.rows(), cpu.args.external_ids
    ext_keys, ext_rows = ext[ext >= 0], arg_rows[ext >= 0]
    order = ext_keys.argsort(kind="stable")
    ext_keys, ext_rows = ext_keys[order], ext_rows[order]
    last = np.ones(ext_keys.size, dtype=bool)  # of rows sharing an External id, the last one
    last[:-1] = ext_keys[1:] != ext_keys[:-1]
    ext_keys, ext_rows = ext_keys[last], ext_rows[last]
    kx = k.external_id[rows]
    j = np.minimum(ext_keys.searchsorted(kx), max(ext_keys.size - 1, 0))
    by_ext = np.where(ext_keys[j] == kx, ext_rows[j], -1) if ext_keys.size else np.full(rows.size, -1)
    del kx, j, ext_keys, ext_rows, last, order
    # The ops a kernel can be launched inside, per thread in time order (ties: the file's order).
    prefixes = (*LIBRARY_OP_PREFIXES, C10D_PREFIX)
    op_name = np.array([n.startswith(prefixes) for n in cpu.names] or [False])
    is_op = op_name[cpu.name[arg_rows]] & cpu.args.with_input_dims() if arg_rows.size else np.zeros(0, dtype=bool)
    ops = arg_rows[is_op]
    ops = ops[np.lexsort((cpu.ts[ops], cpu.tid[ops]))]
    op_tid, op_ts = cpu.tid[ops], cpu.ts[ops]
    op_end = op_ts + cpu.dur[ops]
    if release:  # past their last reader: the loop below reads the CPU events' names and args only
        cpu.release("ts", "dur", "tid", "cat")
    segment = {int(t): (int(a), int(b)) for t, a, b in zip(*np.unique(op_tid, return_index=True, return_counts=True))}

    def enclosing_op(i: int) -> int | None:
        tid = int(launch_tid[i])
        if tid not in segment or np.isnan(launch[i]):
            return None
        a, count = segment[tid]
        j = int(op_ts[a : a + count].searchsorted(launch[i], side="right")) - 1
        if j < 0:
            return None
        return int(ops[a + j]) if op_end[a + j] >= launch[i] else None

    n = rows.size
    kinds, pgs = [], []
    memo: dict[tuple[int, int, int, int], tuple[str, int | None, str, int | None, str | None]] = {}
    nbytes_col = np.full(n, UNKNOWN, dtype=np.int64)
    group_col = np.full(n, UNKNOWN, dtype=np.int64)
    peer = np.full(n, UNKNOWN, dtype=np.int64)
    direction = np.zeros(n, dtype=np.int8)
    group_ranks = {g.name: g.ranks for g in trace.groups}
    # 16,384 rows at a time as Python ints: a list of every call's row costs 40 bytes a call.
    for lo in range(0, n, 1 << 14):
        block, linked = rows[lo : lo + (1 << 14)], by_ext[lo : lo + (1 << 14)]
        # Each call's kernel args and its linked op's args, looked up for the block at once.
        in_block = zip(block.tolist(), k.name[block].tolist(), k.args.values_at(block), linked.tolist(), cpu.args.values_at(linked))
        for i, (row, name_code, args, ext, ext_args) in enumerate(in_block, lo):
            op: int | None = ext if ext >= 0 else None
            if ext_args is None or not ext_args.input_dims:
                op = enclosing_op(i) if op is None or args is None else op
            op_args = ext_args if op is not None and op == ext else cpu.args.get(op) if op is not None else None
            # A trace repeats a few collectives every step, and their arguments are shared objects
            # (trace.py): the kind, size and group follow from (kernel name, op name, the two args).
            memo_key = (name_code, -1 if op is None else int(cpu.name[op]), id(args), id(op_args))
            known = memo.get(memo_key)
            if known is None:
                name = k.name_of(row)
                kind = (
                    (collective_kind(args.collective_name) if args and args.collective_name else None)
                    or (collective_kind(cpu.name_of(op)) if op is not None else None)
                    or collective_kind(name)
                    or _short_name(name)
                )
                nbytes = collective_nbytes(args) if args else None
                if nbytes is None:
                    nbytes = collective_nbytes(op_args)
                pg = (args.pg_name if args else None) or (op_args.pg_name if op_args else None) or "default"
                group = (args.group_size if args else None) or trace.pg_sizes.get(pg) or trace.world_size
                way = (
                    (p2p_direction(args.collective_name) if args and args.collective_name else None)
                    or (p2p_direction(cpu.name_of(op)) if op is not None else None)
                    or p2p_direction(name)
                )
                known = memo[memo_key] = (kind, nbytes, pg, group, way)
            kind, nbytes, pg, group, way = known
            kinds.append(kind)
            pgs.append(pg)
            if way is not None:
                direction[i] = SEND if way == "send" else RECV
                side = "dst_rank" if way == "send" else "src_rank"
                given = next((getattr(a, side) for a in (args, op_args) if a is not None and getattr(a, side) is not None), None)
                ranks = group_ranks.get(pg) or _listed_ranks(args.pg_ranks if args else None)
                others = [r for r in ranks if r != trace.rank]
                peer[i] = given if given is not None else others[0] if len(ranks) == 2 and len(others) == 1 else UNKNOWN
            nbytes_col[i] = UNKNOWN if nbytes is None else nbytes
            group_col[i] = UNKNOWN if group is None else group
    return Calls.build(
        kind=kinds,
        pg=pgs,
        nbytes=nbytes_col,
        dur_us=dur,
        start_us=comm.start,
        launch_us=launch,
        group_size=group_col,
        issued_us=np.full(n, np.nan),
        hint=hints,
        peer=peer,
        direction=direction,
    )


def _listed_ranks(value: str | list[int] | None) -> tuple[int, ...]:
    """A kernel's `Process Group Ranks`: a list, or text such as "[0, 1]"."""
    if isinstance(value, list):
        return tuple(int(r) for r in value)
    return tuple(int(x) for x in re.findall(r"\d+", value)) if isinstance(value, str) else ()


def _cpu_events(trace: Trace, labeller: Labeller, main: int | None) -> _CpuEvents:
    """Communication, compute, the calls, the c10d time, the rows of the compute operators and how the groups were found."""
    cpu = trace.cpu
    # gloo:* annotations off the main thread are communication. Not by thread name alone: Kineto
    # can record a gloo worker under its pre-rename name ("python"), seen on torch 2.13, and a
    # name-based filter then silently drops that worker's collectives.
    is_gloo = np.array([n.startswith(GLOO_EVENT_PREFIX) for n in cpu.names] or [False])[cpu.name] & (cpu.cat == USER_ANNOTATION)
    # Point-to-point work (`gloo:send`, `gloo:recv`) runs on the thread that called it, the main one too.
    p2p_names = np.array([p2p_direction(n) is not None for n in cpu.names] or [False])
    is_p2p = is_gloo & p2p_names[cpu.name]
    if main is not None:
        is_gloo &= (cpu.tid != main) | is_p2p
    is_c10d = np.array([n.startswith(C10D_PREFIX) for n in cpu.names] or [False])[cpu.name]
    # DTensor's functional collectives (`_c10d_functional::all_reduce`, `::wait_tensor`) issue and
    # wait for communication: like c10d's ops, never compute, nor anything inside them.
    is_functional = np.array([n.startswith(FUNCTIONAL_PREFIX) for n in cpu.names] or [False])[cpu.name]
    is_frame = np.array([bool(AUTOGRAD_FRAME_RE.search(n)) for n in cpu.names] or [False])[cpu.name]
    on_main = (cpu.tid == main) & (cpu.cat == CPU_OP)
    compute_mask = on_main & ~is_c10d & ~is_functional & ~is_frame
    functional_rows = np.flatnonzero(on_main & is_functional)
    is_wait = np.array([n in SCHEDULE_WAIT_RANGES for n in cpu.names] or [False])[cpu.name]
    wait_rows = np.flatnonzero(is_wait & (cpu.tid == main))
    c10d_rows = np.flatnonzero(on_main & is_c10d)
    c10d_rows = c10d_rows[cpu.ts[c10d_rows].argsort(kind="stable")]
    gloo_rows = is_gloo.nonzero()[0]
    gloo_rows = gloo_rows[cpu.ts[gloo_rows].argsort(kind="stable")]

    end = cpu.ts + cpu.dur
    own_names = np.array([labeller.code(n) for n in cpu.names], dtype=np.int32)[cpu.name] if len(cpu) else np.zeros(0, np.int32)
    tids = cpu.tid.astype(np.int64)
    # Gloo runs each work item in submission order, so the k-th gloo event is the k-th c10d op
    # (a reduce_scatter shows up as `gloo:all_reduce`); label it like the op. Point-to-point work
    # belongs to the send/recv op open on its own thread when it starts.
    p2p_rows = is_p2p[gloo_rows]
    fallback = next(iter(trace.pg_sizes), "default") if len(trace.pg_sizes) == 1 else "default"
    workers = {int(t): _thread_number(cpu.tids[int(t)]) for t in np.unique(tids[gloo_rows[~p2p_rows]]).tolist()}
    found = infer_groups(workers, trace.groups, fallback=fallback)
    worker_ops = [int(r) for r in c10d_rows if collective_kind(cpu.name_of(r)) and not p2p_names[cpu.name[r]]]
    worker_rows = gloo_rows[~p2p_rows]
    pool_of = [found.by_tid.get(int(t), fallback) for t in tids[worker_rows].tolist()]
    if len(set(pool_of)) > 1:
        op_of = match_gloo_pools(cpu, worker_ops, worker_rows, pool_of)
    else:
        op_of = match_gloo_work(cpu, worker_ops, worker_rows)
    op_of = merge_p2p_ops(cpu, c10d_rows[p2p_names[cpu.name[c10d_rows]]], gloo_rows, p2p_rows, op_of)
    comm_t = cpu.ts[gloo_rows].copy()
    comm_tid = tids[gloo_rows].copy()
    for i, op in enumerate(op_of):
        if op is not None:
            comm_t[i], comm_tid[i] = cpu.ts[op], tids[op]
    comm = EventIntervals(cpu.ts[gloo_rows], end[gloo_rows], cpu.ts[gloo_rows], labeller.label(comm_t, comm_tid, own_names[gloo_rows]))
    compute_rows = compute_mask.nonzero()[0]
    compute = EventIntervals(
        cpu.ts[compute_rows],
        end[compute_rows],
        cpu.ts[compute_rows],
        labeller.label(cpu.ts[compute_rows], tids[compute_rows], own_names[compute_rows]),
    )
    # Operators inside a c10d op, or inside our schedules' waits (the collective finishing), are not
    # compute. Drop them per event (for the timeline); the measured union subtracts the c10d union
    # exactly (`finish_rank`).
    p2p_main = gloo_rows[p2p_rows]
    outside = np.concatenate([c10d_rows, functional_rows, p2p_main, wait_rows])
    exclude = iv.union(cpu.ts[outside], end[outside])
    kept = ~iv.covers(exclude, compute.start)
    compute, compute_rows = compute.take(kept), compute_rows[kept]

    n = gloo_rows.size
    kinds = []
    nbytes_col = np.full(n, UNKNOWN, dtype=np.int64)
    issued = np.full(n, np.nan)
    # The engine labels around each call's c10d op (none without one).
    with_op = [i for i, op in enumerate(op_of) if op is not None]
    op_rows = np.array([op_of[i] for i in with_op], dtype=np.int64)
    hints: list[str | None] = [None] * n
    for i, h in zip(with_op, labeller.hints(cpu.ts[op_rows], tids[op_rows])):
        hints[i] = h
    pgs = [found.p2p_group if p2p else found.by_tid.get(int(t), fallback) for p2p, t in zip(p2p_rows.tolist(), tids[gloo_rows].tolist())]
    peer = np.full(n, UNKNOWN, dtype=np.int64)
    direction = np.zeros(n, dtype=np.int8)
    group_ranks = {g.name: g.ranks for g in trace.groups}
    for i, row in enumerate(gloo_rows.tolist()):
        gloo_args = cpu.args.get(row)
        op = op_of[i]
        op_args = cpu.args.get(int(op)) if op is not None else None
        kinds.append(
            (collective_kind(cpu.name_of(op)) if op is not None else None) or collective_kind(cpu.name_of(row)) or cpu.name_of(row)
        )
        nbytes = collective_nbytes(op_args, gloo_args.input_type if gloo_args else None) if op_args else None
        if nbytes is None:
            nbytes = collective_nbytes(gloo_args)
        nbytes_col[i] = UNKNOWN if nbytes is None else nbytes
        if op is not None:
            issued[i] = float(cpu.ts[op])
        if p2p_rows[i]:
            direction[i] = SEND if p2p_direction(cpu.name_of(row)) == "send" else RECV
            peer[i] = _peer(op_args, group_ranks.get(pgs[i], ()))
    sizes = np.array([trace.pg_sizes.get(pg) or trace.world_size or UNKNOWN for pg in pgs], dtype=np.int64)
    calls = Calls.build(
        kind=kinds,
        pg=pgs,
        nbytes=nbytes_col,
        dur_us=cpu.dur[gloo_rows],
        start_us=cpu.ts[gloo_rows],
        launch_us=cpu.ts[gloo_rows],
        group_size=sizes,
        issued_us=issued,
        hint=hints,
        peer=peer,
        direction=direction,
    )
    return _CpuEvents(comm, compute, calls, exclude, compute_rows, found.method)


def _thread_number(tid: str) -> int:
    """A trace's thread id as a number (Kineto writes the OS thread id); -1 if it is not one."""
    try:
        return int(tid)
    except ValueError:
        return -1


def _peer(op_args: CollectiveArgs | None, ranks: tuple[int, ...]) -> int:
    """The other rank of a c10d send/recv op: its `Concrete Inputs` [tensors, group, peer, tag]
    give the peer's rank in the group, mapped to the global rank through the group's ranks."""
    values = op_args.concrete_inputs if op_args is not None else None
    if not values or len(values) < 2:
        return UNKNOWN
    try:
        local = int(values[-2])
    except (TypeError, ValueError):
        return UNKNOWN
    if ranks:
        return ranks[local] if 0 <= local < len(ranks) else UNKNOWN
    return local
