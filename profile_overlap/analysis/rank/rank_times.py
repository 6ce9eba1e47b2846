"""One rank's times that the causes of exposed communication need (stage 2, kept beside the metrics).

`rank_times` keeps, on the rank's own clock: its compute and exposed-communication unions inside
the step windows, its phase windows, and one row per collective call (when it was issued, when it
started and ended, its phase, its index in the step, and when this rank's compute first waited
for it). The cross-rank part (causes.py) aligns these and splits exposed time into wait and
transfer. Columns, not objects: a 76 MB trace has tens of thousands of calls.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from profile_overlap.analysis.array_eq import ArrayEq
from profile_overlap.analysis.file.call_columns import Calls, Instances
from profile_overlap.analysis.file.steps import StepTable
from profile_overlap.core import intervals as iv
from profile_overlap.core.modes import PHASES

OTHER = "other"
"""The phase of a call issued outside every phase window and engine label."""


@dataclass(frozen=True, eq=False)
class CallTimes(ArrayEq):
    """One rank's collective calls as columns, in time order (the order `number_calls` gives)."""

    group: np.ndarray
    """Code of each call's (process group, kind) in `groups`."""
    groups: tuple[tuple[str, str], ...]
    seq: np.ndarray
    """Order among the rank's calls of the same kind and process group (the cross-rank match)."""
    nbytes: np.ndarray
    """int64; -1 (call_columns.UNKNOWN) when the trace does not size the call."""
    group_size: np.ndarray
    """int64, the call's group size; -1 (call_columns.UNKNOWN) when the trace does not give one."""
    start_us: np.ndarray
    end_us: np.ndarray
    issue_us: np.ndarray
    """When the program issued the call (CPU: its c10d op; GPU: its launch); NaN when unknown."""
    step: np.ndarray
    """The ProfilerStep number whose window holds the call's start; -1 outside every window; 0
    for every call of a trace without step windows (the trace is one window)."""
    step_end_us: np.ndarray
    """End of that window; NaN outside every window."""
    kind_phase: np.ndarray
    """Code of each call's (kind, phase) in `kind_phases`: its kind and the phase of its issue
    (classify.PHASES or "other"). A code, not a name per call: at 1 GB of trace, 305,200 calls."""
    kind_phases: tuple[tuple[str, str], ...]
    index: np.ndarray
    """Index among the step's calls of the same kind and phase on this rank (-1 outside steps)."""
    first_wait_us: np.ndarray
    """Start of the stretch without compute that ends at the call's end (this rank's compute waited
    from then on); NaN when compute ran up to the call's end (nothing waited for it)."""

    def __len__(self) -> int:
        return int(self.start_us.size)


@dataclass(frozen=True, eq=False)
class RankTimes(ArrayEq):
    """What causes.py needs from one rank, on its own clock."""

    compute: iv.Union
    """Compute time inside the step windows (the whole trace without windows)."""
    exposed: iv.Union
    """Communication not covered by compute, inside the step windows."""
    windows: iv.Union
    """The step windows (empty without ProfilerStep annotations)."""
    phases: tuple[iv.Union, ...]
    """Per classify.PHASES, the union of that phase's labelled ranges."""
    calls: CallTimes
    issue_known: bool
    """Whether every call's issue time is in the trace (GPU: its runtime launch event)."""


def rank_times(
    calls: Calls,
    instances: Instances,
    *,
    device: str,
    comm: iv.Union,
    compute: iv.Union,
    windows: iv.Union,
    steps: StepTable,
    phase_unions: tuple[iv.Union, ...],
) -> RankTimes:
    """`calls` and `instances` are the same calls (instances numbered by `number_calls`, whose
    order is the calls' order by start); comm and compute are already cut to the windows.
    phase_unions: each phase's windows (phases.unions_of_phases)."""
    n = len(calls)
    assert n == len(instances)
    # Before the per-call columns below, so that its temporaries and theirs are not alive at once (peak memory).
    exposed = iv.difference(comm, compute)
    # The calls in start order (stable, as number_calls sorts them): only the columns needed here are
    # taken in that order, not every column of every call (70 bytes a call, at 1 GB this stage's peak).
    order = calls.start_us.argsort(kind="stable")
    start = instances.start_us
    end = start + instances.dur_us
    wait_from = first_wait(compute, end)  # here, while few of the columns below are alive beside its temporaries
    if device == "cuda":  # the runtime call that launched the kernel (NaN without launch events)
        issue = calls.launch_us[order]
    else:  # the c10d op on the calling thread (NaN when no op was matched to the gloo work)
        issue = calls.issued_us[order]
    phase_code, phase_names = _call_phases(calls.issue_or_start()[order], calls.hint[order], calls.hints, phase_unions)
    del order

    # The step whose window holds each call's start.
    order = steps.start_us.argsort(kind="stable")
    s_num, s_lo, s_hi = steps.num[order], steps.start_us[order], steps.end_us[order]
    if s_lo.size:
        j = np.maximum(s_lo.searchsorted(start, side="right") - 1, 0)
        inside = (start >= s_lo[j]) & (start < s_hi[j])
        step = np.where(inside, s_num[j], -1)
        step_end_us = np.where(inside, s_hi[j], np.nan)
        del j, inside
    else:  # no step windows: the whole trace is one window, with no end to count slack to
        step, step_end_us = np.zeros(start.size, dtype=np.int64), np.full(start.size, np.nan)

    kind_phase, kind_phases, index = _index_in_step(step, instances.kind, instances.kinds, phase_code, phase_names)
    del phase_code
    # Each call's (group, kind) numbered in the order the calls first meet them.
    width = max(len(instances.kinds), 1)
    pair = instances.pg.astype(np.int64)
    pair *= width
    pair += instances.kind
    group, met = _codes_in_order(pair, len(instances.pgs) * width)
    del pair
    group_of = [(instances.pgs[v // width], instances.kinds[v % width]) for v in met]

    return RankTimes(
        compute=compute,
        exposed=exposed,
        windows=windows,
        phases=phase_unions,
        calls=CallTimes(
            group=group,
            groups=tuple(group_of),
            kind_phase=kind_phase,
            kind_phases=kind_phases,
            seq=instances.seq,
            nbytes=instances.nbytes,
            group_size=instances.group_size,
            start_us=start,
            end_us=end,
            issue_us=issue,
            step=step,
            step_end_us=step_end_us,
            index=index,
            first_wait_us=wait_from,
        ),
        issue_known=bool(np.isfinite(issue).all()),
    )


def _index_in_step(
    step: np.ndarray, kind: np.ndarray, kind_names: tuple[str, ...], phase: np.ndarray, phase_names: tuple[str, ...]
) -> tuple[np.ndarray, tuple[tuple[str, str], ...], np.ndarray]:
    """(code of each call's (kind, phase), the (kind, phase) of each code in the order the calls first
    meet them, each call's index among the calls of its step, kind and phase in time order (-1 outside
    steps)). kind, phase: each call's code in kind_names, phase_names (each without repeats)."""
    # Codes, not a pair of names per call: at 1 GB of trace 305,200 calls, where rank_times peaks.
    width = max(len(phase_names), 1)
    pair = kind.astype(np.int64)
    pair *= width
    pair += phase
    name, met = _codes_in_order(pair, len(kind_names) * width)
    del pair
    codes = [(kind_names[v // width], phase_names[v % width]) for v in met]
    # In (step, code) order, ties in time order: one stable sort of one key (0 <= code < len(codes); -1
    # for the calls outside steps, sorted first and numbered -1 after), each temporary's buffer reused
    # (at 1 GB of trace, 305,200 calls, the peak of `rank_times`).
    outside = step < 0
    key = step * len(codes)
    key += name
    key[outside] = -1
    order = key.argsort(kind="stable")
    index = key[order]  # the keys in order, then the position of each run's first call, then the index
    del key
    new = np.ones(order.size, dtype=bool)
    new[1:] = index[1:] != index[:-1]
    pos = np.arange(order.size)
    np.multiply(new, pos, out=index)
    del new
    np.maximum.accumulate(index, out=index)
    pos -= index
    index[order] = pos
    del pos, order
    index[outside] = -1
    return name, tuple(codes), index


FEW_VALUES = 64
"""Up to this many distinct values, `_codes_in_order` finds each one's first element by a pass over
them all (no sort, no temporary the size of the column); above, by np.unique."""


def _codes_in_order(value: np.ndarray, size: int) -> tuple[np.ndarray, list[int]]:
    """(each element's code, the value of each code) for integers in [0, size): the codes number the
    distinct values in the order the elements first meet them, as a dict's setdefault would."""
    if not value.size:
        return np.zeros(0, dtype=np.int64), []
    values = np.flatnonzero(np.bincount(value, minlength=size))
    if values.size <= FEW_VALUES:
        met = sorted(values.tolist(), key=lambda v: int(np.argmax(value == v)))
    else:
        distinct, first = np.unique(value, return_index=True)
        met = distinct[np.argsort(first)].tolist()
    lookup = np.zeros(size, dtype=np.int64)
    lookup[met] = np.arange(len(met))
    return lookup[value], met


def first_wait(compute: iv.Union, t: np.ndarray) -> np.ndarray:
    """For each time in `t`: NaN where compute runs just before it (an interval with start < t <=
    end); else the start of the stretch without compute that ends at it (the end of the last
    compute interval before it; -inf when none)."""
    s, e = compute
    if s.size == 0:
        return np.full(np.shape(t), -np.inf)
    j = s.searchsorted(t, side="left")
    j -= 1
    after = j >= 0  # some compute interval starts before t
    np.maximum(j, 0, out=j)
    out = e[j]  # the end of the last one
    del j
    covered = out >= t
    covered &= after
    out[~after] = -np.inf
    out[covered] = np.nan
    return out


def _call_phases(
    t: np.ndarray, hint: np.ndarray, hint_names: tuple[str, ...], phases: tuple[iv.Union, ...]
) -> tuple[np.ndarray, tuple[str, ...]]:
    """(each call's code in names, names): the phase window holding each call's issue as
    `phase_collectives` attributes it (CPU: its c10d op; GPU: its kernel's start, in the device-side
    windows); else its engine labels' phase (CollectiveCall.phase_hint); else "other". t: each call's
    issue, else its start (Calls.issue_or_start); hint: its code in hint_names (Calls.hint, -1: none).
    names: PHASES first (in that order), then "other" and the hints' other names, without repeats."""
    names = tuple(dict.fromkeys((*PHASES, OTHER, *(h or OTHER for h in hint_names))))
    of_hint = np.array([names.index(h or OTHER) for h in hint_names] + [names.index(OTHER)], dtype=np.int64)
    code = of_hint[hint]  # code -1 (no hint) -> the last entry, OTHER
    done = np.zeros(t.size, dtype=bool)
    for i, union in enumerate(phases):  # names[i] is PHASES[i]
        inside = iv.covers(union, t)
        inside &= ~done
        code[inside] = i
        done |= inside
    return code, names


@dataclass(frozen=True, eq=False)
class RankSplit(ArrayEq):
    """One rank's exposed time split per call, on its own clock (columns follow its CallTimes)."""

    rank: int
    offset_us: float
    """Subtract from this rank's times for the aligned clock."""
    wait: iv.Union
    """Exposed instants that are wait; exposed − wait is transfer."""
    transfer: iv.Union
    """exposed − wait (computed once here; the heatmap and the critical path clip it to their step)."""
    call_wait_us: np.ndarray
    call_transfer_us: np.ndarray
    latest_start_us: np.ndarray
    """Each call's latest start over the ranks, on this rank's clock (its own start when unmatched)."""
    late_rank: np.ndarray
    """The rank that started each call last (-1: unmatched or no peer started later than the first)."""
    slack_us: np.ndarray
    """Issue → first wait (NaN when unknown)."""


COVER_BLOCK = 1 << 16
"""Pairs `covered_length` measures at once (its temporaries are this many times, not every call's)."""


def _before(u: iv.Union) -> np.ndarray:
    """|u ∩ (−∞, s[j])| for each start s[j] of the union, then its whole length (built in place)."""
    s, e = u
    before = np.empty(s.size + 1)
    before[0] = 0.0
    lengths = before[1:]
    np.subtract(e, s, out=lengths)
    np.add.accumulate(lengths, out=lengths)  # np.cumsum's sum, without its wrapper (~4 µs a call)
    return before


def cumulative(u: iv.Union, t: np.ndarray, *, before: np.ndarray | None = None) -> np.ndarray:
    """|u ∩ (−∞, t)| for each time in t. before: `_before(u)`, when the caller has it."""
    s, e = u
    if s.size == 0:
        return np.zeros(np.shape(t))
    if before is None:
        before = _before(u)
    # In place: at 1 GB of trace t is every call's start (305,200), and each temporary 2.4 MB.
    j = s.searchsorted(t, side="right")
    j -= 1
    none = j < 0
    np.maximum(j, 0, out=j)
    out = e[j]
    np.minimum(t, out, out=out)
    out -= s[j]  # the part of the interval holding t that lies before it...
    out += before[j]  # ...after every earlier interval
    out[none] = 0.0
    return out


def covered_length(u: iv.Union, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """|u ∩ [lo, hi)| for each pair (lo, hi: 1-D, of one length; 0 where hi <= lo), COVER_BLOCK pairs at a time."""
    lo, hi = np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)
    if u[0].size == 0:
        return np.zeros(lo.shape)
    before = _before(u)
    if 2 * lo.size <= COVER_BLOCK:
        # Both ends in one pass (a rank's calls: the numpy calls cost more than their numbers).
        ends = cumulative(u, np.concatenate([np.maximum(hi, lo), lo]), before=before)
        covered: np.ndarray = ends[: lo.size] - ends[lo.size :]
        np.maximum(covered, 0.0, out=covered)
        return covered
    out = np.empty(lo.size)
    for a in range(0, lo.size, COVER_BLOCK):
        block_lo, block_hi = lo[a : a + COVER_BLOCK], hi[a : a + COVER_BLOCK]
        covered = cumulative(u, np.maximum(block_hi, block_lo), before=before)
        covered -= cumulative(u, block_lo, before=before)
        np.maximum(covered, 0.0, out=covered)
        out[a : a + COVER_BLOCK] = covered
    return out
