"""Why communication is exposed (stage 3): each rank's exposed time split into wait and transfer,
the calls that cost most, the stragglers and the critical path (docs/metrics.md "Why exposed").

On the aligned clock (clocks.py), an exposed instant of rank r is *wait* when some call in flight
on r has not yet started on a peer (the call's latest start over the ranks, matched by process
group, kind and order, lies after it), else *transfer*. Each exposed instant belongs to one call:
the oldest waiting call in flight when it is wait, the oldest call in flight when it is transfer,
so the calls' wait and transfer add up to the rank's. Everything is computed on each rank's own
clock; a peer's start moves onto it by the two offsets.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from profile_overlap.analysis.file.bandwidth import busbw_gbps
from profile_overlap.analysis.integrity.checks import WARNING, new_check
from profile_overlap.analysis.rank.per_rank import RankAnalysis
from profile_overlap.analysis.rank.rank_times import RankSplit, RankTimes, covered_length
from profile_overlap.analysis.world.clocks import ClockAlignment
from profile_overlap.analysis.world.critical_path import Segment, critical_path
from profile_overlap.analysis.world.stragglers import stragglers
from profile_overlap.core import intervals as iv
from profile_overlap.record.exposed import TOP_CALLS, Exposed, ExposedCall, RankExposed
from profile_overlap.record.integrity import IntegrityCheck

CAUSES = "why exposed (wait, transfer, slack, stragglers, critical path)"
"""What the causes' integrity check affects."""


@dataclass(frozen=True)
class Explained:
    """What `explain` found: the record, the per-rank splits (for the figures) and the check."""

    exposed: Exposed
    splits: tuple[RankSplit, ...]
    path: tuple[Segment, ...]
    """The critical path's pieces in time order (for the figures)."""
    check: IntegrityCheck | None
    """A warning naming what the causes could not use (None when nothing is missing)."""


def _owned(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For intervals sorted by start: the part of each not covered by an earlier one ([lo, hi), hi
    may be <= lo: nothing)."""
    if not end.size:
        return end, end
    before = np.empty(end.size)  # the latest end before each (in place: 305,200 calls at 1 GB of trace)
    before[0] = -np.inf
    np.maximum.accumulate(end[:-1], out=before[1:])
    np.maximum(start, before, out=before)
    return before, end


def _call_keys(ranks: Sequence[RankAnalysis]) -> dict[int, np.ndarray]:
    """An int64 key per call of each rank, equal on every rank for one matched call."""
    groups: dict[tuple[str, str], int] = {}
    keys = {}
    for r in ranks:
        c = r.times.calls
        to_global = np.array([groups.setdefault(g, len(groups)) for g in c.groups] or [0], dtype=np.int64)
        keys[r.rank] = to_global[c.group] * (1 << 40) + c.seq if len(c) else np.zeros(0, np.int64)
    return keys


def _latest_starts(
    ranks: Sequence[RankAnalysis], keys: dict[int, np.ndarray], offsets: dict[int, float]
) -> tuple[dict[int, np.ndarray], dict[int, np.ndarray], dict[int, np.ndarray]]:
    """Per rank and call: the latest aligned start over the aligned ranks, the rank that made it
    and how many ranks have the call."""
    all_keys = np.concatenate([keys[r.rank] for r in ranks])
    starts = np.concatenate([r.times.calls.start_us - offsets.get(r.rank, np.nan) for r in ranks])
    who = np.concatenate([np.full(len(r.times.calls), r.rank) for r in ranks])
    uniq, inverse = np.unique(all_keys, return_inverse=True)
    latest = np.full(uniq.size, -np.inf)
    usable = np.isfinite(starts)
    np.maximum.at(latest, inverse[usable], starts[usable])
    count = np.bincount(inverse[usable], minlength=uniq.size)
    # The rank that started last (the lowest rank on a tie): sort by (key, start, -rank).
    order = np.lexsort((-who[usable], starts[usable], inverse[usable]))
    last_rank = np.full(uniq.size, -1)
    last_rank[inverse[usable][order]] = who[usable][order]
    first = np.full(uniq.size, np.inf)
    np.minimum.at(first, inverse[usable], starts[usable])
    last_rank[~(latest > first)] = -1
    out_latest, out_rank, out_count = {}, {}, {}
    at = 0
    for r in ranks:
        n = len(r.times.calls)
        idx = inverse[at : at + n]
        out_latest[r.rank], out_rank[r.rank], out_count[r.rank] = latest[idx], last_rank[idx], count[idx]
        at += n
    return out_latest, out_rank, out_count


def _split(r: RankAnalysis, offset: float, latest: np.ndarray, late: np.ndarray, count: np.ndarray) -> RankSplit:
    t: RankTimes = r.times
    c = t.calls
    own_latest = np.where(count >= 2, latest + offset, c.start_us)
    wait_end = np.clip(own_latest, c.start_us, c.end_us)
    wait = iv.intersect(iv.union(c.start_us, wait_end), t.exposed)
    transfer = iv.difference(t.exposed, wait)
    w_lo, w_hi = _owned(c.start_us, wait_end)
    o_lo, o_hi = _owned(c.start_us, c.end_us)
    call_wait = covered_length(t.exposed, w_lo, w_hi)
    call_transfer = covered_length(transfer, o_lo, o_hi)
    waited = c.first_wait_us
    # The step's end where nothing waited, else the first wait (at most the step's end); in place.
    slack = np.maximum(waited, -1e300)
    np.minimum(slack, c.step_end_us, out=slack)
    unwaited = np.isnan(waited)
    slack[unwaited] = c.step_end_us[unwaited]
    del unwaited
    slack -= c.issue_us
    np.maximum(slack, 0.0, out=slack)
    return RankSplit(
        rank=r.rank,
        offset_us=offset,
        wait=wait,
        transfer=transfer,
        call_wait_us=call_wait,
        call_transfer_us=call_transfer,
        latest_start_us=own_latest,
        late_rank=np.where(count >= 2, late, -1),
        slack_us=slack,
    )


def explain(ranks: Sequence[RankAnalysis], clocks: ClockAlignment) -> Explained | None:
    """The causes of the ranks' exposed communication, or None without ranks."""
    ranks = list(ranks)
    if not ranks:
        return None
    missing = []
    several = len(ranks) >= 2
    if not several:
        missing.append("one rank only: wait, transfer, late ranks, stragglers and the critical path need the peers' traces")
    offsets = {r.rank: clocks.offset(r.rank) for r in ranks if r.rank in clocks.offsets_us}
    unaligned = [r.rank for r in ranks if r.rank not in offsets]
    if several and unaligned:
        missing.append(
            f"rank(s) {', '.join(map(str, unaligned))} share no collective with the others: their clocks "
            "cannot be aligned, so their wait and transfer are unknown"
        )
    if not all(r.times.windows[0].size for r in ranks):
        missing.append(
            "no ProfilerStep windows: exposed time covers the whole trace; slack (to the step's end) "
            "and the critical path need step windows"
        )
    if not all(r.times.issue_known for r in ranks):
        missing.append(
            "some calls' issue time is not in the trace (GPU: no CPU launch events; CPU: no c10d op): "
            "their slack and required bandwidth are unknown"
        )

    keys = _call_keys(ranks)
    latest, late, count = _latest_starts(ranks, keys, offsets) if several else ({}, {}, {})
    splits = []
    rows = {}
    for r in ranks:
        c = r.times.calls
        n = len(c)
        if several and r.rank in offsets:
            split = _split(r, offsets[r.rank], latest[r.rank], late[r.rank], count[r.rank])
        else:
            # No peer's start: columns of one value, as views that take no memory (3 x 8 bytes a call).
            none = (
                np.broadcast_to(np.zeros(1), (n,)),
                np.broadcast_to(np.full(1, -1), (n,)),
                np.broadcast_to(np.zeros(1, dtype=np.int64), (n,)),
            )
            split = _split(r, offsets.get(r.rank, 0.0), *none)
        splits.append(split)
        exposed_us = iv.length(r.times.exposed)
        known = several and r.rank in offsets
        wait_us = iv.length(split.wait) if known else None
        rows[r.rank] = RankExposed(exposed_us=exposed_us, wait_us=wait_us, transfer_us=None if wait_us is None else exposed_us - wait_us)

    path, pieces = critical_path(ranks, splits, keys) if several and not unaligned else (None, ())
    exposed = Exposed(
        ranks=rows,
        top=_top_calls(ranks, splits, known_split=several and not unaligned),
        stragglers=stragglers(ranks, splits, keys) if several and not unaligned else (),
        critical_path=path,
    )
    check = None
    if missing:
        meaning = "the parts named are left out (none in the record); the rest stands"
        check = new_check("causes.inputs", WARNING, "; ".join(missing), {"missing": missing}, meaning, (CAUSES,))
    return Explained(exposed=exposed, splits=tuple(splits), path=pieces, check=check)


def _unique(key: np.ndarray, bound: int) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(key, return_inverse=True) of keys in [0, bound): by a table of the bound's size
    when it is not much larger than the keys (a step's (kind, phase, index) codes are few), which
    takes a fraction of the sort's memory."""
    if bound > 4 * key.size:
        codes, inverse = np.unique(key, return_inverse=True)
        return codes, inverse.reshape(-1)
    present = np.zeros(bound, dtype=bool)
    present[key] = True
    position = np.cumsum(present)
    position -= 1
    return present.nonzero()[0], position[key]


def _top_calls(ranks: Sequence[RankAnalysis], splits: Sequence[RankSplit], *, known_split: bool) -> tuple[ExposedCall, ...]:
    """Calls inside steps, one row per (kind, phase, index in the step), by exposed time. The rows
    are the ranks' calls with exposed time inside steps, rank after rank; only the code, the exposed
    time and the wait of every row are columns (at 1 GB of trace the peak of `combine`), the rest is
    read from the rank's own columns for the top groups' rows."""
    names: dict[tuple[str, str], int] = {}
    sels, to_globals = [], []
    for r, split in zip(ranks, splits):
        c = r.times.calls
        exposed = split.call_wait_us + split.call_transfer_us
        sels.append(np.flatnonzero((c.step >= 0) & (exposed > 0)))
        to_globals.append(np.array([names.setdefault(kp, len(names)) for kp in c.kind_phases] or [0], dtype=np.int64))
        del exposed
    first_row = np.cumsum([0] + [sel.size for sel in sels])  # where each rank's rows start
    if not first_row[-1]:
        return ()
    # The (name, index) pairs as one int64 code in the same order as the rows of
    # np.unique(axis=0) (both are >= 0: calls inside steps), which sorts them much faster.
    span = max(int(r.times.calls.index[sel].max()) + 1 for r, sel in zip(ranks, sels) if sel.size)
    keys = []
    for r, sel, to_global in zip(ranks, sels, to_globals):
        c = r.times.calls
        key = to_global[c.kind_phase[sel]]
        key *= span
        key += c.index[sel]
        keys.append(key)
    del key
    key = keys[0] if len(keys) == 1 else np.concatenate(keys)
    del keys
    codes, inverse = _unique(key, len(names) * span)
    del key
    groups = np.stack([codes // span, codes % span], axis=1)

    def rows(column: Callable[[RankSplit, np.ndarray], np.ndarray]) -> np.ndarray:
        """A column over every row, rank after rank (one column alive at a time: peak memory)."""
        parts = [column(split, sel) for split, sel in zip(splits, sels)]
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    # The same sum as the rank's exposed above, then the wait.
    exposed = np.bincount(
        inverse, weights=rows(lambda split, sel: split.call_wait_us[sel] + split.call_transfer_us[sel]), minlength=len(groups)
    )
    wait = np.bincount(inverse, weights=rows(lambda split, sel: split.call_wait_us[sel]), minlength=len(groups))

    joined: dict[str, np.ndarray] = {}

    def of_rows(rows: np.ndarray, column: str) -> np.ndarray:
        """The split's column (RankSplit) at these rows: one rank's read in place, several ranks'
        joined once (a gather per rank and group would cost more than the copy)."""
        if len(ranks) == 1:
            return np.asarray(getattr(splits[0], column)[sels[0][rows]])
        if column not in joined:
            joined[column] = np.concatenate([getattr(split, column)[sel] for split, sel in zip(splits, sels)])
        return np.asarray(joined[column][rows])

    kind_phase = {code: pair for pair, code in names.items()}
    out = []
    for g in np.argsort(-exposed, kind="stable")[:TOP_CALLS].tolist():
        members = np.flatnonzero(inverse == g)
        kind, phase = kind_phase[int(groups[g][0])]
        slacks = of_rows(members, "slack_us")
        slacks = slacks[np.isfinite(slacks)]
        slack = float(np.median(slacks)) if slacks.size else None
        row = int(members[0])
        k = int(first_row.searchsorted(row, side="right")) - 1
        calls = ranks[k].times.calls
        call = int(sels[k][row - first_row[k]])
        sized = int(calls.nbytes[call])
        nbytes = sized if sized >= 0 else None  # UNKNOWN: the trace does not size it
        group = int(calls.group_size[call])
        needed = busbw_gbps(kind, nbytes, slack, group if group >= 0 else None) if slack and nbytes else None
        late: dict[int, float] = defaultdict(float)
        late_of = of_rows(members, "late_rank")
        for waited, who in zip(of_rows(members, "call_wait_us").tolist(), late_of.tolist()):
            if waited > 0 and who >= 0:
                late[int(who)] += float(waited)
        late_rank = max(sorted(late), key=lambda k: late[k]) if late else None
        out.append(
            ExposedCall(
                kind=kind,
                phase=phase,
                call=int(groups[g][1]),
                bytes=nbytes,
                exposed_us=float(exposed[g]),
                wait_us=float(wait[g]) if known_split else None,
                transfer_us=float(exposed[g] - wait[g]) if known_split else None,
                slack_us=slack,
                required_gbps=needed,
                late_rank=late_rank,
            )
        )
    return tuple(out)
