"""Interval arithmetic on half-open [start, end) intervals, vectorised with numpy.

A *union* is the canonical form every function here returns and most accept: two float64 arrays
(starts, ends), sorted, with no two intervals overlapping or touching, and no empty interval.
Nothing here loops over events in Python; the merge is the usual
sort + `np.maximum.accumulate` of the ends.
"""

from __future__ import annotations

from operator import itemgetter

import numpy as np
import numpy.typing as npt

Union = tuple[np.ndarray, np.ndarray]
"""(starts, ends): sorted, disjoint, non-touching, non-empty intervals."""

EMPTY: Union = (np.empty(0), np.empty(0))


def union(starts: npt.ArrayLike, ends: npt.ArrayLike, *, gap: float = 0.0) -> Union:
    """Merge [start, end) intervals into a union. Intervals whose distance is <= `gap` merge
    too (gap=0 merges touching ones, which changes no length)."""
    starts = np.asarray(starts, dtype=np.float64)
    ends = np.asarray(ends, dtype=np.float64)
    assert starts.shape == ends.shape and starts.ndim == 1
    if starts.size <= SMALL:
        return _small_union(starts.tolist(), ends.tolist(), gap)
    keep = ends > starts
    if not keep.all():
        starts, ends = starts[keep], ends[keep]
    if starts.size == 0:
        return EMPTY
    order = starts.argsort(kind="stable")
    starts, ends = starts[order], ends[order]
    reach = np.maximum.accumulate(ends)
    # A new group starts where an interval begins after everything before it has ended.
    new = np.empty(starts.size, dtype=bool)
    new[0] = True
    new[1:] = starts[1:] > reach[:-1] + gap
    first = new.nonzero()[0]
    last = np.append(first[1:] - 1, starts.size - 1)
    return starts[first], reach[last]


PIECES_BLOCK = 1 << 16
"""Starts of one union that `intersect` and `intersection_length` place in the other at once."""

SMALL = 32
"""Up to this many intervals (both unions' together for `intersect`), `union` and `intersect` run
in Python on lists: the same pieces, to the bit, without a dozen numpy calls of about a
microsecond each (a small trace's steps and phases make thousands of such calls); past this size
numpy is faster (callgrind's instruction counts on the 1,024 ranks' files)."""


def _small_union(starts: list[float], ends: list[float], gap: float) -> Union:
    """`union` of a few intervals, to the bit: sorted stably by start, the reach a running maximum
    as np.maximum.accumulate takes it; NaN fails `end > start` in both and is dropped."""
    pairs = sorted(((s, e) for s, e in zip(starts, ends) if e > s), key=itemgetter(0))  # stable, as argsort's
    if not pairs:
        return EMPTY
    out_s, out_e = [pairs[0][0]], []
    reach = pairs[0][1]
    for s, e in pairs[1:]:
        if s > reach + gap:
            out_e.append(reach)
            out_s.append(s)
            reach = e
        else:
            reach = reach if reach > e else e  # np.maximum's choice between equal values (0.0 and -0.0): the second
    out_e.append(reach)
    return np.array(out_s, dtype=np.float64), np.array(out_e, dtype=np.float64)


def _canonical(s: list[float], e: list[float]) -> bool:
    """Sorted, disjoint, non-touching, non-empty intervals (what a Union is)."""
    return all(b > a for a, b in zip(s, e)) and all(nxt > end for end, nxt in zip(e, s[1:]))


def _small_intersect(a_s: list[float], a_e: list[float], b_s: list[float], b_e: list[float]) -> Union:
    """`intersect` of two small canonical unions by walking both: every piece is
    [max of the starts, min of the ends) of two intervals that overlap, in start order, as
    `intersect` finds them."""
    out_s, out_e = [], []
    i = j = 0
    while i < len(a_s) and j < len(b_s):
        # The piece starts at the later start (`a`'s when equal) and ends at np.minimum(its end, the
        # other's), which takes the second of two equal values (0.0 and -0.0), as `intersect` does.
        if a_s[i] >= b_s[j]:
            lo, hi = a_s[i], (a_e[i] if a_e[i] < b_e[j] else b_e[j])
        else:
            lo, hi = b_s[j], (b_e[j] if b_e[j] < a_e[i] else a_e[i])
        if lo < hi:
            out_s.append(lo)
            out_e.append(hi)
        if a_e[i] < b_e[j]:
            i += 1
        else:
            j += 1
    return np.array(out_s, dtype=np.float64), np.array(out_e, dtype=np.float64)


def merge(a: Union, b: Union) -> Union:
    """`union` of two unions' intervals together, the same result as `union` of their
    concatenation: each is already sorted, so they are interleaved by position (`a` first among
    equal starts, as the stable sort would) instead of concatenated and argsorted (less memory:
    the two inputs are not copied before the sort)."""
    (a_s, a_e), (b_s, b_e) = a, b
    if not a_s.size or not b_s.size:
        return (a_s, a_e) if a_s.size else (b_s, b_e)
    n = a_s.size + b_s.size
    starts, ends = np.empty(n), np.empty(n)
    at = b_s.searchsorted(a_s, side="left") + np.arange(a_s.size)
    starts[at], ends[at] = a_s, a_e
    del at
    at = a_s.searchsorted(b_s, side="right") + np.arange(b_s.size)
    starts[at], ends[at] = b_s, b_e
    del at
    reach = np.maximum.accumulate(ends, out=ends)
    new = np.empty(n, dtype=bool)
    new[0] = True
    np.greater(starts[1:], reach[:-1], out=new[1:])
    first = new.nonzero()[0]
    del new
    last = np.append(first[1:] - 1, n - 1)
    return starts[first], reach[last]


def group_ids(starts: npt.ArrayLike, ends: npt.ArrayLike, *, gap: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Like `union`, but return (order, group): the sort order of the input and, for each sorted
    interval, the index of the merged interval it falls in. Lets callers aggregate per group."""
    starts = np.asarray(starts, dtype=np.float64)
    ends = np.asarray(ends, dtype=np.float64)
    order = starts.argsort(kind="stable")
    s, e = starts[order], ends[order]
    if s.size == 0:
        return order, np.empty(0, dtype=np.int64)
    reach = np.maximum.accumulate(e)
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    new[1:] = s[1:] > reach[:-1] + gap
    return order, new.cumsum() - 1


def length(u: Union) -> float:
    """Total length of a union."""
    return float(np.sum(u[1] - u[0]))


def intersect(a: Union, b: Union) -> Union:
    """The union of the pieces covered by both `a` and `b`."""
    a_s, a_e = a
    b_s, b_e = b
    if a_s.size == 0 or b_s.size == 0:
        return EMPTY
    if a_s.size + b_s.size <= SMALL:
        lists = a_s.tolist(), a_e.tolist(), b_s.tolist(), b_e.tolist()
        if _canonical(*lists[:2]) and _canonical(*lists[2:]):
            return _small_intersect(*lists)
    (a_start, a_end), (b_start, b_end) = _pieces(a, b)
    s = np.concatenate((a_start, b_start))
    e = np.concatenate((a_end, b_end))
    order = s.argsort(kind="stable")
    return s[order], e[order]


def _pieces(a: Union, b: Union) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """The pieces of a ∩ b (non-empty unions) as (starts, ends): those starting at a start of `a`,
    then those starting at a start of `b`, each in start order."""
    # Each piece of the intersection starts at a start of one union that lies inside the other.
    # For every start of `a`, the interval of `b` that could contain it is the last one starting
    # at or before it; likewise the other way round. Within disjoint unions this finds every piece.
    found = []
    for (x_s, x_e), (y_s, y_e), x_is_a in ((a, b, True), (b, a, False)):
        starts, ends = [], []
        # PIECES_BLOCK starts at a time: the temporaries are that many, not one per interval (a rank's
        # compute at 1 GB of trace is over a million intervals); the pieces come out in the same order.
        for lo in range(0, x_s.size, PIECES_BLOCK):
            xs, xe = x_s[lo : lo + PIECES_BLOCK], x_e[lo : lo + PIECES_BLOCK]
            j = y_s.searchsorted(xs, side="right")
            j -= 1
            ok = j >= 0
            np.maximum(j, 0, out=j)
            inside = y_e[j] > xs
            inside &= ok
            if not x_is_a:
                # When both start together the piece was already found from `a`'s side.
                inside &= y_s[j] != xs
            starts.append(xs[inside])
            ends.append(np.minimum(xe[inside], y_e[j[inside]]))
        found.append((starts[0], ends[0]) if len(starts) == 1 else (np.concatenate(starts), np.concatenate(ends)))
    return found[0], found[1]


def intersection_length(a: Union, b: Union) -> float:
    """|a ∩ b| for two unions: `length(intersect(a, b))` to the bit, the pieces' lengths summed in
    the same order (by start, ties as `intersect`'s stable sort puts them), without sorting the
    pieces (at 1 GB of trace a rank's comm x compute, then the peak of `finish_rank`)."""
    if a[0].size == 0 or b[0].size == 0:
        return 0.0
    if a[0].size + b[0].size <= SMALL:
        return length(intersect(a, b))
    (a_start, a_len), (b_start, b_len) = _pieces(a, b)
    a_len -= a_start  # the ends become lengths, in place
    b_len -= b_start
    # Where the stable sort of (a's pieces, b's pieces) by start puts each of b's: after every piece
    # of a starting at or before it, and after b's earlier pieces (both sides are in start order).
    at_b = a_start.searchsorted(b_start, side="right")
    at_b += np.arange(at_b.size)
    del a_start, b_start
    merged = np.empty(a_len.size + b_len.size)
    is_a = np.ones(merged.size, dtype=bool)
    is_a[at_b] = False
    merged[at_b] = b_len
    merged[is_a] = a_len
    return float(np.sum(merged))


def clip(u: Union, lo: float, hi: float) -> Union:
    """The part of a union inside the window [lo, hi)."""
    s, e = u
    if s.size == 0 or hi <= lo:
        return EMPTY
    i = e.searchsorted(lo, side="right")
    j = s.searchsorted(hi, side="left")
    if i >= j:
        return EMPTY
    s, e = s[i:j].copy(), e[i:j].copy()
    s[0] = max(s[0], lo)
    e[-1] = min(e[-1], hi)
    keep = e > s
    return s[keep], e[keep]


def difference(a: Union, b: Union) -> Union:
    """The part of union `a` not covered by union `b`: `a` intersected with the gaps of `b` (the
    unbounded ones before and after it included). The pieces are those of `a` cut at `b`'s ends,
    and a union's canonical form is unique, so this is the same union as any other way of cutting;
    it takes about half the memory of sorting every end of both (a rank's exposed time at 1 GB of
    trace was the analysis's peak)."""
    if a[0].size == 0 or b[0].size == 0:
        return a
    gaps = np.concatenate(([-np.inf], b[1])), np.concatenate((b[0], [np.inf]))
    return intersect(a, gaps)


def covers(u: Union, t: np.ndarray) -> np.ndarray:
    """For each time in `t`, whether the union covers it (a disjoint union covers t when more of
    its intervals have started than ended by t)."""
    return u[0].searchsorted(t, side="right") > u[1].searchsorted(t, side="right")
