"""The causes of exposed communication on our own modes, run for real (torchrun, 2 ranks, gloo):
they come out as each schedule dictates, and a planted slow rank is found with its cause."""

from __future__ import annotations

import pytest

from profile_overlap.record.folder import load_run

from conftest import COMPARE, clean_env, only_run_dir, torchrun

SLOW_MS = 60.0


def exposed_of(run_dir, mode):
    exposed = load_run(run_dir).metrics.modes[mode].exposed
    assert exposed is not None
    return exposed


@pytest.mark.slow
def test_split_blocking_waits_at_once_for_everything_it_exposes(compare_run_2):
    exposed = exposed_of(compare_run_2, "split-blocking")
    assert exposed.top and all(c.slack_us == 0 and c.required_gbps is None for c in exposed.top)


@pytest.mark.slow
def test_sequential_all_reduces_are_waited_for_at_once(compare_run_2):
    calls = [c for c in exposed_of(compare_run_2, "sequential").top if c.kind == "all_reduce"]
    assert calls and all(c.slack_us == 0 for c in calls)


@pytest.mark.slow
def test_split_reduce_scatters_issued_under_backward_have_slack(compare_run_2):
    calls = sorted((c for c in exposed_of(compare_run_2, "split").top if c.kind == "reduce_scatter"), key=lambda c: c.call)
    assert calls and all(c.phase == "backward" for c in calls)
    # Every reduce_scatter but the last is issued while backward still has layers to compute; the
    # last one (unit 0's gradients, at the end of backward) is the first the optimizer waits for.
    last = max(c.call for c in calls)
    early = [c for c in calls if c.call < last]
    assert early and all(c.slack_us > 0 and c.required_gbps > 0 for c in early)


@pytest.mark.slow
def test_a_planted_slow_rank_is_named_late_with_backward_as_its_cause(tmp_path):
    env = clean_env(PROFILE_OVERLAP_FAULT=f"slow:rank=1:ms={SLOW_MS:g}")
    proc = torchrun(["--mode", "compare", "--out", str(tmp_path), *COMPARE], nproc=2, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run_dir = only_run_dir(tmp_path)
    for mode in ("sequential", "split", "split-blocking"):
        exposed = exposed_of(run_dir, mode)
        first = exposed.stragglers[0]
        assert (first.rank, first.phase) == (1, "backward"), (mode, exposed.stragglers)
        # The planted delay is found, once: load on a shared machine moves it, mostly up (73.7 ms for 60 planted, seen
        # in a fresh-clone CI run), so the bound above is loose and the one below tight.
        assert 0.8 * SLOW_MS <= first.extra_ms <= 2 * SLOW_MS, (mode, first)
        assert exposed.top[0].late_rank == 1, (mode, exposed.top[0])
        assert exposed.ranks[0].wait_us > exposed.ranks[1].wait_us  # rank 0 is the one kept waiting


def test_the_slow_fault_needs_a_duration(monkeypatch):
    from profile_overlap.run.pipelines import Fault

    monkeypatch.setenv("PROFILE_OVERLAP_FAULT", "slow:rank=1")
    with pytest.raises(ValueError, match="ms=M"):
        Fault.from_env()
    monkeypatch.setenv("PROFILE_OVERLAP_FAULT", "slow:rank=1:ms=25")
    assert Fault.from_env().ms == 25
