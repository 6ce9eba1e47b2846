"""Pipeline stages and their bubble: per rank that sends/recv, its point-to-point calls and the
bubble of each step (rank stage: `rank_pipeline`); over the ranks, the stage order, the
microbatches and the ideal bubble (world stage: `job_pipeline`). Definitions:
docs/metrics.md "Pipeline stages".

Stage order comes from who sends to whom: in every schedule of torch.distributed.pipelining
(GPipe, 1F1B, ...) a step starts with forwards, so a stage's first send of a step carries
activations to the next stage, and the first stage is the one whose first point-to-point call
of a step is a send (the others first receive). The microbatches are the first stage's sends of
a step (it sends activations only). The bubble of a stage in a step is the step window minus the
union of its compute: the part covered by point-to-point communication is exposed P2P, the rest
idle. The ideal for p stages and m microbatches is (p - 1) / (m + p - 1).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from profile_overlap.analysis.file.call_columns import SEND, Calls
from profile_overlap.analysis.file.steps import StepTable
from profile_overlap.core import intervals as iv
from profile_overlap.record.dimensions import Pipeline, PipelineRank


@dataclass(frozen=True)
class PipelineStep:
    step: int
    step_us: float
    bubble_us: float
    p2p_exposed_us: float
    sends: dict[int, int]
    """Sends to each peer in the step."""


@dataclass(frozen=True)
class RankPipeline:
    """A rank's point-to-point view: where its first send of a step goes, and its bubble per step."""

    starts_with_send: bool
    """Whether its first point-to-point call of a step is a send (the first stage)."""
    first_send_peer: int | None
    """The peer of its first send of a step (the next stage), None if it never sends first in a step."""
    steps: tuple[PipelineStep, ...]


def rank_pipeline(calls: Calls, compute: iv.Union, *, step_table: StepTable) -> RankPipeline | None:
    """None for a rank without point-to-point calls of known direction and peer, or without steps."""
    p2p = (calls.direction != 0) & (calls.peer >= 0)
    if not p2p.any() or not step_table.size:
        return None
    start, end = calls.start_us[p2p], calls.start_us[p2p] + calls.dur_us[p2p]
    direction, peer = calls.direction[p2p], calls.peer[p2p]
    order = start.argsort(kind="stable")
    start, end, direction, peer = start[order], end[order], direction[order], peer[order]
    p2p_u = iv.union(start, end)
    first_calls, first_peers, steps = [], [], []
    for n, lo, hi in step_table.rows():
        inside = (start >= lo) & (start < hi)
        if inside.any():
            first_calls.append(int(direction[inside][0]))
            sends = inside & (direction == SEND)
            if sends.any():
                first_peers.append(int(peer[sends][0]))
        c = iv.clip(compute, lo, hi)
        comm = iv.clip(p2p_u, lo, hi)
        bubble = (hi - lo) - iv.length(c)
        exposed = iv.length(comm) - iv.intersection_length(comm, c)
        peers, counts = np.unique(peer[inside & (direction == SEND)], return_counts=True)
        steps.append(
            PipelineStep(
                step=int(n),
                step_us=hi - lo,
                bubble_us=bubble,
                p2p_exposed_us=exposed,
                sends={int(p): int(k) for p, k in zip(peers.tolist(), counts.tolist())},
            )
        )
    starts = bool(first_calls) and max(set(first_calls), key=first_calls.count) == SEND
    first_peer = max(set(first_peers), key=first_peers.count) if first_peers else None
    return RankPipeline(starts_with_send=starts, first_send_peer=first_peer, steps=tuple(steps))


def job_pipeline(ranks: Sequence[tuple[int, RankPipeline | None]]) -> Pipeline | None:
    """The stages of the ranks that send/recv, in order, with their bubble; None without any."""
    views = {rank: p for rank, p in ranks if p is not None}
    if not views:
        return None
    stage: dict[int, int] = {}
    firsts = sorted(r for r, p in views.items() if p.starts_with_send)
    for first in firsts:
        at, k = first, 0
        while at in views and at not in stage:
            stage[at] = k
            nxt = views[at].first_send_peer
            if nxt is None:
                break
            at, k = nxt, k + 1
    for r in views:  # a rank no chain reached (a schedule we do not read): after the others, unnumbered
        stage.setdefault(r, max(stage.values(), default=-1) + 1)
    p = max(stage.values()) + 1
    per_step = [sum(s.sends.values()) for first in firsts for s in views[first].steps if s.sends]
    m = int(np.median(per_step)) if per_step else None
    ideal = 100 * (p - 1) / (m + p - 1) if m else None
    out = {}
    for r, view in sorted(views.items()):
        step_us = sum(s.step_us for s in view.steps)
        bubble = sum(s.bubble_us for s in view.steps)
        exposed = sum(s.p2p_exposed_us for s in view.steps)
        out[str(r)] = PipelineRank(
            stage=stage[r],
            bubble_us=round(bubble, 3),
            bubble_pct=round(100 * bubble / step_us, 3) if step_us > 0 else None,
            p2p_exposed_us=round(exposed, 3),
            idle_us=round(bubble - exposed, 3),
        )
    return Pipeline(
        stages=tuple(sorted(views, key=lambda r: (stage[r], r))),
        microbatches=m,
        ideal_bubble_pct=None if ideal is None else round(ideal, 3),
        ranks=out,
        bubble_pct=round(sum(pcts) / len(pcts), 3) if (pcts := [x.bubble_pct for x in out.values() if x.bubble_pct is not None]) else None,
    )
