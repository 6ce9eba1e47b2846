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

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from profile_overlap.analysis.per_rank import RankAnalysis
from profile_overlap.analysis.rank_times import OTHER, RankSplit, RankTimes, covered_length
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


def stragglers(ranks: Sequence[RankAnalysis], splits: Sequence[RankSplit], keys: dict[int, np.ndarray]) -> tuple[Straggler, ...]:
    """One row per rank that others waited for: its largest extra (phase, what), per step."""
    waited = []
    for r, split in zip(ranks, splits):
        sel = (split.call_wait_us > 0) & (split.late_rank >= 0) & (r.times.calls.step >= 0)
        waited.append(keys[r.rank][sel])
    waited_keys = np.unique(np.concatenate(waited)) if waited else np.zeros(0, np.int64)
    if not waited_keys.size:
        return ()
    late_of: dict[int, int] = {}
    where: dict[int, dict[int, int]] = defaultdict(dict)
    values: dict[int, np.ndarray] = {}
    for r, split in zip(ranks, splits):
        rows = np.flatnonzero(np.isin(keys[r.rank], waited_keys) & (r.times.calls.step >= 0))
        values[r.rank] = breakdown(r.times, rows)
        for n, (i, k) in enumerate(zip(rows.tolist(), keys[r.rank][rows].tolist())):
            where[k][r.rank] = n
            late_of.setdefault(k, int(split.late_rank[i]))
    extra: dict[int, np.ndarray] = defaultdict(lambda: np.zeros((len(REGIONS), len(WHAT))))
    base: dict[int, np.ndarray] = defaultdict(lambda: np.zeros(len(REGIONS)))
    for k, at in where.items():
        late = late_of[k]
        if late not in at or len(at) < 2:
            continue
        mine = values[late][at[late]]
        peers = np.stack([values[q][n] for q, n in at.items() if q != late])
        median = np.median(peers, axis=0)
        extra[late] += mine[:, 1:] - median[:, 1:]
        base[late] += median[:, 0]
    steps = {r.rank: max(len(r.steps), 1) for r in ranks}
    out = []
    for rank, table in extra.items():
        p, w = np.unravel_index(int(np.argmax(table)), table.shape)
        if table[p, w] <= 0:
            continue
        per_step_ms = float(table[p, w]) / steps[rank] / 1e3
        pct = 100 * float(table[p, w]) / float(base[rank][p]) if base[rank][p] > 0 else None
        out.append(Straggler(rank=rank, phase=REGIONS[p], extra_ms=per_step_ms, extra_pct=pct, what=WHAT[w]))
    return tuple(sorted(out, key=lambda s: (-s.extra_ms, s.rank)))
