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
from profile_overlap.analysis.world.clocks import align_clocks
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
