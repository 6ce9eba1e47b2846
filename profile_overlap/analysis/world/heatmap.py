"""The rank x time heatmap of the median profiled step (record/heatmap.py): per rank, on the aligned
clock, the fraction of each time bin that is wait, transfer, a call in flight and compute, read from
the geometry the causes already computed (RankTimes, RankSplit). Definitions: docs/metrics.md "Rank x time heatmap"."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from profile_overlap.analysis.rank.per_rank import RankAnalysis
from profile_overlap.analysis.rank.rank_times import RankSplit
from profile_overlap.analysis.world.clocks import ClockAlignment
from profile_overlap.core import intervals as iv
from profile_overlap.core.modes import PHASES
from profile_overlap.record.heatmap import LAYERS, Heatmap

BINS = 240
"""Time bins across the median step."""
MAX_ROWS = 1024
"""Rows at most: with more ranks, consecutive ranks share a row (bounded cells: MAX_ROWS x BINS per layer)."""
HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
"""The digit of each level 0-15, as ASCII codes: rows are built as bytes and decoded once (joining
numpy's one-letter strings took 0.2 s at 1,024 ranks)."""
DOT = ord(".")


def median_step(ranks: Sequence[RankAnalysis]) -> int | None:
    """The step whose median duration over ranks is the median over steps (the lower one of an even count)."""
    durations: dict[int, list[float]] = defaultdict(list)
    for r in ranks:
        for s in r.steps:
            durations[s.step].append(s.step_us)
    if not durations:
        return None
    by_median = sorted(durations, key=lambda n: (float(np.median(durations[n])), n))
    return by_median[(len(by_median) - 1) // 2]


def covered(u: iv.Union, edges: np.ndarray) -> np.ndarray:
    """The fraction of each bin [edges[i], edges[i+1]) the union covers."""
    s, e = u
    if s.size == 0:
        return np.zeros(edges.size - 1)
    cum = np.concatenate([[0.0], np.cumsum(e - s)])
    k = np.searchsorted(s, edges, side="right")  # intervals started by each edge
    before = cum[k] - np.where(k > 0, np.maximum(e[np.maximum(k - 1, 0)] - edges, 0.0), 0.0)
    return np.clip(np.diff(before) / np.diff(edges), 0.0, 1.0)


def covered_rows(unions: Sequence[iv.Union], edges: np.ndarray) -> np.ndarray:
    """`covered` of each union, as the rows of one (len(unions), bins) array, computed for all
    unions at once; each row's figures are `covered`'s to the bit (its lengths are summed in the
    same order, row by row, with zeros after them)."""
    n, b1 = len(unions), edges.size
    sizes = np.array([u[0].size for u in unions], dtype=np.int64)
    if n == 0 or not sizes.any():
        return np.zeros((n, b1 - 1))
    starts = np.concatenate([u[0] for u in unions])
    ends = np.concatenate([u[1] for u in unions])
    row = np.repeat(np.arange(n), sizes)
    # k[r, i]: how many of row r's intervals start at or before edges[i] (searchsorted side="right"
    # per row), counted from the first edge at or after each start.
    first_edge = np.searchsorted(edges, starts, side="left")
    # (a start after the last edge goes to an extra column, left out)
    k = np.cumsum(np.bincount(row * (b1 + 1) + first_edge, minlength=n * (b1 + 1)).reshape(n, b1 + 1)[:, :b1], axis=1)
    lengths = np.zeros((n, int(sizes.max()) + 1))
    lengths[:, 1:][np.arange(lengths.shape[1] - 1) < sizes[:, None]] = ends - starts
    cum = np.cumsum(lengths, axis=1)
    first = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    last_started = np.minimum(first[:, None] + np.maximum(k - 1, 0), ends.size - 1)
    before = np.take_along_axis(cum, k, axis=1) - np.where(k > 0, np.maximum(ends[last_started] - edges, 0.0), 0.0)
    out: np.ndarray = np.clip(np.diff(before, axis=1) / np.diff(edges), 0.0, 1.0)
    return out


def _shift(u: iv.Union, offset: float) -> iv.Union:
    return u[0] - offset, u[1] - offset


def heatmap(ranks: Sequence[RankAnalysis], splits: Sequence[RankSplit], clocks: ClockAlignment) -> Heatmap | None:
    """None without step windows, or when no rank's clock is aligned."""
    split_of = {s.rank: s for s in splits}
    shown = [r for r in ranks if r.times is not None and r.rank in clocks.offsets_us and r.rank in split_of]
    step = median_step(shown)
    if step is None:
        return None
    windows = {}
    for r in shown:
        s = next((s for s in r.steps if s.step == step), None)
        if s is not None:
            off = clocks.offset(r.rank)
            windows[r.rank] = (s.start_us - off, s.start_us + s.step_us - off)
    lo = min(a for a, _ in windows.values())
    hi = max(b for _, b in windows.values())
    if not hi > lo:
        return None
    edges = np.linspace(lo, hi, BINS + 1)
    mids = (edges[:-1] + edges[1:]) / 2
    rows: dict[str, list[iv.Union]] = {name: [] for name in LAYERS}
    phase_rows = []
    for r in shown:
        off = clocks.offset(r.rank)
        t = r.times
        assert t is not None  # `shown` keeps ranks with times
        if r.rank in windows:  # a rank without this step leaves its row empty
            a, b = windows[r.rank]
            wait = iv.clip(_shift(split_of[r.rank].wait, off), a, b)
            calls = iv.union(t.calls.start_us - off, t.calls.end_us - off)
            layers = {
                "wait": wait,
                "transfer": iv.clip(_shift(split_of[r.rank].transfer, off), a, b),
                "in_flight": iv.clip(calls, a, b),
                "compute": iv.clip(_shift(t.compute, off), a, b),
            }
            letters = np.full(BINS, DOT, dtype=np.uint8)
            for name, u in zip(PHASES, t.phases):
                letters[iv.covers(_shift(u, off), mids) & (mids >= a) & (mids < b)] = ord(name[0])
        else:
            layers = {name: iv.EMPTY for name in LAYERS}
            letters = np.full(BINS, DOT, dtype=np.uint8)
        for name in LAYERS:
            rows[name].append(layers[name])
        phase_rows.append(letters)
    per_row = -(-len(shown) // MAX_ROWS)
    first = [r.rank for r in shown][::per_row]

    def encode(layer: list[iv.Union]) -> tuple[str, ...]:
        m = covered_rows(layer, edges)
        if per_row > 1:
            pad = -len(m) % per_row
            m = np.pad(m, ((0, pad), (0, 0))).reshape(-1, per_row, BINS).max(axis=1)
        return _rows(HEX[np.rint(m * 15).astype(int)])

    return Heatmap(
        step=step,
        start_us=round(float(lo), 3),
        bin_us=round(float((hi - lo) / BINS), 3),
        bins=BINS,
        ranks_per_row=per_row,
        ranks=tuple(first),
        wait=encode(rows["wait"]),
        transfer=encode(rows["transfer"]),
        in_flight=encode(rows["in_flight"]),
        compute=encode(rows["compute"]),
        phase=_rows(np.array(phase_rows[::per_row], dtype=np.uint8).reshape(-1, BINS)),
    )


def _rows(codes: np.ndarray) -> tuple[str, ...]:
    """A (rows, BINS) array of ASCII codes as one string per row."""
    text = codes.astype(np.uint8).tobytes().decode("ascii")
    return tuple(text[i : i + BINS] for i in range(0, len(text), BINS))
