"""The `whatif` model, pure: the ring α-β cost of a collective, each schedule's dependency graph
for one training step, and the crossover. Durations in, times out; no trace, no torch.

A mode's step is a `StepGraph`: the compute of each communication unit per phase (µs), and the
collectives it issues, each tied to the unit whose work it waits for or feeds. `tasks` turns it
into the tasks of the replay (tools/whatif/replay.py), with the waits where the pipeline waits:

- sequential: forward, backward, then a blocking all_reduce per unit (last unit first), then Adam.
- split: unit k's reduce_scatter starts when B_k ends and runs under the earlier units' backward;
  the optimizer waits for it, updates the shard, starts unit k's all_gather; the next step's F_k
  waits for that all_gather.
- split-blocking: the same, with every collective waited for at once.
- ddp: each gradient bucket's all_reduce starts when the backward of the unit that fills it ends;
  the optimizer waits for all of them.
- fsdp2: unit k's all_gather is issued d units ahead (prefetch: as F(k−d) starts) and F_k waits
  for it; with resharding the backward gathers again d units ahead (as B(k+d) starts); unit k's reduce_scatter starts when B_k
  ends; the optimizer waits for all of them. Serial (Knobs.serial): every collective holds the
  compute stream, in issue order.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from profile_overlap.core.modes import MODES
from profile_overlap.tools.whatif.replay import COMM, COMPUTE, ReplayedStep, Task, replay, step_times

_RING_STEPS = {
    "all_reduce": lambda n: 2 * (n - 1),
    "reduce_scatter": lambda n: n - 1,
    "all_gather": lambda n: n - 1,
    "all_to_all": lambda n: n - 1,
    "broadcast": lambda n: n - 1,
}
_BUS_FACTOR = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
}


def ring_steps(kind: str, n: int) -> int:
    """Latency terms of a ring collective on n ranks: 2(n−1) for all_reduce, n−1 for the rest."""
    return _RING_STEPS[kind](n)


def bus_factor(kind: str, n: int) -> float:
    """nccl-tests' busbw / algbw ratio (analysis/file/bandwidth.py has the same table for traces)."""
    return _BUS_FACTOR[kind](n)


def ring_cost_us(kind: str, nbytes: float, n: int, *, latency_us: float, link_gbps: float) -> float:
    """t = α·steps(kind, n) + S·factor(kind, n) / B, in µs (B in GB/s = 1e3 bytes per µs)."""
    return latency_us * ring_steps(kind, n) + nbytes * bus_factor(kind, n) / (link_gbps * 1e3)


@dataclass(frozen=True)
class Comm:
    """One collective of a step."""

    kind: str
    nbytes: int
    """S of nccl-tests: the full array."""
    phase: str
    """forward, backward or optimizer: where the schedule issues it."""
    unit: int
    """The communication unit it belongs to (ddp: the unit whose backward fills its bucket)."""
    dur_us: float


@dataclass(frozen=True)
class Knobs:
    """The settings a run can change that move its collectives (advise replays each)."""

    split_prefetch: int = 0
    """split: F_k waits for the all_gathers of units k..k+N (`--split-prefetch N`)."""
    fsdp_forward_ahead: int = 1
    """fsdp2: unit k's forward all_gather is issued when F(k−d) starts (d units ahead); 0: at F_k's own start."""
    fsdp_backward_ahead: int = 1
    """fsdp2: unit k's backward all_gather is issued when B(k+d) starts."""
    reshard: bool | None = None
    """fsdp2: True: the backward gathers every unit again (`--reshard-after-forward`), at the forward
    gathers' cost when the run did not; False: no backward gathers; None: as measured."""
    serial: bool = False
    """fsdp2: its collectives run beside no compute (each holds the compute stream while it runs), as
    measured where FSDP2's copies and waits serialise them (CPU, gloo): prefetch then moves nothing."""


@dataclass(frozen=True)
class StepGraph:
    """One mode's step: compute per unit and phase (µs) and its collectives in issue order."""

    mode: str
    pre_us: float
    """Compute in the step outside every phase (the batch), before the forward."""
    forward_us: tuple[float, ...]
    backward_us: tuple[float, ...]
    optimizer_us: tuple[float, ...]
    comms: tuple[Comm, ...]
    knobs: Knobs = Knobs()
    slowdown: tuple[tuple[str, float], ...] = ()
    """(phase, s) per phase ("other": the pre-forward): compute of that phase that runs beside
    communication takes (1 + s) of its alone time (definitions: `interference_used`)."""

    @property
    def num_units(self) -> int:
        return len(self.forward_us)


def ddp_buckets(params: Sequence[tuple[int, int]], cap_bytes: float, first_cap_bytes: float | None = None) -> tuple[tuple[int, int], ...]:
    """DDP's gradient buckets for `params` = (unit, nbytes) in forward (model.parameters()) order: the
    Reducer fills buckets in reverse order and closes one when it holds its cap or more: the first
    bucket's `first_cap_bytes` when given (`bucket_cap_mb_list=[first, cap]`), every later one's
    `cap_bytes`. Returns (unit whose backward fills it: the unit of its last parameter, bucket
    nbytes), in backward order."""
    out: list[tuple[int, int]] = []
    size, unit = 0, -1
    for u, nbytes in reversed(params):
        size, unit = size + nbytes, u
        if size >= (first_cap_bytes if first_cap_bytes is not None and not out else cap_bytes):
            out.append((unit, size))
            size = 0
    if size:
        out.append((unit, size))
    return tuple(out)


def rebucket(graph: StepGraph, buckets: Sequence[tuple[int, int]], cost: Callable[[int], float]) -> StepGraph:
    """`graph` (ddp) with its backward all_reduces replaced by one per bucket, each costing cost(nbytes) µs."""
    assert MODES[graph.mode].unit_calls is None, graph.mode  # a bucketed backward
    keep = tuple(c for c in graph.comms if c.phase != "backward")
    new = tuple(Comm(kind="all_reduce", nbytes=n, phase="backward", unit=u, dur_us=cost(n)) for u, n in buckets)
    return dataclasses.replace(graph, comms=new + keep)


def regroup(graph: StepGraph, nbytes: Sequence[int], size: int, cost: Callable[[str, int], float]) -> StepGraph:
    """`graph` (fsdp2, one unit per communication unit, of `nbytes` each) with its units merged into
    fully_shard groups of `size` consecutive units (`--fsdp-group`): each group's compute is its
    units' sum, and each of the graph's per-unit collectives becomes one per group, of the group's
    bytes, costing cost(kind, nbytes) µs."""
    assert "fsdp_group" in MODES[graph.mode].flags, graph.mode
    groups = [range(k, min(k + size, graph.num_units)) for k in range(0, graph.num_units, size)]

    def merged(xs: tuple[float, ...]) -> tuple[float, ...]:
        return tuple(sum(xs[u] for u in g) for g in groups)

    kinds = list(dict.fromkeys((c.phase, c.kind) for c in graph.comms))
    comms = []
    for phase, kind in kinds:
        order = range(len(groups)) if phase == "forward" else reversed(range(len(groups)))
        for g in order:
            n = sum(nbytes[u] for u in groups[g])
            comms.append(Comm(kind=kind, nbytes=n, phase=phase, unit=g, dur_us=cost(kind, n)))
    return dataclasses.replace(
        graph,
        forward_us=merged(graph.forward_us),
        backward_us=merged(graph.backward_us),
        optimizer_us=merged(graph.optimizer_us),
        comms=tuple(comms),
    )


def tasks(graph: StepGraph, *, num_steps: int = 3) -> list[Task]:
    """The replay's tasks for `num_steps` back-to-back steps of `graph.mode`."""
    build = BUILDERS[graph.mode]
    out: list[Task] = []
    carry: dict = {}
    for step in range(num_steps):
        build(graph, out, step, carry)
    slowdown = dict(graph.slowdown)
    if not any(slowdown.values()):
        return out
    return [dataclasses.replace(t, slowdown=slowdown.get(_phase_of(t) or "", 0.0)) if t.stream == COMPUTE else t for t in out]


_PHASE_OF_TASK = {"F": "forward", "B": "backward", "O": "optimizer", "o": "optimizer"}


def _phase_of(task: Task) -> str | None:
    """The phase of a compute task by its name (pre, F<k>, B<k>, O<k>, o<k>); None for the others
    (fsdp2's serial collectives, split-blocking's wait)."""
    return "other" if task.name == "pre" else _PHASE_OF_TASK.get(task.name[:1]) if task.name[1:].isdigit() else None


def _add(out: list[Task], name: str, stream: str, dur: float, deps, step: int) -> int:
    out.append(Task(name, stream, float(dur), tuple(sorted({d for d in deps if d is not None})), step))
    return len(out) - 1


def _comms(graph: StepGraph, phase: str, kind: str | None = None) -> list[Comm]:
    return [c for c in graph.comms if c.phase == phase and (kind is None or c.kind == kind)]


def _forward_backward(graph: StepGraph, out: list[Task], step: int, *, before_forward=None, after_backward=None):
    """P, F0..F(K-1), B(K-1)..B0; before_forward(k) -> deps of F_k; after_backward(k, i) -> deps of
    the next compute task after B_k. Returns B_k's index per unit."""
    _add(out, "pre", COMPUTE, graph.pre_us, (), step)
    for k, dur in enumerate(graph.forward_us):
        _add(out, f"F{k}", COMPUTE, dur, before_forward(k) if before_forward else (), step)
    ends: dict[int, int] = {}
    wait: tuple = ()
    for k in reversed(range(graph.num_units)):
        ends[k] = _add(out, f"B{k}", COMPUTE, graph.backward_us[k], wait, step)
        wait = after_backward(k, ends[k]) if after_backward else ()
    return ends, wait


def _optimizer(graph: StepGraph, out: list[Task], step: int, deps) -> None:
    for k, dur in enumerate(graph.optimizer_us):
        _add(out, f"O{k}", COMPUTE, dur, deps if k == 0 else (), step)


def _sequential(graph: StepGraph, out: list[Task], step: int, carry: dict) -> None:
    ends, _ = _forward_backward(graph, out, step)
    last = ends[0]
    for c in graph.comms:  # blocking, one after the other, after the whole backward
        last = _add(out, f"{c.kind}{c.unit}", COMM, c.dur_us, (last,), step)
    _optimizer(graph, out, step, (last,))


def _split(graph: StepGraph, out: list[Task], step: int, carry: dict) -> None:
    blocking = not MODES[graph.mode].overlaps
    gathers: dict[int, int] = carry.get("ag", {})
    rs_of = {c.unit: c for c in _comms(graph, "backward", "reduce_scatter")}
    ag_of = {c.unit: c for c in _comms(graph, "optimizer", "all_gather")}
    rs: dict[int, int] = {}

    def after_backward(k: int, b: int) -> tuple:
        if k not in rs_of:
            return ()
        rs[k] = _add(out, f"RS{k}", COMM, rs_of[k].dur_us, (b,), step)
        return (rs[k],) if blocking else ()

    ahead = graph.knobs.split_prefetch

    def before_forward(k: int) -> tuple:
        return tuple(gathers.get(j) for j in range(k, k + ahead + 1))

    _, wait = _forward_backward(graph, out, step, before_forward=before_forward, after_backward=after_backward)
    new: dict[int, int] = {}
    for k, dur in enumerate(graph.optimizer_us):
        o = _add(out, f"o{k}", COMPUTE, dur, (rs.get(k), *wait), step)
        wait = ()
        if k in ag_of:
            new[k] = _add(out, f"AG{k}", COMM, ag_of[k].dur_us, (o,), step)
            wait = (new[k],) if blocking else ()
    if wait:  # split-blocking: the step ends when its last all_gather has been waited for
        _add(out, "wait", COMPUTE, 0.0, wait, step)
    carry["ag"] = new


def _ddp(graph: StepGraph, out: list[Task], step: int, carry: dict) -> None:
    buckets: dict[int, list[Comm]] = {}
    for c in _comms(graph, "backward"):
        buckets.setdefault(c.unit, []).append(c)
    last: list[int] = []

    def after_backward(k: int, b: int) -> tuple:
        for c in buckets.get(k, ()):
            last.append(_add(out, f"AR{k}", COMM, c.dur_us, (b,), step))
        return ()

    _forward_backward(graph, out, step, after_backward=after_backward)
    _optimizer(graph, out, step, tuple(last[-1:]))


def _fsdp2(graph: StepGraph, out: list[Task], step: int, carry: dict) -> None:
    """Gathers are listed where they are issued (the comm stream runs them in that order): forward
    d units ahead, as F(k−d) starts; backward d units ahead, as B(k+d) starts."""
    knobs = graph.knobs
    fwd = {c.unit: c for c in _comms(graph, "forward", "all_gather")}
    bwd = {c.unit: c for c in _comms(graph, "backward", "all_gather")}
    if knobs.reshard is not None:
        bwd = (bwd or fwd) if knobs.reshard else {}
    rs_of = {c.unit: c for c in _comms(graph, "backward", "reduce_scatter")}
    K, df, db = graph.num_units, knobs.fsdp_forward_ahead, knobs.fsdp_backward_ahead
    comm = COMPUTE if knobs.serial else COMM
    last = _add(out, "pre", COMPUTE, graph.pre_us, (), step)
    ag: dict[int, int] = {}
    for k in range(K):
        for j in range(k, k + df + 1) if k == 0 else (k + df,):
            if j in fwd and j < K:
                ag[j] = _add(out, f"AG{j}", comm, fwd[j].dur_us, (last,), step)
        last = _add(out, f"F{k}", COMPUTE, graph.forward_us[k], (ag.get(k),), step)
    gb: dict[int, int] = {}
    rs: list[int] = []
    for k in reversed(range(K)):
        for j in range(k, k - db - 1, -1) if k == K - 1 else (k - db,):
            if j in bwd and j >= 0:
                gb[j] = _add(out, f"AGb{j}", comm, bwd[j].dur_us, (last,), step)
        last = _add(out, f"B{k}", COMPUTE, graph.backward_us[k], (gb.get(k),), step)
        if k in rs_of:
            rs.append(_add(out, f"RS{k}", comm, rs_of[k].dur_us, (last,), step))
    _optimizer(graph, out, step, tuple(rs[-1:]))


def simulate(graph: StepGraph) -> ReplayedStep:
    """The steady-state step of `graph`: the second of three back-to-back replayed steps."""
    task_list = tasks(graph, num_steps=3)
    return step_times(task_list, replay(task_list), step=1)


def crossover(values: Sequence[float], speedups: Sequence[float | None]) -> str:
    """Where speedup > 1 along sorted `values`: "always" (at every point), "from X" (at X and every
    later point), "up to X" (at every point up to X, not after), or "never" (neither)."""
    wins = [s is not None and s > 1 for s in speedups]
    if all(wins):
        return "always"
    if wins[-1]:
        first = len(wins)
        while wins[first - 1]:
            first -= 1
        return f"from {_fmt(values[first])}"
    if wins[0]:
        last = 0
        while wins[last + 1]:
            last += 1
        return f"up to {_fmt(values[last])}"
    return "never"


def _fmt(x: float) -> str:
    return f"{x:g}"


def apart(x1: float, x2: float) -> bool:
    """Two sizes far enough apart for a slope between them: by 10% of the larger or more (closer, the
    slope is the two points' noise divided by almost nothing)."""
    return abs(x2 - x1) >= 0.1 * max(abs(x1), abs(x2))


def robust_line(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """(a, b) of y = a + b·x: b by Theil–Sen, the median slope between two points whose x are apart
    (0 where none are), held at 0 or more, so that one point far off the line (a call that waited
    for a late rank) does not tilt it; a puts the line through the points' mean, held at 0 or more,
    so that it adds up to their measured total (what was waited for once is waited for again)."""
    if not points:
        raise ValueError("no points to fit")
    slopes = [(y2 - y1) / (x2 - x1) for i, (x1, y1) in enumerate(points) for x2, y2 in points[i + 1 :] if apart(x1, x2)]
    b = max(statistics.median(slopes), 0.0) if slopes else 0.0
    return max(statistics.fmean(y - b * x for x, y in points), 0.0), b


def fit_alpha_beta(samples: Sequence[tuple[str, int, float, float]], *, latency_us: float) -> tuple[float, float]:
    """(α µs, B GB/s) by least squares over (kind, n, S bytes, t µs) samples of t = α·steps + S·factor/B.
    When α and B cannot be told apart (one size, one kind, one n) or α comes out negative, α is
    held at `latency_us` and only B is fitted."""
    xs = [(ring_steps(k, n), s * bus_factor(k, n), t) for k, n, s, t in samples if k in _RING_STEPS and s > 0 and t > 0]
    if not xs:
        raise ValueError("no collective with a known size and duration to fit")
    a11 = sum(x * x for x, _, _ in xs)
    a12 = sum(x * y for x, y, _ in xs)
    a22 = sum(y * y for _, y, _ in xs)
    b1 = sum(x * t for x, _, t in xs)
    b2 = sum(y * t for _, y, t in xs)
    det = a11 * a22 - a12 * a12
    if det > 1e-9 * a11 * a22:
        alpha = (b1 * a22 - b2 * a12) / det
        inv_b = (a11 * b2 - a12 * b1) / det
        if alpha >= 0 and inv_b > 0:
            return alpha, 1 / (inv_b * 1e3)
    # One unknown: t - α·steps = S·factor · inv_b.
    inv_b = sum(y * (t - latency_us * x) for x, y, t in xs) / a22
    if inv_b <= 0:
        raise ValueError(f"the collectives are faster than the latency {latency_us} µs alone; give a smaller --latency-us")
    return latency_us, 1 / (inv_b * 1e3)


BUILDERS = {
    "sequential": _sequential,
    "split": _split,
    "split-blocking": _split,
    "ddp": _ddp,
    "fsdp2": _fsdp2,
}
"""The replay's step of each mode of core.modes.MODES (a mode without one is not modelled)."""
