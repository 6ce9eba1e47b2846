"""Slices on one track -> lanes in which they nest properly, so a trace viewer drops none.

Perfetto (like chrome://tracing) keeps a stack per track: a slice that starts inside another and
ends after it cannot be stacked, and is dropped. gloo runs collectives concurrently on its worker
threads and some GPU streams' kernels overlap by clock rounding, so the raw tracks hold such
pairs. `assign_lanes` gives every slice the first lane of its track where it nests (lane 0 holds
everything that already nested), in start order, longest first on a tie; times are integer ns.
"""

from __future__ import annotations

import numpy as np


def assign_lanes(track: np.ndarray, start_ns: np.ndarray, dur_ns: np.ndarray, *, flat: np.ndarray | None = None) -> np.ndarray:
    """The lane of each slice (0, 1, ...) on its track: within one (track, lane) every two slices
    are disjoint or one contains the other. `flat[track]` True: slices of that track may not nest
    either (each lane holds disjoint slices), for tracks whose slices arrows point at."""
    n = track.size
    lanes = np.zeros(n, dtype=np.int32)
    if n == 0:
        return lanes
    end_ns = start_ns + np.maximum(dur_ns, 0)
    order = np.lexsort((-end_ns, start_ns, track))
    tr, st, en = track[order].tolist(), start_ns[order].tolist(), end_ns[order].tolist()
    flat_of = flat.tolist() if flat is not None else None
    out = [0] * n
    stacks: list[list[int]] = []  # per lane of the current track: the ends of the slices still open
    current = None
    is_flat = False
    for i in range(n):
        if tr[i] != current:
            current, stacks = tr[i], [[]]
            is_flat = bool(flat_of[current]) if flat_of is not None else False
        s, e = st[i], en[i]
        for lane, stack in enumerate(stacks):
            while stack and stack[-1] <= s and not (stack[-1] == s and e == s and not is_flat):
                stack.pop()
            if not stack or (not is_flat and e <= stack[-1]):
                stack.append(e)
                out[i] = lane
                break
        else:
            stacks.append([e])
            out[i] = len(stacks) - 1
    lanes[order] = out
    return lanes


def check_nesting(start_ns: np.ndarray, dur_ns: np.ndarray) -> int:
    """How many slices of one track partly overlap an earlier one (0: they all nest)."""
    end_ns = start_ns + np.maximum(dur_ns, 0)
    order = np.lexsort((-end_ns, start_ns))
    bad = 0
    stack: list[int] = []
    for s, e in zip(start_ns[order].tolist(), end_ns[order].tolist()):
        while stack and stack[-1] <= s:
            stack.pop()
        if stack and e > stack[-1]:
            bad += 1
            continue
        stack.append(e)
    return bad
