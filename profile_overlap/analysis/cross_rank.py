"""All ranks -> one TraceAnalysis (stage 3): the world size, and each rank's collective time split
into transfer (the fastest rank's duration of each call) and wait (the rest), with calls matched
across ranks by (process group, kind, order)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace

from profile_overlap.analysis.collectives import collective_stats
from profile_overlap.analysis.per_rank import RankAnalysis


@dataclass(frozen=True)
class RankWait:
    """Cross-rank split of one rank's collective time: transfer_us is the sum over its calls of
    the fastest rank's duration of that call; wait_us is the rest (time spent waiting for peers)."""

    rank: int
    wait_us: float
    transfer_us: float
    matched: int
    """Calls matched on at least two ranks."""


@dataclass(frozen=True)
class TraceAnalysis:
    source: str
    world_size: int
    hta_compat: bool
    ranks: tuple[RankAnalysis, ...]
    waits: tuple[RankWait, ...]
    slowest_rank: int | None
    """The rank the others wait for: the one with the least wait (None with fewer than two ranks)."""


def combine(ranks: list[RankAnalysis], *, source: str, hta_compat: bool = False) -> TraceAnalysis:
    """Add the cross-rank view: world size and the wait/transfer split of every collective call,
    matched across ranks by (process group, kind, order)."""
    assert ranks
    ranks = sorted(ranks, key=lambda r: r.rank)
    assert len({r.rank for r in ranks}) == len(ranks), "one RankAnalysis per rank"
    world = max((r.world_size for r in ranks if r.world_size), default=None) or len(ranks)
    # A trace without group sizes (no distributedInfo, no kernel args): assume the whole world.
    ranks = [
        r if all(c.group_size for c in r.collectives) else replace(r, collectives=collective_stats(r.instances, default_group_size=world))
        for r in ranks
    ]

    durations: dict[tuple, list[float]] = defaultdict(list)
    for r in ranks:
        for inst in r.instances:
            durations[(inst.pg, inst.kind, inst.seq)].append(inst.dur_us)
    waits = []
    for r in ranks:
        wait = transfer = 0.0
        matched = 0
        for inst in r.instances:
            peers = durations[(inst.pg, inst.kind, inst.seq)]
            if len(peers) < 2:
                continue
            matched += 1
            fastest = min(peers)
            transfer += fastest
            wait += inst.dur_us - fastest
        waits.append(RankWait(rank=r.rank, wait_us=wait, transfer_us=transfer, matched=matched))
    with_calls = [w for w in waits if w.matched]
    # The rank the others wait for: the least wait, the lowest rank on a tie (definitions: `slowest_rank`).
    slowest = min(with_calls, key=lambda w: (w.wait_us, w.rank)).rank if len(with_calls) >= 2 else None
    return TraceAnalysis(
        source=source, world_size=world, hta_compat=hta_compat, ranks=tuple(ranks), waits=tuple(waits), slowest_rank=slowest
    )
