"""What `whatif` replays, measured once per profiled step of one rank, with the rest of the analysis:
the busy time before and in each phase, every collective of the step (kind, size, the phase that
issued it, its share of the communication time) and the backward's cuts at the split's hand-offs.

Busy time is the step's time minus its exposed communication: compute, and the gaps between operators
(Python, launches, the profiler's own cost), which the step spends whether or not communication runs;
only the waits for communication are left out, and the replay puts them back (tools/whatif/).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from profile_overlap.analysis.array_eq import ArrayEq
from profile_overlap.analysis.file.events import FileEvents
from profile_overlap.core import intervals as iv
from profile_overlap.core.modes import PHASES

OTHER = "other"
"""The phase of a call issued outside every phase window."""


@dataclass(frozen=True, slots=True)
class ReplayCall:
    """One collective call of a step, in issue order."""

    kind: str
    nbytes: int | None
    phase: str
    """The phase whose window holds the call's issue (its c10d op's start on CPU), or OTHER."""
    share_us: float
    """Its share of the time communication was busy (stream_shares)."""


@dataclass(frozen=True, eq=False)
class ReplayCalls(ArrayEq):
    """A step's collective calls in issue order, as columns (a long trace has hundreds of
    thousands); iterates as ReplayCall."""

    kinds: tuple[str, ...]
    kind: np.ndarray
    """int32 code of each call's kind in `kinds`."""
    nbytes: np.ndarray
    """int64; -1 when the trace does not size the call (ReplayCall.nbytes None)."""
    phase: np.ndarray
    """int8 code of each call's phase in (*PHASES, OTHER)."""
    share_us: np.ndarray

    def __len__(self) -> int:
        return int(self.share_us.size)

    def __iter__(self) -> Iterator[ReplayCall]:
        names = (*PHASES, OTHER)
        for k, nb, p, share in zip(self.kind.tolist(), self.nbytes.tolist(), self.phase.tolist(), self.share_us.tolist()):
            yield ReplayCall(kind=self.kinds[k], nbytes=None if nb < 0 else nb, phase=names[p], share_us=share)


@dataclass(frozen=True)
class ReplayStep:
    """One profiled step of one rank, as whatif replays it."""

    step: int
    pre_us: float
    """Busy time outside every phase window (before the forward, mostly)."""
    phase_us: tuple[float, ...]
    """Busy time inside each phase's window, in PHASES order."""
    calls: ReplayCalls
    backward_cuts_us: tuple[float, ...] | None
    """The backward's busy time between the split's reduce_scatter launches, per unit in forward order;
    None without reduce_scatters issued in backward."""


def stream_shares(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Each call's share of the time communication was busy (µs): its duration, with every stretch
    where k calls were in flight at once counted 1/k to each. The shares add up to the length of
    the calls' union, so calls serialised on one stream with these durations keep the stream busy
    exactly as long as the measured ones were (gloo runs two at once on its worker threads; NCCL's
    calls on one stream never overlap, and there a share is the duration)."""
    if starts.size == 0:
        return np.zeros(0)
    # As np.unique(np.concatenate([starts, ends])), the mids of the edges, the calls in flight at each
    # and the time per call there, the same numbers to the bit, one temporary at a time and in place
    # where one can be reused (at 1 GB of trace 305,200 calls, where finish_rank peaked).
    edges = np.concatenate([starts, ends])
    edges.sort()
    if np.isnan(edges[-1]):  # NaNs sort last; np.unique keeps one
        edges = np.unique(edges)
    else:
        distinct = np.empty(edges.size, dtype=bool)
        distinct[0] = True
        np.not_equal(edges[1:], edges[:-1], out=distinct[1:])
        edges = edges[distinct]
        del distinct
    mids = edges[:-1] + edges[1:]
    mids /= 2
    in_flight = np.searchsorted(np.sort(starts), mids, side="right")
    in_flight -= np.searchsorted(np.sort(ends), mids, side="right")
    del mids
    busy = in_flight > 0
    np.maximum(in_flight, 1, out=in_flight)
    per_us = np.diff(edges)
    per_us /= in_flight
    del in_flight
    per_us[~busy] = 0.0
    del busy
    cum = np.empty(per_us.size + 1)
    cum[0] = 0.0
    np.cumsum(per_us, out=cum[1:])
    del per_us
    out: np.ndarray = cum[edges.searchsorted(ends)]
    out -= cum[edges.searchsorted(starts)]
    return out


def _backward_cuts(step_busy: iv.Union, backward: iv.Union, launches: list[float]) -> tuple[float, ...] | None:
    """Unit k's backward is the busy time between two reduce_scatter launches (the hook fires when
    autograd has produced the unit's gradients); launches go last unit first."""
    if not launches or not backward[0].size:
        return None
    edges = [float(backward[0][0]), *launches, float(backward[1][-1])]
    parts = [iv.length(iv.clip(step_busy, a, b)) for a, b in zip(edges, edges[1:])]
    tail = parts.pop()  # after the last launch: the tail of unit 0's backward (one launch: the only unit's)
    parts[-1] += tail
    return tuple(reversed(parts))


def replay_steps(f: FileEvents, phase_unions: tuple[iv.Union, ...], busy: tuple[iv.Union, iv.Union] | None = None) -> Iterator[ReplayStep]:
    """Per ProfilerStep window of one file, what whatif replays. phase_unions: each phase's windows of
    the file (phases.unions_of_phases); busy: `f.comm_and_compute()` when the caller has it already."""
    comm, compute = f.comm_and_compute() if busy is None else busy
    calls = f.calls
    shares = stream_shares(calls.start_us, calls.start_us + calls.dur_us)
    # The calls in issue order (stable: ties keep the file's order), so that each step takes its
    # own by bisection rather than looking at every call (quadratic in the trace's length).
    issued_at = calls.issue_or_start()
    by_issue = issued_at.argsort(kind="stable")
    # Ties in issue time go by kind name (then the file's order).
    by_name = sorted(range(len(calls.kinds)), key=calls.kinds.__getitem__)
    kind_rank = np.empty(len(by_name), dtype=np.int64)
    kind_rank[by_name] = np.arange(len(by_name))
    backward = PHASES.index("backward")
    reduce_scatter = calls.kinds.index("reduce_scatter") if "reduce_scatter" in calls.kinds else -2
    issued_sorted = issued_at[by_issue]
    # Each phase's windows over the whole file, merged once; a step clips them.
    for num, lo, hi in zip(f.step_num.tolist(), f.step_start.tolist(), f.step_end.tolist()):
        exposed = iv.difference(iv.clip(comm, lo, hi), iv.clip(compute, lo, hi))
        step_busy = iv.difference((np.array([lo]), np.array([hi])), exposed)
        windows = {name: iv.clip(u, lo, hi) for name, u in zip(PHASES, phase_unions)}
        phase_us = tuple(iv.intersection_length(step_busy, w) for w in windows.values())
        i, j = issued_sorted.searchsorted([lo, hi], side="left")
        ks = np.sort(by_issue[i:j])  # the file's order, as before
        t = issued_at[ks]
        phase = np.full(ks.size, len(PHASES))  # the first phase window holding the issue, else OTHER
        done = np.zeros(ks.size, dtype=bool)
        for index, w in enumerate(windows.values()):
            inside = iv.covers(w, t) & ~done
            phase[inside] = index
            done |= inside
        order = np.lexsort((kind_rank[calls.kind[ks]], t))  # stable: ties keep the file's order
        ks, t, phase = ks[order], t[order], phase[order]
        kind = calls.kind[ks]
        launches = t[(phase == backward) & (kind == reduce_scatter)].tolist()
        yield ReplayStep(
            step=int(num),
            pre_us=iv.length(step_busy) - sum(phase_us),
            phase_us=phase_us,
            calls=ReplayCalls(kinds=calls.kinds, kind=kind, nbytes=calls.nbytes[ks], phase=phase.astype(np.int8), share_us=shares[ks]),
            backward_cuts_us=_backward_cuts(step_busy, windows["backward"], launches),
        )
