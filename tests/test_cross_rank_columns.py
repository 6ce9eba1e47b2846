"""The cross-rank stages work on all calls at once (issue 38): the stragglers take every waited
call's peer median in one pass, the clock alignment matches calls as columns. Their answers are
those of the per-call definitions (README Metrics, "Why exposed", "Clock alignment")."""

from __future__ import annotations

import numpy as np
import pytest
from many_ranks import planted, write

from profile_overlap.analysis.file.call_columns import Instances
from profile_overlap.analysis.folder import analyze_dir
from profile_overlap.analysis.world.causes import _call_keys
from profile_overlap.analysis.world.clocks import align_clocks, median_ci
from profile_overlap.analysis.world.stragglers import group_medians, stragglers


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """16 ranks with a late rank and a slow node planted (benchmarks/many_ranks.py), analysed."""
    folder = write(tmp_path_factory.mktemp("job"), world=16)
    return analyze_dir(folder, max_workers=1)


def test_group_medians_are_numpy_s_median_of_each_group_to_the_bit():
    rng = np.random.default_rng(38)
    sizes = rng.integers(1, 9, 300)  # odd and even groups, one row and more
    group = np.repeat(np.arange(sizes.size), sizes)
    values = rng.exponential(100.0, (group.size, 5, 4)).round(rng.integers(0, 4))  # ties too
    shuffled = rng.permutation(group.size)
    got = group_medians(values[shuffled], group[shuffled], sizes.size)
    for g in range(sizes.size):
        assert np.array_equal(got[g], np.median(values[group == g], axis=0)), g


def test_the_late_rank_is_found_without_a_median_per_waited_call(job, monkeypatch):
    late, _ = planted(16)
    ranks, splits = job.ranks, job.causes.splits
    keys = _call_keys(ranks)
    waited = sum(int(((s.call_wait_us > 0) & (s.late_rank >= 0)).sum()) for s in splits)
    assert waited > 30  # every rank waits at many calls of each step
    calls = []
    real_median = np.median
    monkeypatch.setattr(np, "median", lambda *a, **k: calls.append(1) or real_median(*a, **k))
    found = stragglers(ranks, splits, keys)
    monkeypatch.undo()
    assert calls == []
    assert found == job.exposed.stragglers
    assert found[0].rank == late and (found[0].phase, found[0].what) == ("backward", "compute")


def test_clocks_are_aligned_from_the_call_columns_without_an_object_per_call(job, monkeypatch):
    expected = align_clocks({r.rank: list(r.instances) for r in job.ranks})  # from CollectiveInstance objects

    def refused(self):
        raise AssertionError("a CollectiveInstance was built per call")

    monkeypatch.setattr(Instances, "__iter__", refused)
    got = align_clocks({r.rank: r.instances for r in job.ranks})
    assert got == expected
    assert got.offsets_us == job.clocks.offsets_us and len(got.offsets_us) == 16


def test_all_pairs_at_once_give_each_pair_s_own_estimate():
    """The clock offsets of many ranks against one are matched in one pass: each rank's estimate is
    the one it gets alone, whatever the ranks beside it (none shared, no symmetric call, a NaN end,
    fewer calls than the 95% interval needs, contradicting bounds)."""
    from profile_overlap.analysis.world.clocks import _pairs, _RankCalls

    rng = np.random.default_rng(7)

    def calls(keys, symmetric, shift=0.0):
        keys = np.sort(np.asarray(keys, dtype=np.int64))
        start = keys * 100.0 + shift + rng.normal(0, 2, keys.size)
        return _RankCalls(key=keys, start_us=start, end_us=start + 10 + rng.exponential(3, keys.size), symmetric=np.asarray(symmetric))

    a = calls(np.arange(40), np.arange(40) % 3 != 0)
    nan_end = calls(np.arange(10, 30), np.ones(20, bool), 5.0)
    nan_end.end_us[4] = np.nan
    others = [
        calls(np.arange(40), np.arange(40) % 3 != 0, 250.0),
        calls(np.arange(100, 120), np.ones(20, bool)),  # no call in common
        calls([0, 3, 6, 9, 12], np.zeros(5, bool), -40.0),  # only a's non-symmetric calls
        nan_end,
        calls([1, 2], np.ones(2, bool), 3.0),  # too few calls for the interval
        calls(np.arange(0, 40, 2), np.ones(20, bool), 1e6),
        calls(np.arange(5), np.ones(5, bool), rng.normal(0, 500, 5)),  # bounds that contradict
    ]
    together = _pairs(a, others)
    alone = [_pairs(a, [b])[0] for b in others]
    assert together[1] is None and together[0] is not None and together[2].bounds_us is None
    for got, expected in zip(together, alone):
        assert repr(got) == repr(expected)  # repr: NaN == NaN
    # The first pair by the definition: the symmetric calls' end differences, their median and its
    # order-statistics interval, moved into the causal bounds.
    b, sym = others[0], a.symmetric
    diffs = b.end_us[sym] - a.end_us[sym]
    lo, hi = float(np.max(b.start_us[sym] - a.end_us[sym])), float(np.min(b.end_us[sym] - a.start_us[sym]))
    median, _ = median_ci(diffs)
    assert together[0].matched == int(sym.sum()) and together[0].bounds_us == (lo, hi)
    assert together[0].offset_us == min(max(median, lo), hi)
