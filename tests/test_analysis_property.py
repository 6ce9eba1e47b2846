"""Random kernels on several streams against a brute-force reference on a 1 µs grid."""

import tempfile
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from synthetic import gpu_trace, write_trace

from profile_overlap.analysis.rank.per_rank import analyze_rank
from profile_overlap.core import intervals as iv

HORIZON = 120


def kernels(max_size):
    # (stream, start, end) with integer times, so a 1 µs grid is an exact reference.
    return st.lists(
        st.tuples(st.integers(1, 4), st.integers(0, HORIZON - 1), st.integers(1, 40)).map(
            lambda t: (t[0], t[1], min(HORIZON, t[1] + t[2]))
        ),
        max_size=max_size,
    )


def covered(items, lo=0, hi=HORIZON):
    grid = np.zeros(HORIZON, bool)
    for _, s, e in items:
        grid[max(s, lo) : min(e, hi)] = True
    return grid


def device_windows(items, steps):
    """Each step's window on the device: from the first start to the last end of the kernels
    launched (here: as they start) inside its range, starting no earlier than the previous
    window's end; empty at the range's start when it launched none (memcpy does not count)."""
    out, prev = [], -1
    for n, lo, hi in steps:
        mine = [(s, e) for _, s, e in items if lo <= s < hi]
        first, last = (min(s for s, _ in mine), max(e for _, e in mine)) if mine else (lo, lo)
        start = max(first, prev)
        prev = max(last, start)
        out.append((n, start, prev))
    return out


@settings(max_examples=60, deadline=None)
@given(comm=kernels(8), compute=kernels(12), memcpy=kernels(4), split=st.integers(1, HORIZON - 1))
def test_metrics_match_brute_force(comm, compute, memcpy, split):
    steps = [(1, 0, split), (2, split, HORIZON)]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rank0.json"
        write_trace(gpu_trace(comm, compute, memcpy=memcpy, steps=steps), path)
        if not comm and not compute:
            return  # no kernels at all: a CPU trace without gloo, rejected (tested in the CLI tests)
        r = analyze_rank([path])
    c, k = covered(comm), covered(compute)
    assert r.comm_us == c.sum()
    assert r.compute_us == k.sum()
    assert r.overlap_us == (c & k).sum()
    assert r.exposed_comm_us == (c & ~k).sum()
    assert r.overlap_pct == (100 * (c & k).sum() / c.sum() if c.sum() else None)
    for step, (n, lo, hi) in zip(r.steps, device_windows(comm + compute, steps)):
        assert step.step == n and step.start_us == lo and step.step_us == hi - lo
        assert step.comm_us == c[lo:hi].sum()
        assert step.overlap_us == (c[lo:hi] & k[lo:hi]).sum()


@settings(max_examples=200, deadline=None)
@given(a=kernels(10), b=kernels(10), lo=st.integers(0, HORIZON), width=st.integers(0, HORIZON))
def test_interval_algebra_matches_grid(a, b, lo, width):
    ua = iv.union([s for _, s, _ in a], [e for _, _, e in a])
    ub = iv.union([s for _, s, _ in b], [e for _, _, e in b])
    ga, gb = covered(a), covered(b)
    assert iv.length(ua) == ga.sum()
    assert iv.intersection_length(ua, ub) == (ga & gb).sum()
    assert iv.length(iv.difference(ua, ub)) == (ga & ~gb).sum()
    hi = min(HORIZON, lo + width)
    assert iv.length(iv.clip(ua, lo, hi)) == ga[lo:hi].sum()
    # A union is sorted, disjoint and non-touching.
    s, e = ua
    assert np.all(e > s) and np.all(s[1:] > e[:-1])
