"""The per-call columns of rank_times (analysis/rank/rank_times.py) against the definitions, call by call."""

from __future__ import annotations

import math

import numpy as np

from profile_overlap.analysis.rank.rank_times import COVER_BLOCK, _index_in_step, covered_length, cumulative, first_wait
from profile_overlap.core import intervals as iv


def test_each_call_is_numbered_among_its_steps_calls_of_its_kind_and_phase_in_time_order():
    rng = np.random.default_rng(3)
    for n in (0, 1, 7, 300, 3000):
        step = rng.integers(-1, 5, n).astype(np.int64)
        kinds = tuple(rng.choice(["all_reduce", "all_gather", "reduce_scatter"], n).tolist())
        phases = tuple(rng.choice(["forward", "backward", "other"], n).tolist())
        kind_names, phase_names = ("all_gather", "reduce_scatter", "all_reduce"), ("other", "forward", "backward")
        kind = np.array([kind_names.index(k) for k in kinds], dtype=np.int32)
        phase = np.array([phase_names.index(p) for p in phases], dtype=np.int64)
        code, pairs, index = _index_in_step(step, kind, kind_names, phase, phase_names)
        # The codes number the (kind, phase) pairs in the order the calls first meet them.
        assert pairs == tuple(dict.fromkeys(zip(kinds, phases)))
        seen: dict[tuple[int, str, str], int] = {}
        for i in range(n):
            assert pairs[code[i]] == (kinds[i], phases[i])
            if step[i] < 0:
                assert index[i] == -1
                continue
            key = (int(step[i]), kinds[i], phases[i])
            assert index[i] == seen.get(key, 0), i
            seen[key] = seen.get(key, 0) + 1


def test_first_wait_is_the_end_of_the_last_compute_before_a_gap_that_ends_at_the_time():
    rng = np.random.default_rng(5)
    for n in (1, 10, 500):
        starts = np.sort(rng.random(n) * 100)
        compute = iv.union(starts, starts + rng.random(n))
        t = np.concatenate([rng.random(200) * 110 - 5, compute[1][:20], compute[0][:20]])
        got = first_wait(compute, t)
        for x, g in zip(t.tolist(), got.tolist()):
            before = [(s, e) for s, e in zip(*(c.tolist() for c in compute)) if s < x]
            if not before:
                assert g == -math.inf
            elif before[-1][1] >= x:
                assert math.isnan(g)  # compute runs up to the time: nothing waited
            else:
                assert g == before[-1][1]
    assert first_wait(iv.EMPTY, np.array([1.0])).tolist() == [-math.inf]


def test_covered_length_is_the_length_of_each_window_in_the_union():
    rng = np.random.default_rng(9)
    starts = np.sort(rng.random(300) * 1000)
    u = iv.union(starts, starts + rng.random(300) * 5)
    lo = rng.random(400) * 1100 - 50
    hi = lo + rng.random(400) * 40 - 5  # some windows empty (hi <= lo)
    got = covered_length(u, lo, hi)
    for a, b, g in zip(lo.tolist(), hi.tolist(), got.tolist()):
        want = iv.length(iv.intersect(u, iv.union(np.array([a]), np.array([b])))) if b > a else 0.0
        assert math.isclose(g, want, rel_tol=1e-12, abs_tol=1e-9), (a, b)
    assert covered_length(iv.EMPTY, lo, hi).tolist() == [0.0] * lo.size


def test_covered_length_in_blocks_is_the_whole_at_once_to_the_bit():
    # More pairs than one block: the blocks' figures are those of one pass over every pair.
    rng = np.random.default_rng(13)
    starts = np.sort(rng.random(50_000) * 1e6)
    u = iv.union(starts, starts + rng.random(50_000) * 30)
    lo = rng.random(3 * COVER_BLOCK + 17) * 1e6
    hi = lo + rng.random(lo.size) * 100
    whole = cumulative(u, np.maximum(hi, lo)) - cumulative(u, lo)
    np.maximum(whole, 0.0, out=whole)
    assert np.array_equal(covered_length(u, lo, hi), whole)


def test_a_calls_phase_is_the_first_window_holding_its_issue_else_its_hint_else_other():
    from profile_overlap.analysis.rank.rank_times import _call_phases
    from profile_overlap.core.modes import PHASES

    windows = {"forward": iv.union([0.0], [10.0]), "backward": iv.union([5.0, 20.0], [15.0, 30.0])}
    phases = tuple(windows.get(name, iv.EMPTY) for name in PHASES)
    t = np.array([1.0, 6.0, 12.0, 25.0, 40.0, 41.0, 42.0, 43.0])
    # Hints: -1 none, 0 "" (unnamed), 1 "optimizer", 2 "forward" (a hint named like a window).
    hint = np.array([1, -1, 2, 1, -1, 0, 1, 2], dtype=np.int32)
    code, names = _call_phases(t, hint, ("", "optimizer", "forward"), phases)
    assert names[: len(PHASES)] == PHASES and len(set(names)) == len(names)
    got = [names[c] for c in code.tolist()]
    assert got == ["forward", "forward", "backward", "backward", "other", "other", "optimizer", "forward"]


def test_codes_number_the_values_in_the_order_the_calls_first_meet_them():
    from profile_overlap.analysis.rank.rank_times import FEW_VALUES, _codes_in_order

    rng = np.random.default_rng(9)
    for n, size in ((0, 4), (1, 4), (500, 6), (5000, FEW_VALUES * 4)):  # the last takes np.unique's path
        value = rng.integers(0, size, n)
        code, met = _codes_in_order(value, size)
        seen: dict[int, int] = {}
        want = [seen.setdefault(v, len(seen)) for v in value.tolist()]
        assert code.tolist() == want and met == list(seen) and code.dtype == np.int64
