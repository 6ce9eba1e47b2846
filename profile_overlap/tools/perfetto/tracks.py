"""The tracks `perfetto` draws from the analysis, per rank and mode: profiler steps, phases, one
slice per collective call, compute and the communication hidden and exposed (analysis/
overlap_spans.py), the collectives in flight, and the arrows between calls. Nothing here measures:
every slice is a typed result of the analysis put on the merged clock."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from profile_overlap.analysis.rank.dimensions import base_group
from profile_overlap.analysis.rank.per_rank import RankAnalysis
from profile_overlap.analysis.world.cross_rank import TraceAnalysis
from profile_overlap.core import intervals as iv

STEPS, PHASES, COLLECTIVES, COMPUTE, HIDDEN, EXPOSED = "steps", "phases", "collectives", "compute", "comm hidden", "comm exposed"
TRACKS = (STEPS, PHASES, COLLECTIVES, COMPUTE, HIDDEN, EXPOSED)
"""The analysis tracks of a rank, in the order they are shown (above the trace's own threads)."""
FLAT = frozenset({STEPS, COLLECTIVES, COMPUTE, HIDDEN, EXPOSED})
"""Tracks whose slices never nest: arrows point at them, and a slice there stands alone."""
IN_FLIGHT = "in flight"
"""The counter of collective calls in flight; Perfetto names its track "in flight collectives"."""


@dataclass(frozen=True)
class Slice:
    track: str
    start_ns: int
    dur_ns: int
    name: str
    args: dict


@dataclass(frozen=True)
class Arrow:
    """A flow from one drawn slice to another: (rank, index into that rank's slices)."""

    cat: str
    name: str
    src: tuple[int, int]
    dst: tuple[int, int]


@dataclass
class RankTracks:
    slices: list[Slice] = field(default_factory=list)
    counter: list[tuple[int, int]] = field(default_factory=list)
    """(time ns, calls in flight) at each change."""
    calls: dict[tuple[str, str, int], int] = field(default_factory=dict)
    """(pg, kind, seq) -> index of the call's slice."""
    compute: list[int] = field(default_factory=list)
    """Index of the slice of each compute interval (RankAnalysis.spans.compute), in order."""


def _r(x: float | None, digits: int = 3) -> float | None:
    return None if x is None or not math.isfinite(x) else round(float(x), digits)


def rank_tracks(r: RankAnalysis, to_ns: Callable[[float], int], mode: str, *, wait: iv.Union | None = None) -> RankTracks:
    """One rank's analysis tracks; to_ns: a time on the rank's own clock (µs) -> merged ns. wait:
    the rank's exposed instants that are wait (analysis/world/causes.py, on its own clock): the exposed
    track's slices are then cut into "wait" and "transfer" pieces, which Perfetto colours apart."""
    out = RankTracks()

    def add(track: str, a_us: float, b_us: float, name: str, args: dict) -> int:
        start = to_ns(a_us)
        out.slices.append(Slice(track, start, max(to_ns(b_us) - start, 0), name, args))
        return len(out.slices) - 1

    for s in r.steps:
        args = {
            "mode": mode,
            "step_us": _r(s.step_us),
            "comm_us": _r(s.comm_us),
            "compute_us": _r(s.compute_us),
            "overlap_us": _r(s.overlap_us),
            "exposed_comm_us": _r(s.exposed_comm_us),
            "overlap_pct": _r(s.overlap_pct, 2),
        }
        add(STEPS, s.start_us, s.start_us + s.step_us, f"step {s.step}", args)
    for step, phase, a, b in r.phase_windows:
        add(PHASES, a, b, phase, {"step": step})
    # Each call names its dimension (analysis/rank/dimensions.py); with two or more, the slice's name
    # carries it too, so that Perfetto colours (and its search groups) calls by dimension.
    dimension_of = dict(r.dimensions.dimension_of) if r.dimensions is not None else {}
    named = len(r.dimensions.dims) >= 2 if r.dimensions is not None else False
    for inst in r.instances:
        dim = dimension_of.get(base_group(inst.pg))
        args = {"pg": inst.pg, "seq": inst.seq, "nbytes": inst.nbytes, "group_size": inst.group_size, "dur_us": _r(inst.dur_us)}
        if dim is not None:
            args["dimension"] = dim
        name = f"{inst.kind} [{dim}]" if named and dim is not None else inst.kind
        out.calls[(inst.pg, inst.kind, inst.seq)] = add(COLLECTIVES, inst.start_us, inst.start_us + inst.dur_us, name, args)
    if r.spans is not None:
        for track, (starts, ends) in ((COMPUTE, r.spans.compute), (HIDDEN, r.spans.hidden)):
            name = track.removeprefix("comm ")
            for a, b in zip(starts.tolist(), ends.tolist()):
                i = add(track, a, b, name, {})
                if track == COMPUTE:
                    out.compute.append(i)
        exposed = r.spans.exposed
        pieces = [(a, b, "exposed") for a, b in zip(*map(np.ndarray.tolist, exposed))]
        if wait is not None:
            waiting, moving = iv.intersect(exposed, wait), iv.difference(exposed, wait)
            pieces = sorted(
                [(a, b, "wait") for a, b in zip(*map(np.ndarray.tolist, waiting))]
                + [(a, b, "transfer") for a, b in zip(*map(np.ndarray.tolist, moving))]
            )
        for a, b, name in pieces:
            add(EXPOSED, a, b, name, {})
    changes: dict[int, int] = {}
    for inst in r.instances:
        changes[to_ns(inst.start_us)] = changes.get(to_ns(inst.start_us), 0) + 1
        changes[to_ns(inst.start_us + inst.dur_us)] = changes.get(to_ns(inst.start_us + inst.dur_us), 0) - 1
    level = 0
    for t in sorted(changes):
        level += changes[t]
        out.counter.append((t, level))
    return out


def call_arrows(analysis: TraceAnalysis, tracks: dict[int, RankTracks]) -> list[Arrow]:
    """Per collective call matched on two ranks or more (by process group, kind and order, as the
    analysis matches them): an arrow from the rank that started it last on the aligned clock (the
    one the others waited for) to each other rank's slice of it."""
    clocks = analysis.clocks
    arrivals: dict[tuple[str, str, int], list[tuple[float, int]]] = {}
    for r in analysis.ranks:
        for inst in r.instances:
            arrivals.setdefault((inst.pg, inst.kind, inst.seq), []).append((clocks.aligned(r.rank, inst.start_us), r.rank))
    arrows = []
    for key, ranks in arrivals.items():
        if len(ranks) < 2:
            continue
        _, last = max(ranks, key=lambda x: (x[0], -x[1]))  # the lower rank on a tie, as cross_rank does
        for _, other in ranks:
            if other != last:
                name = f"{key[1]} #{key[2]}: rank {other} waited for rank {last}"
                arrows.append(Arrow("collective", name, (last, tracks[last].calls[key]), (other, tracks[other].calls[key])))
    return arrows


def waited_arrows(r: RankAnalysis, tracks: RankTracks) -> list[Arrow]:
    """From each collective call that ends in exposed communication (nothing computed while it
    finished) to the next compute interval that starts inside the same step: the compute that
    waited for it."""
    if r.spans is None or not r.spans.compute[0].size:
        return []
    (ex_s, ex_e), (co_s, _) = r.spans.exposed, r.spans.compute
    steps = sorted((s.start_us, s.start_us + s.step_us) for s in r.steps)
    arrows = []
    for inst in r.instances:
        end = inst.start_us + inst.dur_us
        j = int(np.searchsorted(ex_e, end, side="left"))
        if j >= ex_s.size or not ex_s[j] < end <= ex_e[j]:
            continue
        k = int(np.searchsorted(co_s, end, side="left"))
        if k >= co_s.size:
            continue
        step_end = next((b for a, b in steps if a <= end <= b), None)
        if step_end is None or co_s[k] > step_end:
            continue
        src = tracks.calls[(inst.pg, inst.kind, inst.seq)]
        arrows.append(Arrow("waited", f"compute waited for {inst.kind} #{inst.seq}", (r.rank, src), (r.rank, tracks.compute[k])))
    return arrows
