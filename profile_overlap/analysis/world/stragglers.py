"""Straggler causes (part of causes.py): what a late rank did longer than its peers before the
calls the others waited for it at.

For every matched call inside a step that some rank waited at (wait > 0), the rank that started it
last is its late rank. Each rank's *window before the call* runs from the end of its last call
that had ended by then (or the start of the step window) to its own start of the call. The window
splits by phase (forward, backward, optimizer, other: outside every phase) into compute, exposed
communication (its own earlier calls) and idle (neither). The late rank's time in each (phase,
what) minus the median of its peers' is its extra; summed over the calls it was late at and
divided by its number of profiled steps, the largest extra is its cause.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from profile_overlap.analysis.rank.per_rank import RankAnalysis
from profile_overlap.analysis.rank.rank_times import OTHER, RankSplit, RankTimes, covered_length
from profile_overlap.core import intervals as iv
from profile_overlap.core.modes import PHASES
from profile_overlap.record.exposed import Straggler

WHAT = ("compute", "exposed comm", "idle")
"""What a rank can spend its window before a call on."""
REGIONS = (*PHASES, OTHER)


def _regions(times: RankTimes) -> list[iv.Union]:
    """The phase windows made disjoint (earlier phases first), then the rest of the step windows."""
    out: list[iv.Union] = []
    taken = iv.EMPTY
    for union in times.phases:
        part = iv.difference(union, taken)
        out.append(part)
        taken = iv.union(np.concatenate([taken[0], part[0]]), np.concatenate([taken[1], part[1]]))
    out.append(iv.difference(times.windows, taken))
    return out


def window_before(times: RankTimes) -> tuple[np.ndarray, np.ndarray]:
    """Each call's window before it: (lo, hi) on the rank's clock."""
    c = times.calls
    start = c.start_us
    ends = np.sort(c.end_us)
    j = np.searchsorted(ends, start, side="right") - 1
    prev = np.where(j >= 0, ends[np.maximum(j, 0)] if ends.size else -np.inf, -np.inf)
    ws = times.windows[0]
    k = np.searchsorted(ws, start, side="right") - 1
    window_start = np.where(k >= 0, ws[np.maximum(k, 0)] if ws.size else -np.inf, -np.inf)
    before = np.concatenate([[-np.inf], start[:-1]])  # the rank's previous call's start: windows never overlap
    return np.maximum(np.maximum(prev, window_start), before), start


def breakdown(times: RankTimes, rows: np.ndarray) -> np.ndarray:
    """(len(rows), len(REGIONS), 4): per call row and region, its window's length, compute,
    exposed comm and idle time (µs)."""
    lo, hi = window_before(times)
    lo, hi = lo[rows], hi[rows]
    out = np.zeros((rows.size, len(REGIONS), 4))
    for p, region in enumerate(_regions(times)):
        length = covered_length(region, lo, hi)
        compute = covered_length(iv.intersect(times.compute, region), lo, hi)
        exposed = covered_length(iv.intersect(times.exposed, region), lo, hi)
        out[:, p] = np.stack([length, compute, exposed, np.maximum(length - compute - exposed, 0.0)], axis=1)
    return out


def group_medians(values: np.ndarray, group: np.ndarray, groups: int) -> np.ndarray:
    """Per group, the median of its rows (what np.median(rows, axis=0) gives, to the bit: the middle
    value, or the mean of the two middle values), for all groups at once. values: (n, ...) rows;
    group: each row's group in [0, groups), every group non-empty."""
    flat = values.reshape(values.shape[0], -1)
    count = np.bincount(group, minlength=groups)
    start = np.concatenate([[0], np.cumsum(count)[:-1]])
    lower, upper = start + (count - 1) // 2, start + count // 2
    out = np.empty((groups, flat.shape[1]))
    for c in range(flat.shape[1]):  # a column at a time (20), every group in one sort
        column = flat[:, c]
        ordered = column[np.lexsort((column, group))]
        out[:, c] = (ordered[lower] + ordered[upper]) / 2
    return out.reshape((groups, *values.shape[1:]))


def stragglers(ranks: Sequence[RankAnalysis], splits: Sequence[RankSplit], keys: dict[int, np.ndarray]) -> tuple[Straggler, ...]:
    """One row per rank that others waited for: its largest extra (phase, what), per step. Over all
    calls at once: each waited call's rows (one per rank that made it) grouped by call."""
    waited = []
    for r, split in zip(ranks, splits):
        sel = (split.call_wait_us > 0) & (split.late_rank >= 0) & (r.times.calls.step >= 0)
        waited.append(keys[r.rank][sel])
    waited_keys = np.unique(np.concatenate(waited)) if waited else np.zeros(0, np.int64)
    if not waited_keys.size:
        return ()
    # Every rank's rows of the waited calls, rank after rank (the ranks' order), each rank's in its calls' order.
    key_parts, rank_parts, late_parts, value_parts = [], [], [], []
    for n, (r, split) in enumerate(zip(ranks, splits)):
        rows = np.flatnonzero(np.isin(keys[r.rank], waited_keys) & (r.times.calls.step >= 0))
        key_parts.append(keys[r.rank][rows])
        rank_parts.append(np.full(rows.size, n))
        late_parts.append(split.late_rank[rows])
        value_parts.append(breakdown(r.times, rows))
    key, who, late, values = (np.concatenate(p) for p in (key_parts, rank_parts, late_parts, value_parts))
    # Each call's late rank (its position in `ranks`) as the first rank holding the call names it.
    calls, first, call = np.unique(key, return_index=True, return_inverse=True)
    numbers = np.array([r.rank for r in ranks])
    by_number = np.argsort(numbers, kind="stable")
    at = np.minimum(np.searchsorted(numbers[by_number], late[first]), numbers.size - 1)
    late_of = np.where(numbers[by_number][at] == late[first], by_number[at], -1)
    count = np.bincount(call, minlength=calls.size)
    is_late = who == late_of[call]
    has_late = np.bincount(call[is_late], minlength=calls.size) > 0
    usable = has_late & (count >= 2)
    peer = ~is_late & usable[call]
    if not usable.any():
        return ()
    # The peers' median per call (all of a call's rows but the late rank's).
    peer_call = np.flatnonzero(usable)
    compact = np.full(calls.size, -1)
    compact[peer_call] = np.arange(peer_call.size)
    rows = np.flatnonzero(peer)
    by_call = rows[np.argsort(compact[call[rows]], kind="stable")]
    median = group_medians(values[by_call], compact[call[by_call]], peer_call.size)
    mine_row = np.full(calls.size, -1)
    mine_row[call[is_late]] = np.flatnonzero(is_late)
    # Summed call after call in order of first appearance, as a running total per late rank would.
    order = np.argsort(first[peer_call], kind="stable")
    chosen, med = peer_call[order], median[order]
    extra = np.zeros((len(ranks), len(REGIONS), len(WHAT)))
    base = np.zeros((len(ranks), len(REGIONS)))
    np.add.at(extra, late_of[chosen], values[mine_row[chosen]][:, :, 1:] - med[:, :, 1:])
    np.add.at(base, late_of[chosen], med[:, :, 0])
    steps = [max(len(r.steps), 1) for r in ranks]
    out = []
    for n in sorted(set(late_of[chosen].tolist())):
        table = extra[n]
        p, w = np.unravel_index(int(np.argmax(table)), table.shape)
        if table[p, w] <= 0:
            continue
        per_step_ms = float(table[p, w]) / steps[n] / 1e3
        pct = 100 * float(table[p, w]) / float(base[n][p]) if base[n][p] > 0 else None
        out.append(Straggler(rank=ranks[n].rank, phase=REGIONS[p], extra_ms=per_step_ms, extra_pct=pct, what=WHAT[w]))
    return tuple(sorted(out, key=lambda s: (-s.extra_ms, s.rank)))
