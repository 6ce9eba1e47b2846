"""Membership tests on integer code columns (names, threads, groups coded as indices into a table)."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np


def coded_in(codes: np.ndarray, wanted: Iterable[int], size: int) -> np.ndarray:
    """`np.isin(codes, wanted)` for codes that index a table of `size` entries: a lookup in a
    boolean table of that size (np.isin sorts, a few times slower on the short columns of a small
    trace); np.isin itself when a code lies outside [0, size)."""
    wanted = list(wanted)
    if codes.size and (int(codes.min()) < 0 or int(codes.max()) >= size):
        return np.isin(codes, wanted)
    table = np.zeros(size, dtype=bool)
    table[[w for w in wanted if 0 <= w < size]] = True
    out: np.ndarray = table[codes]
    return out
