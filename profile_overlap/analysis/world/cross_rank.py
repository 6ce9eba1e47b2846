"""All ranks -> one TraceAnalysis (stage 3): the world size, each rank's clock offset against the
reference rank (clocks.py), each rank's collective time split into transfer (the fastest rank's
duration of each call) and wait (the rest), and the arrival order at each call on the aligned
clock, with calls matched across ranks by (process group, kind, order), which no clock enters."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np

from profile_overlap.analysis.file.call_columns import collective_stats
from profile_overlap.analysis.integrity.checks import credible_world_size
from profile_overlap.analysis.integrity.world import Integrity, check_integrity
from profile_overlap.analysis.rank.dimensions import job_dimensions
from profile_overlap.analysis.rank.per_rank import RankAnalysis
from profile_overlap.analysis.rank.pipeline import job_pipeline
from profile_overlap.analysis.world.causes import Explained, explain
from profile_overlap.analysis.world.clocks import ClockAlignment, align_clocks
from profile_overlap.analysis.world.heatmap import heatmap
from profile_overlap.record.dimensions import Dimension, Pipeline
from profile_overlap.record.exposed import Exposed
from profile_overlap.record.heatmap import Heatmap


@dataclass(frozen=True)
class RankWait:
    """Cross-rank split of one rank's collective time: transfer_us is the sum over its calls of
    the fastest rank's duration of that call; wait_us is the rest (time spent waiting for peers)."""

    rank: int
    wait_us: float
    transfer_us: float
    matched: int
    """Calls matched on at least two ranks."""
    last_arrivals: int = 0
    """Matched calls this rank started last of all ranks, on the aligned clock (the one the others waited for)."""
    last_arrival_pct: float | None = None
    """100 · last_arrivals / matched (None without matched calls)."""


@dataclass(frozen=True)
class TraceAnalysis:
    source: str
    world_size: int
    hta_compat: bool
    ranks: tuple[RankAnalysis, ...]
    waits: tuple[RankWait, ...]
    slowest_rank: int | None
    """The rank the others wait for: the one with the least wait (None with fewer than two ranks)."""
    clocks: ClockAlignment
    """Each rank's clock offset against the reference rank; aligned time = rank's time − offset."""
    integrity: Integrity
    """The integrity checks of these traces (analysis/integrity/world.py)."""
    causes: Explained | None = None
    """Why communication is exposed (analysis/world/causes.py); None only in analyses built by hand."""
    dimensions: dict[str, Dimension] = field(default_factory=dict)
    """Each dimension's numbers per rank (analysis/rank/dimensions.py); empty only in analyses built by hand."""
    pipeline: Pipeline | None = None
    """The pipeline stages and their bubble (analysis/rank/pipeline.py); None without send/recv."""
    clock_slowest_rank: int | None = None
    """The rank the aligned clock names as the one the others wait for (last at most of its calls),
    where the durations name another (`slowest_rank`); None where the two agree or either cannot
    tell (`_clock_slowest`)."""

    @cached_property
    def heatmap(self) -> Heatmap | None:
        """The rank x time heatmap of the median step (analysis/world/heatmap.py); None without steps
        or causes. Worked out when first read: only the drawings use it (the run's report and the
        Overlap tab), not `analyze`'s console or --json, where it was a tenth of the 1,024-rank
        command's serial time."""
        return heatmap(self.ranks, self.causes.splits, self.clocks) if self.causes is not None else None

    @property
    def exposed(self) -> Exposed | None:
        """The typed record of the causes (record/exposed.py), or None."""
        return self.causes.exposed if self.causes is not None else None


def combine(ranks: list[RankAnalysis], *, source: str, hta_compat: bool = False, duplicates: tuple[str, ...] = ()) -> TraceAnalysis:
    """Add the cross-rank view: world size, the clock offsets, and per rank the wait/transfer split
    and the last arrivals (aligned starts) of its collective calls, matched across ranks by
    (process group, kind, order)."""
    assert ranks
    ranks = sorted(ranks, key=lambda r: r.rank)
    assert len({r.rank for r in ranks}) == len(ranks), "one RankAnalysis per rank"
    # A world size no job has (corrupt distributedInfo: ranks.world_size says so) is not believed.
    world = max((r.world_size for r in ranks if credible_world_size(r.world_size)), default=None) or len(ranks)
    # A trace without group sizes (no distributedInfo, no kernel args): assume the whole world.
    ranks = [
        r if all(c.group_size for c in r.collectives) else replace(r, collectives=collective_stats(r.instances, default_group_size=world))
        for r in ranks
    ]

    clocks = align_clocks({r.rank: r.instances for r in ranks})
    # Each call (process group, kind, seq) as one integer over the ranks, in columns.
    keys = _call_keys(ranks)
    _, call, ranks_in = np.unique(np.concatenate(keys), return_inverse=True, return_counts=True)
    dur = np.concatenate([r.instances.dur_us for r in ranks])
    # Each call's fastest duration once, not once per rank (that is quadratic in the ranks).
    fastest_of = np.full(ranks_in.size, np.inf)
    np.minimum.at(fastest_of, call, dur)
    last_at = _last_arrivals(ranks, keys, clocks)
    waits = []
    lo = 0
    per_call: list[tuple[np.ndarray, np.ndarray]] = []
    for r in ranks:
        mine = call[lo : lo + len(r.instances)]
        ok = ranks_in[mine] >= 2
        per_call.append((fastest_of[mine], ok))
        fastest = fastest_of[mine[ok]]
        matched = int(ok.sum())
        # Summed in time order, one call after the other (as a running total would).
        transfer = float(np.cumsum(fastest)[-1]) if matched else 0.0
        wait = float(np.cumsum(r.instances.dur_us[ok] - fastest)[-1]) if matched else 0.0
        lo += len(r.instances)
        aligned = r.rank in clocks.offsets_us and matched > 0
        waits.append(
            RankWait(
                rank=r.rank,
                wait_us=wait,
                transfer_us=transfer,
                matched=matched,
                last_arrivals=last_at[r.rank],
                last_arrival_pct=100 * last_at[r.rank] / matched if aligned else None,
            )
        )
    with_calls = [w for w in waits if w.matched]
    # The rank the others wait for: the least wait, the lowest rank on a tie; none when every rank
    # waits the same, as no rank then holds the others back (definitions: `slowest_rank`).
    least = min(with_calls, key=lambda w: (w.wait_us, w.rank)) if len(with_calls) >= 2 else None
    slowest = least.rank if least is not None and any(w.wait_us > least.wait_us for w in with_calls) else None
    integrity = check_integrity(ranks, duplicates=duplicates)
    causes = explain(ranks, clocks)
    if causes is not None and causes.check is not None:  # only when an input is missing
        integrity = Integrity((*integrity.checks, causes.check))
    return TraceAnalysis(
        source=source,
        world_size=world,
        hta_compat=hta_compat,
        ranks=tuple(ranks),
        waits=tuple(waits),
        slowest_rank=slowest,
        clock_slowest_rank=_clock_slowest(waits, slowest),
        clocks=clocks,
        integrity=integrity,
        causes=causes,
        dimensions=job_dimensions(
            [(r.rank, r.dimensions, r.instances) for r in ranks], [f for f, _ in per_call], [ok for _, ok in per_call]
        ),
        pipeline=job_pipeline([(r.rank, r.pipeline) for r in ranks]),
    )


CLOCK_MAJORITY_PCT = 50.0
"""clock_slowest_rank names a rank only when it started more than this share of its matched calls last:
below, which rank arrives last changes from call to call, and a call or two (or the clocks'
uncertainty) decides the top share (4 ranks, 16 calls: 31% against 25% is one call)."""


def _clock_slowest(waits: list[RankWait], slowest: int | None) -> int | None:
    """The rank that started most of its matched calls (over CLOCK_MAJORITY_PCT) last on the
    aligned clock, where it is not `slowest` and started last more often than `slowest` did: the
    durations (which assume a call ends together on every rank) and the clock then name different
    ranks as the one the others wait for. None where they agree, where no rank is last at most of
    its calls, without `slowest`, or where `slowest`'s clock is not aligned (its arrivals are
    unknown, not 0%). The lower rank on a tie."""
    placed = {w.rank: w.last_arrival_pct for w in waits if w.last_arrival_pct is not None}
    if slowest is None or slowest not in placed:
        return None
    late = max(placed, key=lambda rank: (placed[rank], -rank))
    clear = placed[late] > CLOCK_MAJORITY_PCT and placed[late] > placed[slowest]
    return late if late != slowest and clear else None


def _call_keys(ranks: list[RankAnalysis]) -> list[np.ndarray]:
    """Each rank's calls as integers, the same for the same (process group, kind, seq) on every rank."""
    codes: dict[tuple[str, str], int] = {}
    groups = []
    for r in ranks:
        inst = r.instances
        table = np.array([codes.setdefault((pg, kind), len(codes)) for pg in inst.pgs for kind in inst.kinds] or [0], dtype=np.int64)
        groups.append(table[inst.pg.astype(np.int64) * len(inst.kinds) + inst.kind])
    span = 1 + max((int(r.instances.seq.max()) for r in ranks if len(r.instances)), default=0)
    return [g * span + r.instances.seq for g, r in zip(groups, ranks)]


def _last_arrivals(ranks: list[RankAnalysis], keys: list[np.ndarray], clocks: ClockAlignment) -> Counter[int]:
    """Per rank, how many calls it started last, on the aligned clock (the lower rank on an exact
    tie), of the calls that at least two aligned ranks made."""
    on = [i for i, r in enumerate(ranks) if r.rank in clocks.offsets_us]
    if len(on) < 2:  # no call has two aligned ranks (and no sort of one rank's calls to find that out)
        return Counter()
    key = np.concatenate([keys[i] for i in on]) if on else np.zeros(0, np.int64)
    at = np.concatenate([ranks[i].instances.start_us - clocks.offset(ranks[i].rank) for i in on]) if on else np.zeros(0)
    rank = np.concatenate([np.full(len(ranks[i].instances), ranks[i].rank) for i in on]) if on else np.zeros(0, np.int64)
    order = np.lexsort((-rank, at, key))  # by call, then time, the lower rank last on a tie
    key, rank = key[order], rank[order]
    last = np.ones(key.size, dtype=bool)
    last[:-1] = key[1:] != key[:-1]
    counted = _has_peer(key)  # a call made by two or more aligned ranks
    return Counter(rank[last & counted].tolist())


def _has_peer(sorted_key: np.ndarray) -> np.ndarray:
    """For keys in sorted order: whether each key occurs at least twice."""
    _, inverse, count = np.unique(sorted_key, return_inverse=True, return_counts=True)
    out: np.ndarray = count[inverse] >= 2
    return out
