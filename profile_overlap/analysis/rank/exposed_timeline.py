"""The causes of exposed communication as the figures draw them (timeline.json, per rank): the
exposed time split into wait and transfer, the critical path's pieces on that rank, and where the
top calls ran, on the aligned clock and inside the timeline's steps. Geometry only: every number
shown comes from the record (record/exposed.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from profile_overlap.analysis.rank.spans import MAX_TIMELINE_STEPS, TIMELINE_GAP_FRACTION
from profile_overlap.analysis.world.critical_path import Segment
from profile_overlap.analysis.world.cross_rank import TraceAnalysis
from profile_overlap.core import intervals as iv


def _spans(u: iv.Union, windows: list[tuple[float, float]], offset: float, gap: float) -> list[list[float]]:
    out = []
    for lo, hi in windows:
        s, e = iv.clip(u, lo, hi)
        s, e = iv.union(s, e, gap=gap)
        out += [[round(a - offset, 3), round(b - offset, 3)] for a, b in zip(s.tolist(), e.tolist())]
    return out


def _merged(pieces: Sequence[Segment], gap: float) -> list[list[Any]]:
    """Consecutive pieces of one kind closer than `gap` joined (a CPU step has thousands)."""
    out: list[list[Any]] = []
    for _, a, b, piece in pieces:
        if out and out[-1][2] == piece and a - out[-1][1] <= gap:
            out[-1][1] = round(float(b), 3)
        else:
            out.append([round(float(a), 3), round(float(b), 3), piece])
    return out


def rank_exposure(result: TraceAnalysis) -> dict[int, dict[str, Any]]:
    """Per rank: {"wait": [[start, end]], "transfer": [[start, end]], "critical": [[start, end,
    piece]], "calls": [[kind, phase, call, step, start, end]]} (times aligned as the spans)."""
    causes = result.causes
    if causes is None:
        return {}
    top = {(c.kind, c.phase, c.call) for c in causes.exposed.top}
    out = {}
    for r, split in zip(result.ranks, causes.splits):
        steps = r.steps[:MAX_TIMELINE_STEPS]
        windows = [(s.start_us, s.start_us + s.step_us) for s in steps]
        longest = max((s.step_us for s in steps), default=0.0)
        gap = longest * TIMELINE_GAP_FRACTION
        offset = result.clocks.offset(r.rank)
        exposed = r.times.exposed
        c = r.times.calls
        shown = {s.step for s in steps}
        calls = [
            [
                kind,
                phase,
                int(c.index[i]),
                int(c.step[i]),
                round(float(c.start_us[i]) - offset, 3),
                round(float(c.end_us[i]) - offset, 3),
            ]
            for i in np.flatnonzero(np.isin(c.step, list(shown))).tolist()
            for kind, phase in (c.kind_phases[int(c.kind_phase[i])],)
            if (kind, phase, int(c.index[i])) in top
        ]
        out[r.rank] = {
            "wait": _spans(split.wait, windows, offset, gap),
            "transfer": _spans(iv.difference(exposed, split.wait), windows, offset, gap),
            "critical": _merged([p for p in causes.path if p[0] == r.rank], gap),
            "calls": calls,
        }
    return out
