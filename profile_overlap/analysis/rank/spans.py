"""Timeline spans: one rank's comm and compute pieces -> the few labelled spans the figures draw.

`coarsen` is the one way spans get merged to a budget, here when the analysis writes
timeline.json and in the TensorBoard plugin when a view asks for fewer spans: the largest gaps
between consecutive spans stay open, the rest close, and a merged span keeps the label of its
longest piece.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from profile_overlap.analysis.array_eq import ArrayEq
from profile_overlap.analysis.file.steps import StepTable
from profile_overlap.core import intervals as iv
from profile_overlap.record.timeline import TimelineSpan

MAX_TIMELINE_STEPS = 16
MAX_SPANS_PER_STEP = 256
"""Per step and class (comm / compute): the timeline is merged coarser until it fits."""
TIMELINE_GAP_FRACTION = 1 / 2000
"""Timeline spans closer than this fraction of the step merge."""


def coarsen(
    start: npt.ArrayLike, end: npt.ArrayLike, *, max_spans: int, gap: float = -math.inf
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Merge spans into at most `max_spans`. Spans whose distance is <= `gap` always merge (by
    default none do); when more than `max_spans` remain, only the `max_spans - 1` largest gaps
    between consecutive spans (in start order) stay open. Returns, per merged span in time order,
    (first, end, longest): the input index of its first piece (its start is that piece's), its
    end, and the input index of its longest piece (for its label)."""
    starts = np.asarray(start, dtype=np.float64)
    ends_in = np.asarray(end, dtype=np.float64)
    if starts.size == 0:
        none = np.empty(0, dtype=np.int64)
        return none, np.empty(0), none
    order, group = iv.group_ids(starts, ends_in, gap=gap)
    s, e = starts[order], ends_in[order]
    if group[-1] + 1 > max_spans:
        room = s[1:] - np.maximum.accumulate(e)[:-1]
        open_gaps = np.flatnonzero(group[1:] != group[:-1])
        keep = open_gaps[np.argsort(-room[open_gaps], kind="stable")[: max_spans - 1]]
        breaks = np.zeros(s.size, dtype=bool)
        breaks[0] = True
        breaks[1 + keep] = True
        group = breaks.cumsum() - 1
    first = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
    ends = np.maximum.reduceat(e, first)
    # The longest piece of each group: sort by (group, -duration), take each group's first.
    longest = np.lexsort((-(e - s), group))[first]
    return order[first], ends, order[longest]


@dataclass(frozen=True, eq=False)
class TimelineColumns(ArrayEq):
    """The timeline's spans as columns, in the same order: a worker sends a few arrays rather than
    an object per span, and the spans are built (by iterating) only for the ranks a timeline draws."""

    step: np.ndarray
    """int64; unused (every span's step is None) when not `stepped`."""
    start_us: np.ndarray
    end_us: np.ndarray
    kind: np.ndarray
    """int8, index into `kinds`."""
    label: np.ndarray
    """int32, index into `labels`."""
    kinds: tuple[str, ...]
    labels: tuple[str, ...]
    stepped: bool

    def __len__(self) -> int:
        return int(self.start_us.size)

    def __iter__(self) -> Iterator[TimelineSpan]:
        steps = self.step.tolist() if self.stepped else [None] * len(self)
        kinds, labels = self.kinds, self.labels
        for step, a, b, k, code in zip(steps, self.start_us.tolist(), self.end_us.tolist(), self.kind.tolist(), self.label.tolist()):
            yield TimelineSpan(step=step, start_us=a, end_us=b, kind=kinds[k], label=labels[code])


def timeline_columns(
    pieces: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]],
    labels: tuple[str, ...],
    steps: StepTable,
) -> TimelineColumns:
    """pieces: kind ("comm", "compute") -> (start, end, label code) of its events. Per step (at
    most MAX_TIMELINE_STEPS), each kind merged into at most MAX_SPANS_PER_STEP spans: spans
    closer than step_us · TIMELINE_GAP_FRACTION merge, then `coarsen` keeps the largest gaps
    until it fits. Without steps, one window from the first piece to the last. Each span is labelled
    with the record_function annotation around it (or the kernel / operator name), on the rank's own
    clock (timeline_of moves it to the reference rank's)."""
    windows: list[tuple[int | None, float, float]]
    if steps.size:
        windows = list(steps.rows()[:MAX_TIMELINE_STEPS])
    else:
        every = np.concatenate([a for start, end, _ in pieces.values() for a in (start, end)])
        windows = [(None, float(every.min()), float(every.max()))] if every.size else []
    kinds = tuple(pieces)
    col = _all_steps(pieces, steps) if steps.size else None
    if col is None:
        col = _step_by_step(pieces, windows)
    # Only the labels the spans use travel with them (a trace labels thousands of kernels).
    used, code = np.unique(col["label"].astype(np.int64), return_inverse=True)
    return TimelineColumns(
        step=col["step"].astype(np.int64),
        start_us=col["start"].astype(np.float64),
        end_us=col["end"].astype(np.float64),
        kind=col["kind"].astype(np.int8),
        label=code.reshape(-1).astype(np.int32),
        kinds=kinds,
        labels=tuple(labels[i] for i in used.tolist()),
        stepped=bool(steps.size),
    )


def _step_by_step(
    pieces: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]], windows: list[tuple[int | None, float, float]]
) -> dict[str, np.ndarray]:
    """The spans, one window and kind after the other."""
    cols: dict[str, list[np.ndarray]] = {k: [] for k in ("step", "start", "end", "kind", "label")}
    for step, lo, hi in windows:
        for k, (start, end, label) in enumerate(pieces.values()):
            s, e = np.clip(start, lo, hi), np.clip(end, lo, hi)
            keep = e > s
            if not keep.any():
                continue
            s, e, lab = s[keep], e[keep], label[keep]
            first, ends, longest = coarsen(s, e, max_spans=MAX_SPANS_PER_STEP, gap=(hi - lo) * TIMELINE_GAP_FRACTION)
            cols["step"].append(np.full(first.size, -1 if step is None else step, dtype=np.int64))
            cols["start"].append(s[first])
            cols["end"].append(ends)
            cols["kind"].append(np.full(first.size, k, dtype=np.int8))
            cols["label"].append(lab[longest])
    return {k: np.concatenate(v) if v else np.zeros(0) for k, v in cols.items()}


def _all_steps(pieces: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]], steps: StepTable) -> dict[str, np.ndarray] | None:
    """`_step_by_step` over the step windows, for all steps of a kind at once: the same spans, to
    the bit. None (do it step by step) when the windows are not in order and disjoint (a running
    maximum over all steps is then not each step's own) or when a step has more spans than fit
    (the largest gaps are kept per step)."""
    num = steps.num[:MAX_TIMELINE_STEPS].astype(np.int64)
    lo = steps.start_us[:MAX_TIMELINE_STEPS].astype(np.float64)
    hi = steps.end_us[:MAX_TIMELINE_STEPS].astype(np.float64)
    if not (hi >= lo).all() or not (lo[1:] >= hi[:-1]).all():
        return None
    gap = (hi - lo) * TIMELINE_GAP_FRACTION
    out: list[tuple[np.ndarray, ...]] = []  # per kind: window, start, end, kind, label of its spans
    for k, (start, end, label) in enumerate(pieces.values()):
        start, end = np.asarray(start, dtype=np.float64), np.asarray(end, dtype=np.float64)
        # The windows a piece can touch: from the first ending after its start to the last
        # starting before its end; each (window, piece) pair in window order, then the piece's.
        w_from = hi.searchsorted(start, side="right")
        w_to = np.maximum(lo.searchsorted(end, side="left"), w_from)
        n = w_to - w_from
        piece = np.repeat(np.arange(start.size), n)
        w = np.repeat(w_from, n) + (np.arange(piece.size) - np.repeat(n.cumsum() - n, n))
        by_window = w.argsort(kind="stable")
        piece, w = piece[by_window], w[by_window]
        s, e = np.clip(start[piece], lo[w], hi[w]), np.clip(end[piece], lo[w], hi[w])
        keep = e > s
        s, e, w, lab = s[keep], e[keep], w[keep], label[piece[keep]]
        if not s.size:
            continue
        order = np.lexsort((s, w))  # each window's pieces by start (stable, as argsort per window)
        s, e, w = s[order], e[order], w[order]
        reach = np.maximum.accumulate(e)  # each window's own: the earlier windows end before it starts
        new = np.empty(s.size, dtype=bool)
        new[0] = True
        new[1:] = (w[1:] != w[:-1]) | (s[1:] > reach[:-1] + gap[w[1:]])
        group = new.cumsum() - 1
        first = new.nonzero()[0]
        if np.bincount(w[first], minlength=lo.size).max() > MAX_SPANS_PER_STEP:
            return None
        longest = np.lexsort((-(e - s), group))[first]
        out.append((w[first], s[first], np.maximum.reduceat(e, first), np.full(first.size, k, dtype=np.int8), lab[order][longest]))
    if not out:
        return {k: np.zeros(0) for k in ("step", "start", "end", "kind", "label")}
    w, start, end, kind, label = (np.concatenate(c) for c in zip(*out))
    in_order = np.lexsort((kind, w))  # window by window, a kind after the other, each in time order
    return {"step": num[w[in_order]], "start": start[in_order], "end": end[in_order], "kind": kind[in_order], "label": label[in_order]}
