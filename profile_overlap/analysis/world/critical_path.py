"""The critical path of the median profiled step (part of causes.py).

Walk back in time from the rank whose step ends last (aligned clock; among the ranks whose window
of the step is not empty). On a rank, the path runs through its compute, its exposed communication
(wait, then transfer, as causes.py splits it) and its idle time (neither). Where a stretch of
exposed communication ends at a call's end, the compute after it waited for that call, and a
collective ends when its last peer's transfer ends: the path moves to the rank whose end of that
call is the latest (among the ranks whose end of it lies in their own step window) and goes on
there. It stops at the start of the step window of the rank it is on.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from profile_overlap.analysis.rank.per_rank import RankAnalysis
from profile_overlap.analysis.rank.rank_times import RankSplit, RankTimes
from profile_overlap.core import intervals as iv
from profile_overlap.record.exposed import CriticalPath

COMPUTE, TRANSFER, WAIT, IDLE = range(4)


def median_step(ranks: Sequence[RankAnalysis]) -> int | None:
    """The step number, among those every rank profiled, whose length (latest aligned end minus
    earliest start, over ranks) is the median (the lower one of an even count)."""
    common = set.intersection(*({s.step for s in r.steps} for r in ranks))
    if not common:
        return None
    length = {}
    for n in common:
        spans = [(s.start_us, s.start_us + s.step_us) for r in ranks for s in r.steps if s.step == n]
        length[n] = max(e for _, e in spans) - min(s for s, _ in spans)
    ordered = sorted(common, key=lambda n: (length[n], n))
    return ordered[(len(ordered) - 1) // 2]


def _segments(times: RankTimes, split: RankSplit, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """[lo, hi) cut into compute, transfer, wait and idle pieces, in time order."""
    compute = iv.clip(times.compute, lo, hi)
    wait = iv.clip(split.wait, lo, hi)
    transfer = iv.clip(split.transfer, lo, hi)
    parts = [(compute, COMPUTE), (transfer, TRANSFER), (wait, WAIT)]
    s = np.concatenate([u[0] for u, _ in parts])
    e = np.concatenate([u[1] for u, _ in parts])
    lab = np.concatenate([np.full(u[0].size, k) for u, k in parts])
    order = np.argsort(s, kind="stable")
    s, e, lab = s[order], e[order], lab[order]
    # Idle: the gaps between the pieces (and before the first, after the last).
    edges_s = np.concatenate([[lo], e])
    edges_e = np.concatenate([s, [hi]])
    gap = edges_e > edges_s
    s = np.concatenate([s, edges_s[gap]])
    e = np.concatenate([e, edges_e[gap]])
    lab = np.concatenate([lab, np.full(int(gap.sum()), IDLE)])
    order = np.argsort(s, kind="stable")
    return s[order], e[order], lab[order]


LABELS = ("compute", "transfer", "wait", "idle")
"""The pieces of a path, by their code."""

Segment = tuple[int, float, float, str]
"""(rank, start_us, end_us on the aligned clock, compute | transfer | wait | idle): one piece of the path."""


def critical_path(
    ranks: Sequence[RankAnalysis], splits: Sequence[RankSplit], keys: dict[int, np.ndarray]
) -> tuple[CriticalPath | None, tuple[Segment, ...]]:
    """The path of the median step and its pieces in time order; (None, ()) when the ranks share no
    profiled step."""
    n = median_step(ranks)
    if n is None:
        return None, ()
    offset = {s.rank: s.offset_us for s in splits}
    split_of = {s.rank: s for s in splits}
    window = {r.rank: next((s.start_us, s.start_us + s.step_us) for s in r.steps if s.step == n) for r in ranks}
    times_of = {r.rank: r.times for r in ranks}
    # Each rank's pieces are cut when the walk first reaches it (it visits a few ranks of many).
    segs: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    def pieces_of(q: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if q not in segs:
            segs[q] = _segments(times_of[q], split_of[q], *window[q])
        return segs[q]

    # Per rank: the call ending at each time (own clock), and per call its aligned end on each rank.
    ends_at: dict[int, dict[float, int]] = {}
    aligned_end: dict[int, dict[int, float]] = {}
    for r in ranks:
        c = r.times.calls
        lo, hi = window[r.rank]
        sel = ((c.end_us > lo) & (c.start_us < hi)).nonzero()[0]
        ends, calls = c.end_us[sel].tolist(), keys[r.rank][sel].tolist()  # as Python numbers at once, not one by one
        ends_at[r.rank] = dict(zip(ends, calls))
        off = offset[r.rank]
        for call, end in zip(calls, ends):
            aligned_end.setdefault(call, {})[r.rank] = end - off
    # The walk starts and goes on only on ranks with some of the step: a GPU rank that launched nothing
    # in it has an empty window, with no piece to walk on.
    open_ = {q for q, (lo, hi) in window.items() if hi > lo}
    if not open_:
        return None, ()
    rank = max(open_, key=lambda q: (window[q][1] - offset[q], -q))
    t = window[rank][1]
    totals = np.zeros(4)
    path = [rank]
    pieces: list[Segment] = []
    # The walk stops after 4 x (all ranks' pieces) + 16 steps. The pieces cut so far give a lower
    # bound of that; all ranks are cut only if the walk gets that far.
    steps = 0
    bound = 16
    while t > window[rank][0]:
        s, e, lab = pieces_of(rank)
        if steps >= bound:
            bound = 4 * sum(p[0].size for p in segs.values()) + 16
            if steps >= bound and len(segs) < len(window):
                bound = 4 * sum(pieces_of(q)[0].size for q in window) + 16
            if steps >= bound:
                break
        steps += 1
        i = int(np.searchsorted(s, t, side="left")) - 1
        if i < 0:
            break
        if lab[i] in (TRANSFER, WAIT) and e[i] == t and t in ends_at[rank]:
            # Among the ranks whose end of the call lies in their own step window (a peer whose call
            # ended past its window, or before it began, has no piece there to walk on; this rank's does).
            peers = {
                p: end
                for p, end in aligned_end[ends_at[rank][t]].items()
                if p == rank or (p in open_ and window[p][0] < end + offset[p] <= window[p][1])
            }
            q = max(peers, key=lambda p: (peers[p], -p))
            if q != rank:
                t = min(t - offset[rank], peers[q]) + offset[q]
                rank = q
                path.append(q)
                continue
        a = max(s[i], window[rank][0])
        totals[lab[i]] += min(t, e[i]) - a
        pieces.append((rank, a - offset[rank], min(t, e[i]) - offset[rank], LABELS[lab[i]]))
        t = a
    length = float(totals.sum())
    if length <= 0:
        return None, ()
    pct = 100 * totals / length
    ranks_passed = [p for j, p in enumerate(reversed(path)) if j == 0 or p != list(reversed(path))[j - 1]]
    summary = CriticalPath(
        length_us=length,
        compute_pct=float(pct[COMPUTE]),
        transfer_pct=float(pct[TRANSFER]),
        wait_pct=float(pct[WAIT]),
        ranks=tuple(ranks_passed),
    )
    return summary, tuple(reversed(pieces))
