"""Clock offsets between ranks, from matched collective calls (part of stage 3).

Every rank's trace has its own clock, and across nodes those clocks differ (by seconds, when
the profilers started at different times or the hosts' clocks disagree). A collective call ends
at nearly the same moment on every rank of its group: no rank can finish before the last one
arrived, and waiting for a late peer moves a rank's start, not its end. So for rank r and a call
c matched with the reference rank, d_c = end_c(r) − end_c(ref) measures r's clock minus the
reference's, plus the scatter of the ends (a kernel finishing a little later, a thread hop).

Only symmetric collectives are used when a pair of ranks shares any (SYMMETRIC_KINDS: each
rank's result needs every rank's input). Causality bounds the offset whatever the scatter: such a
call ends on each rank after it started on every rank, so for every c
start_c(r) − end_c(ref) ≤ offset ≤ end_c(r) − start_c(ref) (`bounds_us`, over all c).

offset_us(r) = median_c d_c (robust against the calls whose ends scatter far), moved into the
causal bounds if it falls outside them. The 95% interval is the distribution-free confidence
interval of the median (order statistics of the d_c: the binomial argument assumes independent
calls, not a shape), cut to the bounds; uncertainty_us is the larger distance from the offset to
that interval's ends. It covers the true offset when the two ranks' ends scatter alike (their
difference is then symmetric about it); when one rank's ends lag more (a CPU rank whose worker
thread waits for a core), the median leans that way, and the causal bounds limit how far.
Bounds that contradict each other (lowest > highest: calls matched wrongly, or clocks drifting
apart) are not used, only reported.

A rank that shares no call with the reference is chained through ranks that do (offsets add,
uncertainties add in quadrature, bounds add). Aligned time: t_ref = t_rank − offset_us(rank).
"""

from __future__ import annotations

import functools
import math
import statistics
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from profile_overlap.analysis.file.call_columns import Instances
from profile_overlap.analysis.file.collectives import CollectiveInstance

CONFIDENCE = 0.95
"""Coverage of the interval behind uncertainty_us."""
SYMMETRIC_KINDS = frozenset({"all_reduce", "reduce_scatter", "all_gather", "all_to_all", "barrier"})
"""Collectives whose result on every rank needs every rank's input: a call cannot end on any rank
before it started on all of them. The offsets come from these when a pair of ranks has any."""


@dataclass(frozen=True)
class ClockAlignment:
    """Each rank's clock offset against the reference rank's, from matched collective calls.
    Ranks with no call matched to an aligned rank are absent from offsets_us (unknown; they are
    drawn unshifted, see `offset`)."""

    reference_rank: int
    offsets_us: dict[int, float]
    """Rank's clock minus the reference's (µs): aligned_ts = ts − offsets_us[rank]; 0 for the reference."""
    uncertainty_us: dict[int, float]
    """Half-width of the 95% interval of the offset (µs); 0 for the reference. A rank is absent
    when its interval is unknown (fewer than 6 calls and no causal bound)."""
    matched: dict[int, int]
    """Calls used per rank (matched with the rank it was aligned against; the reference: 0)."""
    bounds_us: dict[int, tuple[float, float]] = field(default_factory=dict)
    """(lowest, highest) offset that causality allows: every symmetric call ends after it started on
    every rank. lowest > highest means the calls contradict one clock offset (mismatched calls, or
    clocks that drift apart over the trace). Absent for a rank aligned without symmetric calls."""
    via: dict[int, int] = field(default_factory=dict)
    """The rank each rank was aligned against (the reference itself for direct matches)."""

    def applies(self, rank: int) -> bool:
        """Whether the rank's times are moved: its offset is known and 0 lies outside its 95%
        interval (offset ± uncertainty), or, with no interval, outside its causal bounds (with
        neither, too few calls to tell, the estimate is all there is and it is used). An offset
        within its own uncertainty is no evidence that the clocks differ: ranks on one host read
        one clock, and their estimates there are the scatter of the calls' ends (milliseconds on
        CPU), which moving the lanes would only add."""
        if rank not in self.offsets_us or rank == self.reference_rank:
            return False
        offset, half = self.offsets_us[rank], self.uncertainty_us.get(rank)
        if half is not None and math.isfinite(half):
            return abs(offset) > half
        if rank not in self.bounds_us:
            return True
        lo, hi = self.bounds_us[rank]
        return lo <= hi and (lo > 0 or hi < 0)

    def offset(self, rank: int) -> float:
        """The offset to subtract from this rank's times: 0 unless it `applies`."""
        return self.offsets_us[rank] if self.applies(rank) else 0.0

    def aligned(self, rank: int, ts_us: float) -> float:
        """A time on `rank`'s clock, on the reference clock."""
        return ts_us - self.offset(rank)


def median_ci(values: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float]:
    """(median, half-width of the distribution-free confidence interval of the median).

    The interval is [x_(k), x_(n−k+1)] of the sorted values, with the largest k such that
    P(k ≤ Binomial(n, ½) ≤ n−k) ≥ confidence. With too few values for that coverage (n < 6 at
    95%) the half-width is infinite."""
    x = np.sort(np.asarray(values, dtype=float))
    assert x.size > 0
    if not np.isnan(x[-1]):
        return _sorted_median_ci(x.tolist(), 0, x.size, confidence)
    median = float(np.median(x))  # NaN, as np.median has it
    k = _order_statistic(x.size, confidence)
    return median, math.inf if k == 0 else float(max(median - x[k - 1], x[x.size - k] - median))


@functools.lru_cache(maxsize=1024)
def _order_statistic(n: int, confidence: float) -> int:
    """The largest k with 2·P(Binomial(n, ½) ≤ k−1) ≤ 1 − confidence (0: none). Exact in integers up
    to n = 400, the normal approximation above (it is then within one order statistic)."""
    alpha = 1 - confidence
    if n > 400:
        z = statistics.NormalDist().inv_cdf(1 - alpha / 2)
        return max(0, math.floor((n - z * math.sqrt(n)) / 2))
    total = 2**n
    k = cum = 0
    while k <= n // 2:
        cum += math.comb(n, k)  # cum = Σ_{i ≤ k} C(n, i)
        if 2 * cum > alpha * total:
            break
        k += 1
    return k


@dataclass(frozen=True)
class _PairEstimate:
    offset_us: float
    uncertainty_us: float
    matched: int
    bounds_us: tuple[float, float] | None


@dataclass(frozen=True)
class _RankCalls:
    """One rank's calls as columns for matching: each call's (process group, kind, order) as one
    integer, the same on every rank (`_rank_calls`), sorted, with the start, end and symmetric flag."""

    key: np.ndarray
    start_us: np.ndarray
    end_us: np.ndarray
    symmetric: np.ndarray


def _rank_calls(calls: Instances | Iterable[CollectiveInstance], codes: dict[tuple[str, str], int]) -> _RankCalls:
    if isinstance(calls, Instances):
        pairs = [(pg, kind) for pg in calls.pgs for kind in calls.kinds]
        table = np.array([codes.setdefault(p, len(codes)) for p in pairs] or [0], dtype=np.int64)
        code = table[calls.pg.astype(np.int64) * len(calls.kinds) + calls.kind] if len(calls) else np.zeros(0, np.int64)
        seq, start, dur = calls.seq, calls.start_us, calls.dur_us
        kinds = np.array([k in SYMMETRIC_KINDS for k in calls.kinds] or [False])[calls.kind] if len(calls) else np.zeros(0, bool)
    else:
        listed = list(calls)
        code = np.array([codes.setdefault((i.pg, i.kind), len(codes)) for i in listed], dtype=np.int64)
        seq = np.array([i.seq for i in listed], dtype=np.int64)
        start = np.array([i.start_us for i in listed], dtype=np.float64)
        dur = np.array([i.dur_us for i in listed], dtype=np.float64)
        kinds = np.array([i.kind in SYMMETRIC_KINDS for i in listed], dtype=bool)
    key = code * (1 << 40) + seq
    order = np.argsort(key, kind="stable")
    return _RankCalls(key=key[order], start_us=start[order], end_us=(start + dur)[order], symmetric=kinds[order])


def _pairs(a: _RankCalls, others: Sequence[_RankCalls]) -> list[_PairEstimate | None]:
    """Each rank b of `others`: its clock minus rank a's, from their calls matched by (process group,
    kind, order), or None when they share none. All the pairs in one pass (1,023 at 1,024 ranks: a
    few numpy calls per pair cost more than their numbers)."""
    if not others:
        return []
    n = np.array([b.key.size for b in others], dtype=np.int64)
    key = np.concatenate([b.key for b in others])
    b_start = np.concatenate([b.start_us for b in others])
    b_end = np.concatenate([b.end_us for b in others])
    of = np.repeat(np.arange(len(others)), n)  # which b each call is of
    at = np.minimum(a.key.searchsorted(key), max(a.key.size - 1, 0))
    both = (a.key[at] == key) if a.key.size else np.zeros(key.size, bool)
    y = both.nonzero()[0]
    x, of = at[y], of[y]
    # Only the symmetric calls of a pair that has any.
    symmetric = np.zeros(len(others), bool)
    symmetric[of[a.symmetric[x]]] = True
    keep = a.symmetric[x] | ~symmetric[of]
    x, y, of = x[keep], y[keep], of[keep]
    diffs = b_end[y] - a.end_us[x]
    low = b_start[y] - a.end_us[x]
    high = b_end[y] - a.start_us[x]
    counts = np.bincount(of, minlength=len(others))
    first = np.zeros(len(others) + 1, dtype=np.int64)
    np.cumsum(counts, out=first[1:])
    # Each pair's differences sorted (the pairs stay in order: `of` does not decrease).
    ordered = diffs[np.lexsort((diffs, of))].tolist()
    held = counts.nonzero()[0]
    lows = np.maximum.reduceat(low, first[held]).tolist() if held.size else []
    highs = np.minimum.reduceat(high, first[held]).tolist() if held.size else []
    out: list[_PairEstimate | None] = [None] * len(others)
    for j, lo, hi in zip(held.tolist(), lows, highs):
        start, size = int(first[j]), int(counts[j])
        if math.isnan(ordered[start + size - 1]):  # np.median's NaN, as median_ci takes it
            median, half = median_ci(diffs[of == j])
        else:
            median, half = _sorted_median_ci(ordered, start, size)
        out[j] = _estimate(median, half, size, (lo, hi) if symmetric[j] else None)
    return out


def _sorted_median_ci(x: list[float], start: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """median_ci of the n sorted values x[start : start + n] (none NaN): the median as np.median takes
    it (the mean of the middle two), without sorting again."""
    m = start + n // 2
    median = x[m] if n % 2 else (x[m - 1] + x[m]) / 2
    k = _order_statistic(n, confidence)
    if k == 0:
        return median, math.inf
    return median, max(median - x[start + k - 1], x[start + n - k] - median)


def _estimate(median: float, half: float, matched: int, bounds: tuple[float, float] | None) -> _PairEstimate:
    """The pair's offset from its median (± half) and, with symmetric calls, its causal bounds."""
    ci = (median - half, median + half)
    if bounds is None:  # no causal bound without a symmetric collective
        return _PairEstimate(median, half, matched, None)
    lo, hi = bounds
    if lo > hi:  # the calls contradict any single offset: keep the median's interval, flag by the bounds
        return _PairEstimate(median, half, matched, (lo, hi))
    offset = min(max(median, lo), hi)
    # The 95% interval, cut to what causality allows (or the bounds alone when the two do not meet).
    lo_i, hi_i = (max(ci[0], lo), min(ci[1], hi)) if ci[0] <= hi and ci[1] >= lo else (lo, hi)
    return _PairEstimate(offset, max(offset - lo_i, hi_i - offset), matched, (lo, hi))


def align_clocks(instances: Mapping[int, Instances | Iterable[CollectiveInstance]], *, reference_rank: int | None = None) -> ClockAlignment:
    """Estimate every rank's clock offset against the reference rank (the lowest rank by default)."""
    assert instances
    codes: dict[tuple[str, str], int] = {}
    columns = {rank: _rank_calls(calls, codes) for rank, calls in instances.items()} if len(instances) > 1 else {}
    ref = min(instances) if reference_rank is None else reference_rank
    offsets = {ref: 0.0}
    uncertainty = {ref: 0.0}
    matched = {ref: 0}
    bounds = {ref: (0.0, 0.0)}
    via = {ref: ref}
    # Breadth first from the reference: ranks matched directly first, then through aligned ranks.
    queue = deque([ref])
    while queue:
        base = queue.popleft()
        if all(rank in offsets for rank in instances):
            break  # nothing left to align (one rank: no need to index its calls)
        left = [rank for rank in sorted(instances) if rank not in offsets]
        for rank, est in zip(left, _pairs(columns[base], [columns[rank] for rank in left])):
            if est is None:
                continue
            offsets[rank] = offsets[base] + est.offset_us
            if base in uncertainty and math.isfinite(est.uncertainty_us):
                uncertainty[rank] = math.hypot(uncertainty[base], est.uncertainty_us)
            matched[rank] = est.matched
            if base in bounds and est.bounds_us is not None:
                bounds[rank] = (bounds[base][0] + est.bounds_us[0], bounds[base][1] + est.bounds_us[1])
            via[rank] = base
            queue.append(rank)
    return ClockAlignment(reference_rank=ref, offsets_us=offsets, uncertainty_us=uncertainty, matched=matched, bounds_us=bounds, via=via)
