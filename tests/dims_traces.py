"""Synthetic multi-rank traces of 2-D jobs (dp x tp), of pipelines (p stages, m microbatches,
GPipe or 1F1B) and of 3-D jobs (pipelines whose stages are dp x tp blocks), with the answer per
dimension and per pipeline stage known by construction.

Each job is simulated on one device clock shared by all ranks, from one program per rank:
compute runs on the compute stream (CPU: the main thread) one item after the other; a collective
starts when it is issued and its stream (CPU: its group's gloo worker) is free, and ends for all
the ranks of its group together, once the last of them has started, after a transfer time that
grows with its bus bytes. A send and its recv end together once both have started (GPU); on
CPU a send is eager (it ends a transfer after it starts) and its recv ends a transfer after the
later of the two starts. The truths are then computed from the simulated intervals alone by
interval arithmetic (`Intervals`), never by the analysis; tests/test_dims_traces.py checks them
against a brute-force grid.

GPU style (as Kineto writes NCCL jobs): kernels on pid 0, tid = stream; compute kernels on stream
7, each dimension's collectives on its own stream, sends and recvs on one stream per peer and
direction. The CPU launches every kernel LEAD µs before the compute stream reaches it (a
`cudaLaunchKernel` with the kernel's `correlation`), inside the `ProfilerStep#N` range of its
step; a communication kernel carries the arguments Kineto copies from `record_param_comms`
(`Collective name`, `In/Out msg nelems`, `Group size`, `dtype`, `Process Group Name`,
`Process Group Description`, `Process Group Ranks`; `Rank` and `Dst Rank`/`Src Rank` for
point-to-point), and the main thread has that `record_param_comms` op and the `nccl:*` annotation
around the launch. `distributedInfo.pg_config` lists the rank's groups (pg_name, pg_desc, pg_size,
ranks).

CPU style (gloo): compute is `aten::mm` on the main thread; a collective is its c10d op on the
main thread at the issue (DTensor's functional collectives around it, recording the group size
in `Concrete Inputs`, as torch 2.13 does), and its `gloo:*` work on one of its group's two worker
threads (`pt_gloo_runloop`); the wait is `_c10d_functional::wait_tensor` (tp) or nothing; sends and
recvs are `c10d::send` / `c10d::recv_` and `gloo:send` / `gloo:recv` on the main thread. The
calls name no group: the analysis must infer it.

Truth per dimension (all groups of one pg_desc) and rank: calls, bytes (nccl-tests' S: the input
of all_reduce and reduce_scatter, the output of all_gather; the message of a send or recv), comm
= the union of the dimension's calls inside the step windows, exposed = that union minus the
union of compute, hidden = comm - exposed, the group size, busbw = sum(S · factor(kind, n)) /
sum(duration) with nccl-tests' factor and n the group's own size. Per pipeline stage and step:
its window (GPU: from the first kernel it launched in the step to the last one's end, never
before the previous window's end, as profile_overlap/analysis/file/steps.py; CPU: the ProfilerStep
range), bubble = window minus the union of its compute, p2p_exposed = the union of its sends and
recvs in the window minus compute, idle = bubble - p2p_exposed, and the ideal (p-1)/(m+p-1).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from synthetic import write_trace

PID = 100
"""The process, and its main thread."""
LEAD = 400
"""GPU: how far (µs) the CPU's launches run ahead of the compute stream."""
COMPUTE_STREAM = 7
FLOAT = 4
"""Every tensor is float32."""

GPU_KERNEL = {
    "all_reduce": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
    "all_gather": "ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
    "reduce_scatter": "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
}
SENDRECV_KERNEL = {
    "dev": "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)",
    "legacy": "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
}
COLLECTIVE_NAME = {"all_reduce": "allreduce", "all_gather": "allgather", "reduce_scatter": "reduce_scatter", "send": "send", "recv": "recv"}
NCCL_OP = {"all_reduce": "nccl:all_reduce", "all_gather": "nccl:_all_gather_base", "reduce_scatter": "nccl:_reduce_scatter_base"}
COMPUTE_KERNEL = "void at::native::vectorized_elementwise_kernel<4>(float*)"
T0 = 1000
"""Where every rank's program starts (µs): after LEAD, so that no launch has a negative time."""
BUS_FACTOR = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "send": lambda n: 1.0,
    "recv": lambda n: 1.0,
}
"""nccl-tests' busbw / algbw (its doc/PERFORMANCE.md), written out here on purpose: the truth does
not import the analysis."""


# --- interval arithmetic over integer µs ------------------------------------------------------


@dataclass(frozen=True)
class Intervals:
    """A union of disjoint, sorted half-open intervals [a, b)."""

    spans: tuple[tuple[int, int], ...] = ()

    @staticmethod
    def of(pairs: Iterable[tuple[int, int]]) -> Intervals:
        out: list[tuple[int, int]] = []
        for a, b in sorted((a, b) for a, b in pairs if b > a):
            if out and a <= out[-1][1]:
                out[-1] = (out[-1][0], max(out[-1][1], b))
            else:
                out.append((a, b))
        return Intervals(tuple(out))

    def __and__(self, other: Intervals) -> Intervals:
        out, i, j = [], 0, 0
        while i < len(self.spans) and j < len(other.spans):
            (a, b), (c, d) = self.spans[i], other.spans[j]
            if min(b, d) > max(a, c):
                out.append((max(a, c), min(b, d)))
            if b < d:
                i += 1
            else:
                j += 1
        return Intervals(tuple(out))

    def __sub__(self, other: Intervals) -> Intervals:
        out = []
        for a, b in self.spans:
            cur = a
            for c, d in other.spans:
                if d <= cur or c >= b:
                    continue
                if c > cur:
                    out.append((cur, c))
                cur = max(cur, d)
            if cur < b:
                out.append((cur, b))
        return Intervals(tuple(out))

    def __or__(self, other: Intervals) -> Intervals:
        return Intervals.of(self.spans + other.spans)

    @property
    def total(self) -> int:
        return sum(b - a for a, b in self.spans)


# --- what a job is made of ----------------------------------------------------------------------


@dataclass(frozen=True)
class Group:
    name: str
    """pg_name, as in `distributedInfo.pg_config` and the calls' `Process Group Name`."""
    desc: str
    """pg_desc: `default_pg`, `mesh_dp`, `mesh_tp`, `mesh_pp`: the dimension."""
    ranks: tuple[int, ...]

    @property
    def size(self) -> int:
        return len(self.ranks)


@dataclass(frozen=True)
class Comm:
    """One communication call on one rank (device µs)."""

    kind: str
    """all_reduce, all_gather, reduce_scatter, send or recv."""
    group: Group
    issue: int
    """When the rank's compute stream (CPU: main thread) issued it."""
    start: int
    end: int
    nelems: int
    """S / 4: the full array of nccl-tests (for all_gather the output), the message of a send/recv."""
    lane: int
    """GPU: the stream. CPU: the gloo worker thread (collectives); sends and recvs are on the main thread."""
    peer: int | None = None
    """send/recv: the other rank (global)."""
    microbatch: int | None = None
    step: int | None = None

    @property
    def nbytes(self) -> int:
        return self.nelems * FLOAT

    def in_out_nelems(self) -> tuple[int, int]:
        n = self.group.size
        if self.kind == "all_gather":
            return self.nelems // n, self.nelems
        if self.kind == "reduce_scatter":
            return self.nelems, self.nelems // n
        return self.nelems, self.nelems


@dataclass
class Rank:
    rank: int
    groups: list[Group]
    """The groups this rank belongs to (its pg_config)."""
    compute: list[tuple[int, int, int]] = field(default_factory=list)
    """(issue, start, end) of each compute item."""
    comms: list[Comm] = field(default_factory=list)
    steps: list[tuple[int, int, int]] = field(default_factory=list)
    """(N, first issue, issue of the next step's first item or the end of this rank's last item)."""
    labels: list[tuple[str, int, int]] = field(default_factory=list)
    """CPU style: annotations on the main thread (pipelining's `Forward i` / `Backward i`)."""
    phases: list[tuple[str, int, int]] = field(default_factory=list)
    """(forward | backward | optimizer, first issue, the next phase's first issue): 2-D jobs' record_function ranges."""
    waits: list[tuple[int, int]] = field(default_factory=list)
    """CPU style: the main thread waiting for a tensor-parallel collective (`_c10d_functional::wait_tensor`)."""


@dataclass
class Job:
    style: str
    """"gpu" or "cpu"."""
    world: int
    groups: list[Group]
    ranks: list[Rank]
    kernels: str = "dev"
    """GPU send/recv kernel names: "dev" (ncclDevKernel_SendRecv) or "legacy" (ncclKernel_SendRecv_...)."""
    schedule: str | None = None
    stages: tuple[int, ...] = ()
    """Pipelines: the ranks in stage order (3-D: rank 0's pipeline)."""
    microbatches: int = 0
    lines: dict[int, tuple[int, ...]] = field(default_factory=dict)
    """Pipelines: per rank, the ranks of its pipeline in stage order."""


def transfer_us(kind: str, nbytes: int, n: int) -> int:
    """The simulated transfer time: 5 µs + 1 µs per 4 KiB of bus bytes."""
    return 5 + int(nbytes * BUS_FACTOR[kind](n)) // 4096


# --- 2-D jobs: FSDP over dp, tensor + sequence parallel over tp -----------------------------------


def mesh_groups(dp: int, tp: int, *, first_name: int = 1) -> tuple[Group, list[Group], list[Group]]:
    """The default group and a dp x tp mesh's groups as init_device_mesh makes them: rank = i·tp + j;
    the dp groups {j, tp + j, ...} (mesh_dp), then the tp groups {i·tp, ..., i·tp + tp - 1} (mesh_tp)."""
    world = dp * tp
    default = Group("0", "default_pg", tuple(range(world)))
    dps = [Group(str(first_name + j), "mesh_dp", tuple(i * tp + j for i in range(dp))) for j in range(tp)]
    tps = [Group(str(first_name + tp + i), "mesh_tp", tuple(i * tp + j for j in range(tp))) for i in range(dp)]
    return default, dps, tps


def fsdp_tp_program(*, layers: int, steps: int, world_all_reduce: bool) -> list[tuple]:
    """One rank's program (the same on every rank): ("compute", key), ("issue", handle, desc, kind,
    nelems), ("wait", handle), ("step", N), ("phase", name). Keys pick a per-rank duration (`_durations`)."""
    prog: list[tuple] = []
    params, acts, norms = 65536, 32768, 512  # nelems: a layer's parameters, a block's activations, the norms' grads
    h = iter(range(10**6))
    for n in range(1, steps + 1):
        prog += [("step", n), ("phase", "forward")]
        ag = next(h)
        prog.append(("issue", ag, "mesh_dp", "all_gather", params))
        prog.append(("wait", ag))
        for layer in range(layers):
            nxt = next(h)
            if layer + 1 < layers:  # FSDP2 prefetches the next layer's parameters
                prog.append(("issue", nxt, "mesh_dp", "all_gather", params))
            for part in ("attn", "mlp"):  # sequence parallel: gather the sequence, compute, scatter it
                g, s = next(h), next(h)
                prog += [("issue", g, "mesh_tp", "all_gather", acts), ("wait", g), ("compute", part)]
                prog += [("issue", s, "mesh_tp", "reduce_scatter", acts), ("wait", s)]
            prog.append(("compute", "between"))
            if layer + 1 < layers:
                prog.append(("wait", nxt))
        grads = []
        prog.append(("phase", "backward"))
        for layer in reversed(range(layers)):
            prev = next(h)
            if layer > 0:  # the backward prefetches the previous layer's parameters
                prog.append(("issue", prev, "mesh_dp", "all_gather", params))
            for part in ("mlp_bwd", "attn_bwd"):
                g, s = next(h), next(h)
                prog += [("issue", g, "mesh_tp", "all_gather", acts), ("wait", g), ("compute", part)]
                prog += [("issue", s, "mesh_tp", "reduce_scatter", acts), ("wait", s)]
            rs = next(h)
            prog.append(("issue", rs, "mesh_dp", "reduce_scatter", params))
            grads.append(rs)
            if layer > 0:
                prog.append(("compute", "between"))
                prog.append(("wait", prev))
        ar = next(h)  # the sequence-parallel norms' gradients, summed over tp
        prog += [("compute", "between"), ("issue", ar, "mesh_tp", "all_reduce", norms), ("wait", ar)]
        prog += [("wait", g) for g in grads]
        if world_all_reduce:  # a loss all_reduce over every rank, as a logging hook does
            w = next(h)
            prog += [("issue", w, "default_pg", "all_reduce", 16), ("wait", w)]
        prog += [("phase", "optimizer"), ("compute", "optimizer")]
    return prog


def _durations(rank: int) -> dict[str, int]:
    """Compute times (µs) that differ between ranks, so some ranks wait for others."""
    return {"attn": 40 + 6 * rank, "mlp": 60 + 4 * (rank % 2), "between": 12, "attn_bwd": 80 + 9 * rank,
            "mlp_bwd": 120 + 5 * (rank % 3), "optimizer": 90}  # fmt: skip


def fsdp_tp_job(
    *, dp: int = 2, tp: int = 2, layers: int = 2, steps: int = 2, style: str = "gpu", world_all_reduce: bool = False, wait_ops: bool = True
) -> Job:
    """A 2-D job: FSDP2 over dp (all_gathers prefetched a layer ahead, reduce_scatters of the
    gradients left to run beside the backward), tensor + sequence parallelism over tp (an
    all_gather before and a reduce_scatter after each attention and MLP, waited for at once, and
    an all_reduce of the norms' gradients), optionally a world all_reduce per step. Each step is
    labelled forward, backward and optimizer. CPU style: wait_ops=False leaves out the main thread's
    `_c10d_functional::wait_tensor` ops."""
    default, dps, tps = mesh_groups(dp, tp)
    groups = [default, *dps, *tps]
    world = dp * tp
    ranks = [Rank(r, [g for g in groups if r in g.ranks]) for r in range(world)]
    lanes = {"mesh_dp": 21, "mesh_tp": 22, "default_pg": 23}
    shared = fsdp_tp_program(layers=layers, steps=steps, world_all_reduce=world_all_reduce)
    programs = []
    for r in ranks:
        by_desc, durations = {g.desc: g for g in r.groups}, _durations(r.rank)
        prog = []
        for item in shared:
            if item[0] == "compute":
                prog.append(("compute", durations[item[1]], None))
            elif item[0] == "issue":
                _, handle, desc, kind, nelems = item
                prog.append(("coll", handle, by_desc[desc], kind, nelems, lanes[desc]))
            else:
                prog.append(item)
        programs.append(prog)
    _simulate(ranks, programs, style, wait_ops=wait_ops)
    return Job(style, world, groups, ranks)


def _simulate(ranks: list[Rank], programs: list[list[tuple]], style: str, *, wait_ops: bool = True) -> None:
    """Run every rank's program on one clock (module doc), filling in its compute, comms, steps,
    phases, labels and waits. Items: ("step", N), ("phase", name), ("compute", µs, label | None),
    ("gap", µs) (nothing runs), ("coll", handle, group, kind, nelems, stream), ("send" | "recv",
    handle, group, peer, nelems, stream, microbatch, step), ("wait", handle). The k-th call of a
    group on each of its ranks is one call, as is the k-th send from a to b with the k-th recv at b
    from a. Each call's start on each rank depends on the others' (a collective ends when its
    last rank has started): the simulation is repeated with the previous round's starts until
    they no longer change (a fixed point, as every wait depends on earlier work only)."""
    gpu = style == "gpu"
    starts: dict[tuple, dict[int, int]] = {}
    for _ in range(10_000):
        new: dict[tuple, dict[int, int]] = {}
        for rank, prog in zip(ranks, programs):
            _run(rank, prog, gpu, starts, new, wait_ops)
        if new == starts:
            return
        starts = new
    raise AssertionError("the simulation did not settle")


def _run(rank: Rank, prog: list[tuple], gpu: bool, starts: dict, new: dict, wait_ops: bool) -> None:
    me = rank.rank
    rank.compute, rank.comms, rank.steps, rank.phases, rank.labels, rank.waits = [], [], [], [], [], []
    cursor = T0
    free: dict[object, int] = {}  # queue -> free from: a GPU stream; on CPU a group's gloo work, in order
    ends: dict[int, tuple[int, str]] = {}
    seen: Counter = Counter()
    step_marks: list[tuple[int, int]] = []
    phase_marks: list[tuple[str, int]] = []
    serial = 0
    for item in prog:
        what = item[0]
        if what == "step":
            step_marks.append((item[1], cursor))
        elif what == "phase":
            phase_marks.append((item[1], cursor))
        elif what == "compute":
            _, d, label = item
            rank.compute.append((cursor, cursor, cursor + d))
            if label:
                rank.labels.append((label, cursor, cursor + d))
            cursor += d
        elif what == "gap":
            cursor += item[1]
        elif what == "wait":
            end, desc = ends[item[1]]
            if not gpu and wait_ops and end > cursor and desc == "mesh_tp":
                rank.waits.append((cursor, end))
            cursor = max(cursor, end)
        elif what == "coll":
            _, handle, group, kind, nelems, stream = item
            key = ("coll", group.name, seen[group.name])
            seen[group.name] += 1
            issued = cursor
            if not gpu:  # the c10d op holds the main thread for 1 µs; gloo's work starts after it
                cursor += 1
            queue = stream if gpu else group.name
            start = max(cursor, free.get(queue, 0))
            new.setdefault(key, {})[me] = start
            others = [v for q, v in starts.get(key, {}).items() if q != me and q in group.ranks]
            end = max([start, *others]) + transfer_us(kind, nelems * FLOAT, group.size)
            free[queue] = end
            ends[handle] = (end, group.desc)
            lane = stream if gpu else 1000 + 10 * int(group.name) + serial % 2
            serial += 1
            rank.comms.append(Comm(kind, group, issued, start, end, nelems, lane))
        else:  # send / recv
            _, handle, group, peer, nelems, stream, mb, n = item
            src, dst = (me, peer) if what == "send" else (peer, me)
            key = ("p2p", src, dst, seen[(what, peer)])
            seen[(what, peer)] += 1
            issued = cursor
            queue = stream if gpu else PID
            start = max(cursor, free.get(queue, 0)) + (0 if gpu else 1)  # CPU: after its 1 µs c10d op
            new.setdefault(key, {})[me] = start
            other = starts.get(key, {}).get(peer, 0)
            t = transfer_us(what, nelems * FLOAT, 2)
            end = start + t if (what == "send" and not gpu) else max(start, other) + t  # CPU: sends are eager
            free[queue] = end
            ends[handle] = (end, group.desc)
            rank.comms.append(Comm(what, group, issued, start, end, nelems, stream if gpu else PID, peer=peer, microbatch=mb, step=n))
            if not gpu:  # blocking, on the main thread
                cursor = end
    bounds = [s for _, s in step_marks[1:]] + [cursor]
    rank.steps = [(n, s, e) for (n, s), e in zip(step_marks, bounds)]
    bounds = [s for _, s in phase_marks[1:]] + [cursor]
    rank.phases = [(name, s, e) for (name, s), e in zip(phase_marks, bounds)]


# --- pipelines ----------------------------------------------------------------------------------------


def schedule_ops(schedule: str, stage: int, stages: int, m: int) -> list[tuple[str, int]]:
    """("F" | "B", microbatch) in the order the stage runs them: GPipe all forwards then all
    backwards; 1F1B (p - 1 - stage) warmup forwards, then one forward and one backward in turn."""
    if schedule == "gpipe":
        return [("F", i) for i in range(m)] + [("B", i) for i in range(m)]
    if schedule != "1f1b":
        raise ValueError(f"unknown schedule {schedule!r}: gpipe or 1f1b")
    warm = min(stages - 1 - stage, m)
    ops = [("F", i) for i in range(warm)]
    for i in range(m - warm):
        ops += [("F", warm + i), ("B", i)]
    return ops + [("B", i) for i in range(m - warm, m)]


def pipeline_job(
    *,
    stages: int = 2,
    microbatches: int = 4,
    schedule: str = "1f1b",
    steps: int = 2,
    style: str = "gpu",
    order: tuple[int, ...] | None = None,
    kernels: str = "dev",
    nelems: int = 8192,
    host_gap: int = 15,
    forward_us: tuple[int, ...] | None = None,
    dp: int = 1,
    tp: int = 1,
) -> Job:
    """A pipeline of `stages` stages, `microbatches` per step: a stage's forward of microbatch i
    waits for its activations from the stage before, its backward for the gradients from the stage
    after; it sends its outputs on as soon as it has them; the optimizer runs once all of a step's
    sends have ended and the host has spent `host_gap` µs (the stage idles: nothing computes or
    communicates). A forward takes forward_us[stage], a backward twice that.

    dp = tp = 1: one rank per stage (stage k on rank order[k]; default rank k), in one group:
    default_pg, or mesh_pp where order is given. Else a 3-D job on a (pp, dp, tp) mesh, rank =
    (stage · dp + d) · tp + t: each stage is a dp x tp block of ranks; a rank sends to the rank of
    the same (d, t) in the next stage (its mesh_pp group); with tp > 1 each forward and backward
    all-gathers its input and reduce-scatters its output over mesh_tp (waited for at once); with
    dp > 1 each step all-gathers the stage's parameters over mesh_dp at its start and
    reduce-scatters their gradients before the optimizer (FSDP2 with one unit per stage)."""
    per = dp * tp
    world = stages * per
    fwd = list(forward_us or [30 + 10 * s for s in range(stages)])  # by default the later stages compute a little longer
    opt, params = 25, 65536
    default = Group("0", "default_pg", tuple(range(world)))
    if per == 1:
        order = tuple(order or range(stages))
        assert sorted(order) == list(range(stages)), order
        pp = default if order == tuple(range(stages)) else Group("1", "mesh_pp", tuple(range(world)))
        groups = [default] if pp is default else [default, pp]
        lines = {r: order for r in range(world)}
        pp_of, dp_of, tp_of = dict.fromkeys(range(world), pp), {}, {}
    else:
        assert order is None, "a 3-D job's stages are its mesh's"
        lines = {r: tuple(s * per + r % per for s in range(stages)) for r in range(world)}
        pps = [Group(str(1 + i), "mesh_pp", tuple(s * per + i for s in range(stages))) for i in range(per)]
        dps = [Group(str(1 + per + s * tp + t), "mesh_dp", tuple(s * per + d * tp + t for d in range(dp)))
               for s in range(stages) for t in range(tp)]  # fmt: skip
        tps = [Group(str(1 + per + stages * tp + s * dp + d), "mesh_tp", tuple(s * per + d * tp + t for t in range(tp)))
               for s in range(stages) for d in range(dp)]  # fmt: skip
        groups = [default, *pps, *(dps if dp > 1 else []), *(tps if tp > 1 else [])]
        pp_of = {r: g for g in pps for r in g.ranks}
        dp_of = {r: g for g in dps for r in g.ranks} if dp > 1 else {}
        tp_of = {r: g for g in tps for r in g.ranks} if tp > 1 else {}
    ranks = [Rank(r, [g for g in groups if r in g.ranks]) for r in range(world)]
    programs = []
    for r in range(world):
        line = lines[r]
        s = line.index(r)
        h = iter(range(10**6))
        prog: list[tuple] = []

        def coll(group: Group, kind: str, n: int, stream: int, prog: list[tuple] = prog, h=h) -> None:
            """Issue a collective and wait for it at once."""
            k = next(h)
            prog.extend([("coll", k, group, kind, n, stream), ("wait", k)])

        for n in range(1, steps + 1):
            prog.append(("step", n))
            if r in dp_of:
                coll(dp_of[r], "all_gather", params, 21)
            sends = []
            for op, i in schedule_ops(schedule, s, stages, microbatches):
                prev, nxt = (s - 1, s + 1) if op == "F" else (s + 1, s - 1)  # where its input comes from, where its output goes
                if 0 <= prev < stages:
                    k = next(h)
                    prog += [("recv", k, pp_of[r], line[prev], nelems, 41 + 2 * line[prev], i, n), ("wait", k)]
                if r in tp_of:
                    coll(tp_of[r], "all_gather", nelems, 22)
                label = f"{'Forward' if op == 'F' else 'Backward'} {i}"
                prog.append(("compute", fwd[s] if op == "F" else 2 * fwd[s], label))
                if r in tp_of:
                    coll(tp_of[r], "reduce_scatter", nelems, 22)
                if 0 <= nxt < stages:
                    sends.append(next(h))
                    prog.append(("send", sends[-1], pp_of[r], line[nxt], nelems, 40 + 2 * line[nxt], i, n))
            prog += [("wait", k) for k in sends]
            if r in dp_of:
                coll(dp_of[r], "reduce_scatter", params, 21)
            prog += [("gap", host_gap), ("compute", opt, None)]
        programs.append(prog)
    _simulate(ranks, programs, style)
    stage_lines = {r: lines[r] for r in range(world)}
    return Job(style, world, groups, ranks, kernels=kernels, schedule=schedule, stages=lines[0], microbatches=microbatches,
               lines=stage_lines)  # fmt: skip


# --- writing the traces ---------------------------------------------------------------------------------


def _x(cat: str, name: str, tid: int, ts: float, dur: float, args: dict | None = None, pid: int = PID) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args or {}}


def _thread(tid: int, name: str) -> dict:
    return {"ph": "M", "name": "thread_name", "pid": PID, "tid": tid, "args": {"name": name}}


def _pg_config(job: Job, rank: Rank) -> list[dict]:
    return [{"pg_name": g.name, "pg_desc": g.desc, "backend_config": "cuda:nccl" if job.style == "gpu" else "cpu:gloo,cuda:gloo",
             "pg_size": g.size, "ranks": list(g.ranks)} for g in rank.groups]  # fmt: skip


def _comm_args(job: Job, rank: Rank, c: Comm) -> dict:
    i, o = c.in_out_nelems()
    args = {"Collective name": COLLECTIVE_NAME[c.kind], "In msg nelems": i, "Out msg nelems": o, "Group size": c.group.size,
            "dtype": "Float", "In split size": "[]", "Out split size": "[]", "Process Group Name": c.group.name,
            "Process Group Description": c.group.desc, "Process Group Ranks": str(list(c.group.ranks))}  # fmt: skip
    if c.peer is not None:
        args["Rank"] = c.group.ranks.index(c.peer)
        args["Dst Rank" if c.kind == "send" else "Src Rank"] = c.peer
    return args


def gpu_doc(job: Job, rank: Rank) -> dict:
    events = [_thread(PID, f"thread {PID} (python)")]
    items = sorted([(i, s, e, None) for i, s, e in rank.compute] + [(c.issue, c.start, c.end, c) for c in rank.comms],
                   key=lambda x: (x[0], x[3] is None))  # fmt: skip
    same = 0
    for k, (issue, start, end, c) in enumerate(items, start=1):
        # Launched LEAD µs before the compute stream reaches the item; items issued in the same µs
        # are launched 0.05 µs apart, in program order (collectives first).
        same = same + 1 if k > 1 and items[k - 2][0] == issue else 0
        launch = issue - LEAD + 0.05 * same + 0.01
        args = {"device": 0, "stream": COMPUTE_STREAM if c is None else c.lane, "correlation": k, "External id": k}
        if c is None:
            name = COMPUTE_KERNEL
        else:
            comm = _comm_args(job, rank, c)
            args |= comm
            name = SENDRECV_KERNEL[job.kernels] if c.peer is not None else GPU_KERNEL[c.kind]
            local = c.group.ranks.index(rank.rank)
            op = NCCL_OP.get(c.kind) or (f"nccl:send {local}->{comm['Rank']}" if c.kind == "send" else f"nccl:recv {local}<-{comm['Rank']}")
            events.append(_x("cpu_op", "record_param_comms", PID, launch - 0.01, 0.04, {"External id": k, **comm}))
            events.append(_x("user_annotation", op, PID, launch - 0.005, 0.025, {"External id": k}))
        events.append(_x("cuda_runtime", "cudaLaunchKernel", PID, launch, 0.01, {"correlation": k, "External id": k, "cbid": 211}))
        events.append(_x("kernel", name, args["stream"], start, end - start, args, pid=0))
    for n, a, b in rank.steps:
        events.append(_x("user_annotation", f"ProfilerStep#{n}", PID, a - LEAD - 0.5, b - a))
    # A phase holds the launches of the items issued in it (launched at issue - LEAD + 0.01 or later).
    events += [_x("user_annotation", name, PID, a - LEAD - 0.25, b - a - 0.02) for name, a, b in rank.phases]
    return _head(job, rank, events)


# The CPU spellings of torch 2.13 on gloo: FSDP2's collectives are plain c10d ops, DTensor's go
# through the functional ops (which record the group size, not its name).
C10D = {
    ("mesh_dp", "all_gather"): ("c10d::_allgather_base_", None),
    ("mesh_dp", "reduce_scatter"): ("c10d::_reduce_scatter_base_", None),
    ("mesh_tp", "all_gather"): ("c10d::allgather_into_tensor_coalesced_", "_c10d_functional::all_gather_into_tensor"),
    ("mesh_tp", "reduce_scatter"): ("c10d::reduce_scatter_tensor_coalesced_", "_c10d_functional::reduce_scatter_tensor"),
    ("mesh_tp", "all_reduce"): ("c10d::allreduce_", "_c10d_functional::all_reduce"),
    ("default_pg", "all_reduce"): ("c10d::allreduce_", None),
}


def cpu_doc(job: Job, rank: Rank) -> dict:
    events = [_thread(PID, f"thread {PID} (python)")]
    for tid in sorted({c.lane for c in rank.comms if c.peer is None}):
        events.append(_thread(tid, "pt_gloo_runloop"))
    for n, a, b in rank.steps:
        events.append(_x("user_annotation", f"ProfilerStep#{n}", PID, a, b - a))
    events += [_x("user_annotation", name, PID, a, b - a) for name, a, b in rank.labels + rank.phases]
    events += [_x("cpu_op", "_c10d_functional::wait_tensor", PID, a, b - a, {"Input Dims": [[64]]}) for a, b in rank.waits]
    for _, start, end in rank.compute:
        events.append(
            _x("cpu_op", "aten::mm", PID, start, end - start, {"Input Dims": [[64, 64], [64, 64]], "Input type": ["float", "float"]})
        )
    for c in rank.comms:
        i, o = c.in_out_nelems()
        if c.peer is not None:
            local = c.group.ranks.index(c.peer)
            op = "c10d::send" if c.kind == "send" else "c10d::recv_"
            events.append(_x("cpu_op", op, PID, c.start - 1, 1, {"Concrete Inputs": ["", "", str(local), "0"],
                             "Input type": ["TensorList", "", "Scalar", "Scalar"], "Input Dims": [[[c.nelems]], [], [], []]}))  # fmt: skip
            sizes = {"Concrete Inputs": [""], "Input type": ["float"], "Input Dims": [[c.nelems]]}
            events.append(_x("user_annotation", f"gloo:{c.kind}", PID, c.start, c.end - c.start, sizes))
            continue
        op, functional = C10D[(c.group.desc, c.kind)]
        if functional is not None:  # the functional op records the group size, and wraps the c10d op exactly
            concrete = {"all_gather": ["", str(c.group.size), ""], "reduce_scatter": ["", "", str(c.group.size), ""]}.get(
                c.kind, ["", "", ""]
            )
            events.append(_x("cpu_op", functional, PID, c.issue, 1, {"Concrete Inputs": concrete, "Input Dims": [[i], [], []]}))
        dims = [[o], [i], [], []] if op.endswith("base_") else [[[o]], [[i]], [], []]
        events.append(_x("cpu_op", op, PID, c.issue, 1, {"Input Dims": dims, "Input type": ["float", "float", "", ""]}))
        gloo = "all_gather" if c.kind == "all_gather" else "all_reduce"  # gloo runs reduce_scatter as all_reduce
        events.append(
            _x("user_annotation", f"gloo:{gloo}", c.lane, c.start, c.end - c.start, {"Input Dims": [[i]], "Input type": ["float"]})
        )
    return _head(job, rank, events)


def _head(job: Job, rank: Rank, events: list[dict]) -> dict:
    dist = {"backend": "nccl" if job.style == "gpu" else "gloo", "rank": rank.rank, "world_size": job.world,
            "pg_count": len(rank.groups), "pg_config": _pg_config(job, rank)}  # fmt: skip
    return {"schemaVersion": 1, "traceEvents": events, "distributedInfo": dist}


def write_job(job: Job, folder: Path) -> Path:
    """One Kineto trace per rank, `rank<r>.pt.trace.json`."""
    folder.mkdir(parents=True, exist_ok=True)
    for rank in job.ranks:
        doc = gpu_doc(job, rank) if job.style == "gpu" else cpu_doc(job, rank)
        write_trace(doc, folder / f"rank{rank.rank}.pt.trace.json")
    return folder


# --- the truth ------------------------------------------------------------------------------------------


def step_windows(job: Job, rank: Rank) -> list[tuple[int, int, int]]:
    """(N, start, end) of each step as the analysis measures it (module doc)."""
    if job.style == "cpu":
        return list(rank.steps)
    kernels = [(i, s, e) for i, s, e in rank.compute] + [(c.issue, c.start, c.end) for c in rank.comms]
    out, prev = [], -(10**12)
    for n, lo, hi in rank.steps:
        mine = [(s, e) for issue, s, e in kernels if lo <= issue < hi]
        first, last = (min(s for s, _ in mine), max(e for _, e in mine)) if mine else (lo, lo)
        start = max(first, prev)
        prev = max(last, start)
        out.append((n, start, prev))
    return out


@dataclass(frozen=True)
class DimTruth:
    """One dimension on one rank, over all its steps."""

    pg_names: tuple[str, ...]
    """Every group of this dimension, over all ranks."""
    group_size: int
    calls: int
    bytes: int
    comm_us: int
    hidden_us: int
    exposed_us: int
    busbw_gbps: float


@dataclass(frozen=True)
class StageTruth:
    """One pipeline stage (rank) in one step."""

    stage: int
    step: int
    window_us: int
    bubble_us: int
    p2p_exposed_us: int
    idle_us: int
    """Neither compute nor a send/recv: the host's gaps, and in a 3-D job the other dimensions' exposed collectives."""
    microbatches: int
    """Activation sends of stage 0 (recvs of the last stage) in this step."""

    @property
    def bubble_pct(self) -> float:
        return 100.0 * self.bubble_us / self.window_us


def _windows(job: Job, rank: Rank) -> Intervals:
    return Intervals.of((s, e) for _, s, e in step_windows(job, rank))


def _compute(rank: Rank) -> Intervals:
    return Intervals.of((s, e) for _, s, e in rank.compute)


def dimension_truth(job: Job) -> dict[str, dict[int, DimTruth]]:
    """{pg_desc: {rank: DimTruth}}: every rank's calls fall in exactly one dimension."""
    out: dict[str, dict[int, DimTruth]] = {}
    for desc in dict.fromkeys(g.desc for g in job.groups):
        names = tuple(g.name for g in job.groups if g.desc == desc)
        for rank in job.ranks:
            mine = [c for c in rank.comms if c.group.desc == desc]
            if not mine:
                continue
            (size,) = {c.group.size for c in mine}
            comm = Intervals.of((c.start, c.end) for c in mine) & _windows(job, rank)
            exposed = comm - _compute(rank)
            bus = sum(c.nbytes * BUS_FACTOR[c.kind](size) for c in mine)
            dur = sum(c.end - c.start for c in mine)
            out.setdefault(desc, {})[rank.rank] = DimTruth(
                names,
                size,
                len(mine),
                sum(c.nbytes for c in mine),
                comm.total,
                comm.total - exposed.total,
                exposed.total,
                bus / (dur * 1e3),
            )
    return out


def exposed_truth(job: Job) -> dict[int, int]:
    """Per rank: the union of all its communication minus compute, inside the step windows."""
    return {r.rank: ((Intervals.of((c.start, c.end) for c in r.comms) & _windows(job, r)) - _compute(r)).total for r in job.ranks}


def pipeline_truth(job: Job) -> dict[int, list[StageTruth]]:
    """{rank: [StageTruth per step]} of a pipeline job."""
    out: dict[int, list[StageTruth]] = {}
    for rank in job.ranks:
        line = job.lines[rank.rank]
        stage = line.index(rank.rank)
        compute = _compute(rank)
        p2p = Intervals.of((c.start, c.end) for c in rank.comms if c.peer is not None)
        rows = []
        for n, a, b in step_windows(job, rank):
            window = Intervals.of([(a, b)])
            bubble = window - compute
            exposed = (p2p & window) - compute
            first_sends = {c.microbatch for c in job.ranks[line[0]].comms if c.kind == "send" and c.step == n and c.peer == line[1]}
            rows.append(StageTruth(stage, n, b - a, bubble.total, exposed.total, bubble.total - exposed.total, len(first_sends)))
        out[rank.rank] = rows
    return out


def ideal_bubble(stages: int, microbatches: int) -> float:
    """The schedule's ideal bubble fraction (GPipe and 1F1B): (p-1)/(m+p-1)."""
    return (stages - 1) / (microbatches + stages - 1)
