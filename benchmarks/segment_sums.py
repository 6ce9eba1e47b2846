"""Per-segment sums that equal numpy's np.sum of each segment to the bit, computed for all segments
at once: the piece that analysing many ranks (or steps) in one batch needs, so that each rank's
numbers stay byte-identical to analysing it alone (benchmarks/README.md, issue 38's "Fifteenth look").

    python benchmarks/segment_sums.py            # exactness on random segments, then timings

np.sum of a contiguous float64 array is numpy's pairwise sum (numpy/_core/src/umath/loops_utils.h.src,
`pairwise_sum`), started from 0.0 (the identity), not from the first element:

- n < 8: 0.0 + a[0] + a[1] + ... in order;
- 8 <= n <= 128: eight running sums r[j] = a[j] + a[j+8] + a[j+16] + ... over the largest multiple of
  8, combined as ((r0+r1)+(r2+r3)) + ((r4+r5)+(r6+r7)), then the remaining n % 8 added in order;
- n > 128: the sum of the first n2 = n//2 - (n//2 % 8) elements plus the sum of the rest, each the
  same way.

`np.add.reduceat` is not this (it starts from the segment's first element and adds the rest's
pairwise sum), nor is a cumulative sum less each segment's start. `segment_sums` follows the three
cases for every segment at once: a few dozen numpy calls in all, however many segments.
"""

from __future__ import annotations

import statistics
import sys
import time

import numpy as np

_LANES = np.arange(8)


def segment_sums(values: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """np.sum of each consecutive segment of `values` (float64), `lengths[k]` elements in segment k."""
    lengths = np.asarray(lengths, dtype=np.int64)
    starts = np.zeros(lengths.size, dtype=np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    return _pairwise(np.asarray(values, dtype=np.float64), starts, lengths)


def _pairwise(values: np.ndarray, lo: np.ndarray, n: np.ndarray) -> np.ndarray:
    out = np.zeros(n.size)
    short = np.flatnonzero(n < 8)
    if short.size:
        # Longest first: the segments still adding at step j are a prefix (a view, no mask).
        short = short[np.argsort(-n[short], kind="stable")]
        at, count = lo[short], n[short]
        total = np.zeros(at.size)  # 0.0 first, as numpy's loop: 0.0 + -0.0 is 0.0
        adding = np.searchsorted(-count, -np.arange(int(count[0])), side="left")  # how many have count > j
        for j, k in enumerate(adding.tolist()):
            total[:k] += values[at[:k] + j]
        out[short] = total
    block = np.flatnonzero((n >= 8) & (n <= 128))
    if block.size:
        at, count = lo[block], n[block]
        whole = count - count % 8
        order = np.argsort(-whole, kind="stable")
        at, count, whole, block = at[order], count[order], whole[order], block[order]
        lanes = values[at[:, None] + _LANES]
        # Rows still adding at offset i (whole > i), longest first: a prefix.
        adding = np.searchsorted(-whole, -np.arange(8, int(whole[0]), 8), side="left")  # how many have whole > i
        for i, k in zip(range(8, int(whole[0]), 8), adding.tolist()):
            lanes[:k] += values[at[:k, None] + i + _LANES]
        total = ((lanes[:, 0] + lanes[:, 1]) + (lanes[:, 2] + lanes[:, 3])) + ((lanes[:, 4] + lanes[:, 5]) + (lanes[:, 6] + lanes[:, 7]))
        rest = count % 8
        for j in range(int(rest.max())):
            more = rest > j
            total[more] += values[at[more] + whole[more] + j]
        out[block] = total
    long = n > 128
    if long.any():
        at, count = lo[long], n[long]
        half = count // 2
        half -= half % 8
        out[long] = _pairwise(values, at, half) + _pairwise(values, at + half, count - half)
    return out


def _reference(values: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    bounds = np.concatenate([[0], np.cumsum(lengths)])
    return np.array([values[a:b].sum() for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist())])


def _values(rng: np.random.Generator, size: int) -> np.ndarray:
    """Mixed signs and magnitudes over nine decades: sums whose last bits depend on the order."""
    return rng.standard_normal(size) * 10.0 ** rng.integers(-3, 6, size)


def main() -> int:
    rng = np.random.default_rng(38)
    print("| segments | elements each | differ from np.sum | np.add.reduceat differs |")
    print("|---:|---|---:|---:|")
    failed = 0
    for count, longest in ((40_000, 300), (4_000, 3_000), (200, 20_000)):
        lengths = rng.integers(0, longest + 1, count)
        values = _values(rng, int(lengths.sum()))
        want = _reference(values, lengths)
        differ = int((segment_sums(values, lengths) != want).sum())
        nonempty = lengths > 0
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])[nonempty]
        reduceat = int((np.add.reduceat(values, starts) != want[nonempty]).sum()) if starts.size else 0
        print(f"| {count:,} | 0 to {longest:,} | {differ} | {reduceat:,} |")
        failed += differ
    special = np.array([-0.0, -0.0, np.inf, 1.0, np.nan, -np.inf, np.inf, -0.0])
    lengths = np.array([1, 2, 1, 3, 1, 0])
    same = np.array_equal(segment_sums(special, lengths), _reference(special, lengths), equal_nan=True)
    same_signs = np.array_equal(np.signbit(segment_sums(special, lengths)), np.signbit(_reference(special, lengths)))
    print(f"-0.0, inf and NaN: {'the same' if same and same_signs else 'DIFFERENT'}")
    failed += not (same and same_signs)

    print()
    print("| segments | elements each | segment_sums (ms) | a loop of ndarray.sum (ms) | ratio |")
    print("|---:|---|---:|---:|---:|")
    for count, longest in ((64, 60), (1_024, 60), (1_024, 200), (65_536, 60)):
        lengths = rng.integers(1, longest + 1, count)
        values = _values(rng, int(lengths.sum()))
        runs = max(3, 2_000 // count)
        ours, loop = [], []
        for _ in range(7):
            t = time.perf_counter()
            for _ in range(runs):
                segment_sums(values, lengths)
            ours.append((time.perf_counter() - t) / runs)
            t = time.perf_counter()
            for _ in range(runs):
                _reference(values, lengths)
            loop.append((time.perf_counter() - t) / runs)
        a, b = statistics.median(ours), statistics.median(loop)
        print(f"| {count:,} | 1 to {longest} | {1e3 * a:.2f} | {1e3 * b:.2f} | {b / a:.1f}x |")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
