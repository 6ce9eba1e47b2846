"""Interference: how much longer compute runs while communication is in flight than when it runs
alone, measured from the same operators seen both ways in a rank's profiled steps (docs/metrics.md
"Interference"; DESIGN.md "Interference").

An operator is one outermost compute event: on CPU a main-thread operator inside no other compute
operator (so each moment counts once, and an operator's own time, such as a matmul's, is in it),
known by its name and `Input Dims`; on GPU a compute kernel, known by its kernel name. A call ran
*alone* when no communication was in flight at any moment of it, *beside* communication when
communication was in flight for the whole of it (calls partly covered are left out). A collective
is in flight from its launch to its end: on CPU from its c10d op on the calling thread (the call is
queued for gloo's worker thread from then) to the end of its gloo work, or until the calling
thread has seen it complete (`SEEN_DONE`) if that is earlier; on GPU its kernel. A
collective launched before the profiler started is not in the trace, yet it can still be in flight
(the split's first forward waits for all_gathers its profiler warmup step launched), so the calls
that start before the first collective the trace shows launching are left out. For each
operator of a phase seen both ways, at least MIN_CALLS_EACH_WAY times each, its n_b beside calls pair
with its alone calls:

    slowdown = Σ_k n_b,k · mean(beside_k) / Σ_k n_b,k · mean(alone_k) − 1

the beside calls' time over what the same calls take alone: a mean of the operators' ratios of
means weighted by the compute that ran beside communication (its alone time). Means, not medians:
on CPU the ranks of a host and their gloo threads share its cores, and interference arrives as a
few calls descheduled for milliseconds (a 55 µs lerp_ taking 2.4 ms), which a median discards; on
three compare runs the medians read the split's optimizer 16-38% *faster* beside communication
while split vs split-blocking read it 55-75% slower (benchmarks/interference_agreement.py). A
rank's figure and the top level sum the same terms over phases and ranks. The 95% interval is a
percentile bootstrap: each operator's alone and beside calls resampled with replacement, RESAMPLES
times, seeded, so a trace always gives the same interval; ranks and phases add their resamples term
by term. Above EXACT_UP_TO calls of an operator (a GPU trace has thousands of calls of one kernel)
a resample's mean is drawn from its normal approximation, mean ± sd/√n (`_resampled_means`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from profile_overlap.analysis.array_eq import ArrayEq
from profile_overlap.analysis.file.call_columns import Calls
from profile_overlap.analysis.read.trace import Events
from profile_overlap.core import intervals as iv
from profile_overlap.core.codes import coded_in
from profile_overlap.core.modes import PHASES
from profile_overlap.record.interference import MIN_BESIDE_US, MIN_PAIRS, Interference, InterferenceEstimate, RankInterference

RESAMPLES = 400
SEED = 36
OTHER = "other"
BESIDE = 0.999
"""A call is beside communication when communication covers this share of it or more."""
MIN_CALLS_EACH_WAY = 2
"""An operator counts when it ran at least this often alone and this often beside communication: the
mean of one call has no interval (the bootstrap redraws the same call), so a lone call descheduled
for milliseconds would decide its operator's figure and an interval of no width around it (a
forward's single alone call of 5.9 ms against 0.41 ms beside: -92% [-93, -92])."""


@dataclass(frozen=True, eq=False)
class Operators(ArrayEq):
    """One file's outermost compute calls: when they ran and which operator each is."""

    start: np.ndarray
    end: np.ndarray
    key: np.ndarray
    """int32 code of the call's operator in `keys`."""
    keys: tuple[str, ...]
    seen_done: np.ndarray = field(default_factory=lambda: np.zeros(0))
    """Sorted times at which the training thread has seen every collective launched before complete
    (`seen_done`); a collective is in flight at most until the first of them after its start."""


NO_OPERATORS = Operators(np.zeros(0), np.zeros(0), np.zeros(0, dtype=np.int32), ())

SEEN_DONE = ("torch.distributed.ddp.reducer::copy_bucket_to_grad",)
"""Operators that run on the training thread only once every collective launched before them has
completed: DDP's reducer copies each bucket back to the gradients after it waited for all of them."""


def seen_done(cpu: Events, main: int | None) -> np.ndarray:
    """When the training thread `main` (a tid code) started a SEEN_DONE operator, sorted."""
    codes = [i for i, n in enumerate(cpu.names) if n in SEEN_DONE]
    if main is None or not codes:
        return np.zeros(0)
    rows = coded_in(cpu.name, codes, len(cpu.names)) & (cpu.tid == main)
    return np.unique(cpu.ts[rows])


def cpu_operators(cpu: Events, rows: np.ndarray, done: np.ndarray | None = None) -> Operators:
    """The outermost of the compute operators `rows` (one thread's, nested): an operator is outermost
    when it starts at or after the end of every operator that started before it. Known by name and
    `Input Dims`. `done`: the thread's `seen_done` times."""
    done = np.zeros(0) if done is None else done
    if not rows.size:
        return Operators(np.zeros(0), np.zeros(0), np.zeros(0, dtype=np.int32), (), done)
    ts, dur = cpu.ts[rows], cpu.dur[rows]
    order = np.lexsort((-dur, ts))  # a parent before the child that starts with it
    rows, ts, end = rows[order], ts[order], ts[order] + dur[order]
    reach = np.maximum.accumulate(end)
    leaf = np.append(True, ts[1:] >= reach[:-1]) & (end > ts)
    rows = rows[leaf]
    shape = cpu.shape[rows] if cpu.shape.size else np.full(rows.size, -1, dtype=np.int32)
    pair = cpu.name[rows].astype(np.int64) * (len(cpu.shapes) + 1) + (shape.astype(np.int64) + 1)
    unique, key = np.unique(pair, return_inverse=True)
    names = [cpu.names[int(p // (len(cpu.shapes) + 1))] for p in unique.tolist()]
    dims = [cpu.shapes[int(p % (len(cpu.shapes) + 1)) - 1] if p % (len(cpu.shapes) + 1) else "" for p in unique.tolist()]
    return Operators(ts[leaf], end[leaf], key.astype(np.int32), tuple(f"{n} {d}" for n, d in zip(names, dims)), done)


def gpu_operators(kernels: Events, rows: np.ndarray, start: np.ndarray, end: np.ndarray) -> Operators:
    """The compute kernels `rows`, known by their kernel name; start, end: theirs, the compute intervals'
    own columns (shared, not copied: at 1 GB they are 5 MB)."""
    if not rows.size:
        return NO_OPERATORS
    unique, key = np.unique(kernels.name[rows], return_inverse=True)
    return Operators(start, end, key.astype(np.int32), tuple(kernels.names[int(c)] for c in unique.tolist()))


@dataclass(frozen=True, eq=False)
class Sample(ArrayEq):
    """The sums behind one figure: Σ n_b·mean(beside) and Σ n_b·mean(alone), measured and per resample."""

    pairs: int
    beside_us: float
    alone_us: float
    boot_beside_us: np.ndarray
    boot_alone_us: np.ndarray

    def __add__(self, other: Sample) -> Sample:
        return Sample(
            self.pairs + other.pairs,
            self.beside_us + other.beside_us,
            self.alone_us + other.alone_us,
            self.boot_beside_us + other.boot_beside_us,
            self.boot_alone_us + other.boot_alone_us,
        )

    def estimate(self) -> InterferenceEstimate:
        """The figure in %, and its interval; None with fewer than MIN_PAIRS pairs or under
        MIN_BESIDE_US of compute beside communication at its alone time (a stalled call adds none)."""
        if self.pairs < MIN_PAIRS or self.alone_us < MIN_BESIDE_US:
            return InterferenceEstimate(slowdown_pct=None, low_pct=None, high_pct=None, pairs=self.pairs)
        boot = 100 * (self.boot_beside_us / self.boot_alone_us - 1)
        low, high = np.percentile(boot, [2.5, 97.5]).tolist()
        return InterferenceEstimate(
            slowdown_pct=round(100 * (self.beside_us / self.alone_us - 1), 3),
            low_pct=round(low, 3),
            high_pct=round(high, 3),
            pairs=self.pairs,
        )


EMPTY = Sample(0, 0.0, 0.0, np.zeros(RESAMPLES), np.zeros(RESAMPLES))


@dataclass(frozen=True)
class RankSample:
    """One rank's samples per phase (PHASES order, then OTHER)."""

    phases: tuple[tuple[str, Sample], ...]

    def total(self) -> Sample:
        out = EMPTY
        for _, s in self.phases:
            out = out + s
        return out

    def record(self) -> RankInterference:
        t = self.total().estimate()
        phases = {name: s.estimate() for name, s in self.phases}
        return RankInterference(slowdown_pct=t.slowdown_pct, low_pct=t.low_pct, high_pct=t.high_pct, pairs=t.pairs, phases=phases)


def measure(
    operators: Sequence[Operators],
    *,
    comm: iv.Union,
    steps: iv.Union,
    phase: np.ndarray,
    phase_unions: tuple[iv.Union, ...],
    rank: int,
    calls: Calls | None = None,
) -> RankSample:
    """One rank's interference from its files' operators, the union of its communication, its
    profiled steps' time and its phase windows (`phase`: their classify.PHASES codes; phase_unions:
    phases.unions_of_phases of them). `calls`: the rank's
    collectives over the whole trace; each is in flight from its launch (`in_flight`)."""
    start, end, key = _pooled(operators)
    inside = iv.covers(steps, start) & iv.covers(steps, np.nextafter(end, -np.inf))
    done = np.unique(np.concatenate([np.zeros(0), *(ops.seen_done for ops in operators)]))
    has_calls = calls is not None and len(calls) > 0
    if has_calls:
        assert calls is not None
        inside &= start >= float(np.min(calls.issue_or_start()))  # in_flight's seen_from
    # The calls kept before the communication's union is built: fewer full-length arrays alive at once.
    start, end, key = start[inside], end[inside], key[inside]
    del inside
    comm = _until_seen(comm, done)
    if has_calls:
        assert calls is not None
        comm = iv.merge(comm, in_flight(calls, done)[0])
    dur = end - start
    covered = _covered(comm, start, end)
    alone, beside = covered <= 0, covered >= BESIDE * dur
    where = np.full(start.size, len(PHASES))
    for index in range(len(PHASES)):
        if (phase == index).any():
            free = where == len(PHASES)
            where[free & iv.covers(phase_unions[index], start)] = index
    rng = np.random.default_rng([SEED, rank])
    out = []
    for index, name in enumerate((*PHASES, OTHER)):
        mine = where == index
        if mine.any():
            out.append((name, _sample(key[mine], dur[mine], alone[mine], beside[mine], rng)))
    return RankSample(tuple(out))


def _pooled(operators: Sequence[Operators]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The files' operators as one set of (start, end, key) columns, each key a code in the order
    the operators are first met; one file's columns as they are when its keys are distinct (its
    codes are then already in that order)."""
    if len(operators) == 1 and len(set(operators[0].keys)) == len(operators[0].keys):
        return operators[0].start, operators[0].end, operators[0].key
    keys: dict[str, int] = {}
    parts = []
    for ops in operators:
        remap = np.array([keys.setdefault(k, len(keys)) for k in ops.keys] or [0], dtype=np.int64)
        parts.append((ops.start, ops.end, remap[ops.key] if ops.key.size else ops.key.astype(np.int64)))
    start = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0)
    end = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0)
    key = np.concatenate([p[2] for p in parts]) if parts else np.zeros(0, dtype=np.int64)
    return start, end, key


def in_flight(calls: Calls, done: np.ndarray | None = None) -> tuple[iv.Union, float]:
    """When the rank's collectives were in flight, each from its launch (CPU: its c10d op; else its
    start) to its end or the first `done` time after its launch, whichever is first, and the first
    launch the trace shows: before it, a collective launched before the profiler started can be in
    flight unseen."""
    launch = np.minimum(calls.issue_or_start(), calls.start_us)
    end = calls.start_us + calls.dur_us
    if done is not None and done.size:
        end = np.minimum(end, _first_after(done, launch))
    return iv.union(launch, end), float(np.min(calls.issue_or_start()))


def _first_after(done: np.ndarray, t: np.ndarray) -> np.ndarray:
    """For each time, the first of the sorted `done` after it (inf if none)."""
    i = done.searchsorted(t, side="right")
    out: np.ndarray = np.where(i < done.size, done[np.minimum(i, done.size - 1)], np.inf)
    return out


def _until_seen(u: iv.Union, done: np.ndarray) -> iv.Union:
    """The union with each interval cut at the first `done` time after its start: from then on the
    training thread has seen the collective complete, whenever its worker thread's record ends
    (gloo's can end milliseconds later, when the worker is descheduled before it closes it)."""
    s, e = u
    if not done.size or not s.size:
        return u
    return iv.union(s, np.minimum(e, _first_after(done, s)))


def _covered(u: iv.Union, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """For each [start, end), how much of it the union covers."""
    s, e = u
    if not s.size:
        return np.zeros(start.size)
    before = np.concatenate([[0.0], np.cumsum(e - s)])

    def upto(t: np.ndarray) -> np.ndarray:
        """|u ∩ (−∞, t)|."""
        i = s.searchsorted(t, side="right")  # intervals started by t
        inside = np.minimum(t - s[np.maximum(i - 1, 0)], (e - s)[np.maximum(i - 1, 0)])
        out: np.ndarray = before[np.maximum(i - 1, 0)] + np.where(i > 0, inside, 0.0)
        return out

    covered: np.ndarray = upto(end) - upto(start)
    return covered


def _sample(key: np.ndarray, dur: np.ndarray, alone: np.ndarray, beside: np.ndarray, rng: np.random.Generator) -> Sample:
    """The sums of one phase's calls over the operators seen both ways, each at least
    MIN_CALLS_EACH_WAY times (all operators at once)."""
    both = np.intersect1d(_seen(key[alone]), _seen(key[beside]))
    if not both.size:
        return Sample(0, 0.0, 0.0, np.zeros(RESAMPLES), np.zeros(RESAMPLES))
    a_ordered, a_start, a_n = _grouped(key[alone], dur[alone], both)
    b_ordered, b_start, b_n = _grouped(key[beside], dur[beside], both)
    weight = b_n.astype(np.float64)  # each operator's calls beside communication
    boot_beside = weight @ _resampled_means(b_ordered, b_start, b_n, rng)
    boot_alone = weight @ _resampled_means(a_ordered, a_start, a_n, rng)
    beside_us = float(weight @ _means(b_ordered, b_start, b_n))
    alone_us = float(weight @ _means(a_ordered, a_start, a_n))
    return Sample(int(b_n.sum()), beside_us, alone_us, boot_beside, boot_alone)


def _seen(keys: np.ndarray) -> np.ndarray:
    """The operators among `keys` that occur at least MIN_CALLS_EACH_WAY times, sorted."""
    unique, count = np.unique(keys, return_counts=True)
    out: np.ndarray = unique[count >= MIN_CALLS_EACH_WAY]
    return out


def _grouped(key: np.ndarray, dur: np.ndarray, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The durations of the operators `wanted` (sorted keys), sorted by (key, duration): (durations,
    each operator's first index, its count)."""
    keep = coded_in(key, wanted.tolist(), int(key.max()) + 1 if key.size else 0)
    key, dur = key[keep], dur[keep]
    order = np.lexsort((dur, key))
    start = key[order].searchsorted(wanted, side="left")
    end = key[order].searchsorted(wanted, side="right")
    return dur[order], start, end - start


def _means(ordered: np.ndarray, start: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Each operator's mean of its calls ordered[start : start + n]."""
    sums = np.add.reduceat(ordered, start) if ordered.size else np.zeros(0)
    out: np.ndarray = sums / n
    return out


def _resampled_means(ordered: np.ndarray, start: np.ndarray, n: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Per operator (rows), RESAMPLES means of resamples with replacement of its calls
    ordered[start : start + n]; above EXACT_UP_TO calls, from the mean's normal approximation
    (mean ± sd/√n), so a draw costs O(1) whatever n."""
    out = np.empty((n.size, RESAMPLES))
    for row, (first, count) in enumerate(zip(start.tolist(), n.tolist())):
        calls = ordered[first : first + count]
        if count <= EXACT_UP_TO:
            out[row] = calls[rng.integers(0, count, size=(RESAMPLES, count))].mean(axis=1)
        else:
            out[row] = calls.mean() + calls.std() / math.sqrt(count) * rng.standard_normal(RESAMPLES)
    return out


EXACT_UP_TO = 512


def combine(samples: Sequence[tuple[int, RankSample]]) -> Interference | None:
    """The top level over every rank and phase, and each rank's figures; None without ranks."""
    if not samples:
        return None
    total = EMPTY
    for _, s in samples:
        total = total + s.total()
    t = total.estimate()
    ranks = {str(rank): s.record() for rank, s in sorted(samples, key=lambda x: x[0])}
    return Interference(slowdown_pct=t.slowdown_pct, low_pct=t.low_pct, high_pct=t.high_pct, pairs=t.pairs, ranks=ranks)
