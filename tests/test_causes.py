"""Why communication is exposed: wait vs transfer, per call, slack, stragglers and the critical
path on synthetic traces whose answer is known by construction (tests/causes_traces.py)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from causes_traces import Call, RankPlan, step_windows, truth, write_plans
from hypothesis import given, settings
from hypothesis import strategies as st

from profile_overlap.analysis.folder import analyze_dir
from profile_overlap.analysis.record import to_json
from profile_overlap.render.exposed import straggler_sentence

# Two ranks, one step [0, 400): rank 1's backward computes 50 µs longer, so rank 0 waits 50 µs
# at the all_reduce; then both transfer for 50 µs with nothing to compute beside it.
#            0        100      150      200      300       400
# rank 0     compute..........|wait····|xfer|compute.|
# rank 1     compute...................|xfer|compute.|
# phases (both ranks): forward 0-50, backward 50-160 (the calls start inside it), optimizer 200-400.
LATE = [
    RankPlan(
        compute=[(0, 100), (200, 300)],
        calls=[Call("all_reduce", issue=90, start=100, end=200, nbytes=1 << 20)],
        steps=[(1, 0, 400)],
        phases=[("forward", 0, 50), ("backward", 50, 160), ("optimizer", 200, 400)],
    ),
    RankPlan(
        compute=[(0, 150), (200, 300)],
        calls=[Call("all_reduce", issue=140, start=150, end=200, nbytes=1 << 20)],
        steps=[(1, 0, 400)],
        phases=[("forward", 0, 50), ("backward", 50, 160), ("optimizer", 200, 400)],
    ),
]


def analyse(plans, style="gpu", **kwargs):
    with tempfile.TemporaryDirectory() as tmp:
        return analyze_dir(write_plans(plans, Path(tmp) / "traces", style=style, **kwargs), max_workers=1)


@pytest.mark.parametrize("style", ["gpu", "cpu"])
def test_a_late_rank_makes_its_peer_wait_and_the_rest_is_transfer(style):
    e = analyse(LATE, style).exposed
    assert (e.ranks[0].exposed_us, e.ranks[0].wait_us, e.ranks[0].transfer_us) == (100, 50, 50)
    assert (e.ranks[1].exposed_us, e.ranks[1].wait_us, e.ranks[1].transfer_us) == (50, 0, 50)
    (top,) = e.top
    assert (top.kind, top.phase, top.call, top.bytes) == ("all_reduce", "backward", 0, 1 << 20)
    assert (top.exposed_us, top.wait_us, top.transfer_us, top.late_rank) == (150, 50, 100, 1)


def test_slack_runs_from_the_issue_to_the_first_wait_and_sets_the_bandwidth_that_hides_the_call():
    # Rank 0 issued at 90 and its compute stopped at 100: slack 10; rank 1: 140 -> 150, also 10.
    top = analyse(LATE).exposed.top[0]
    assert top.slack_us == 10
    # nccl-tests' busbw for an all_reduce of S bytes over n=2 in 10 µs: S / 10 µs · 2(n-1)/n.
    assert top.required_gbps == pytest.approx((1 << 20) / (10 * 1e3) * 2 * (2 - 1) / 2)


def test_a_call_waited_for_at_once_has_zero_slack_and_no_bandwidth_hides_it():
    plans = [
        RankPlan(compute=[(0, 100), (200, 300)], calls=[Call("all_reduce", 100, 100, 200)], steps=[(1, 0, 300)]),
        RankPlan(compute=[(0, 100), (200, 300)], calls=[Call("all_reduce", 100, 100, 200)], steps=[(1, 0, 300)]),
    ]
    top = analyse(plans).exposed.top[0]
    assert (top.slack_us, top.required_gbps, top.wait_us, top.transfer_us, top.late_rank) == (0, None, 0, 200, None)


def test_a_hidden_transfer_has_no_exposed_time_and_slack_to_the_step_end():
    # The all_gather runs under compute on both ranks; the reduce_scatter is exposed after it.
    plans = [
        RankPlan(
            compute=[(0, 300)],
            calls=[Call("all_gather", 10, 20, 120, stream=21), Call("reduce_scatter", 300, 300, 350)],
            steps=[(1, 0, 400)],
        )
        for _ in range(2)
    ]
    e = analyse(plans).exposed
    assert [(c.kind, c.exposed_us) for c in e.top] == [("reduce_scatter", 100)]
    assert e.ranks[0].exposed_us == 50


def test_calls_on_two_streams_split_exposed_time_without_counting_it_twice():
    # Two calls in flight at once on streams 20 and 21; rank 1 starts the second late.
    first = Call("all_reduce", 90, 100, 200, 20)
    plans = [
        RankPlan(compute=[(0, 100)], calls=[first, Call("all_gather", 95, 120, 220, 21)], steps=[(1, 0, 300)]),
        RankPlan(compute=[(0, 100)], calls=[first, Call("all_gather", 150, 160, 220, 21)], steps=[(1, 0, 300)]),
    ]
    got = analyse(plans).exposed
    want = truth(plans)
    for rank in (0, 1):
        assert got.ranks[rank].exposed_us == want.exposed[rank] == 120
        assert got.ranks[rank].wait_us == want.wait[rank]
        assert got.ranks[rank].transfer_us == want.transfer[rank]
    assert want.wait[0] == 40 and want.wait[1] == 0  # rank 0 waits for rank 1 to start the all_gather at 160


@pytest.mark.parametrize("style", ["gpu", "cpu"])
def test_the_late_rank_is_named_with_what_it_did_longer_before_the_call(style):
    # CPU: each rank's c10d op (1 µs, not compute) sits in its backward window: the two cancel.
    (s,) = analyse(LATE, style).exposed.stragglers
    # Rank 1's window before the all_reduce [0, 150) against rank 0's [0, 100): 50 µs more backward compute.
    assert (s.rank, s.phase, s.what) == (1, "backward", "compute")
    assert s.extra_ms == pytest.approx(50 / 1e3)
    assert s.extra_pct == pytest.approx(100 * 50 / 50)  # rank 0's backward in its window: 50 µs


def test_a_rank_idle_before_the_call_is_named_idle():
    plans = [RankPlan(compute=list(p.compute), calls=list(p.calls), steps=p.steps, phases=p.phases) for p in LATE]
    plans[1].compute = [(0, 100), (200, 300)]  # rank 1 now sleeps in backward from 100 to 150
    (s,) = analyse(plans).exposed.stragglers
    assert (s.rank, s.phase, s.what) == (1, "backward", "idle")
    assert s.extra_ms == pytest.approx(50 / 1e3)


def test_the_critical_path_waits_where_the_last_rank_to_finish_waited():
    path = analyse(LATE).exposed.critical_path
    # From 300, the step's end on the device (its last kernel's: the CPU's ProfilerStep range runs
    # on to 400), back on rank 0 (both end the call at 200: the lower rank): compute 100,
    # transfer 50, wait 50, compute 100.
    assert path.length_us == 300
    assert (path.compute_pct, path.transfer_pct, path.wait_pct) == pytest.approx((100 * 200 / 300, 100 * 50 / 300, 100 * 50 / 300))
    assert path.ranks == (0,)


def test_the_critical_path_moves_to_the_rank_whose_transfer_ends_last():
    plans = [RankPlan(compute=list(p.compute), calls=list(p.calls), steps=p.steps, phases=p.phases) for p in LATE]
    plans[1].calls = [Call("all_reduce", issue=140, start=150, end=210, nbytes=1 << 20)]
    plans[1].compute = [(0, 150), (210, 300)]
    path = analyse(plans).exposed.critical_path
    # Rank 0 from 300 (the step's end on the device): compute 100; at 200 its compute waited for
    # the call, which ends on rank 1 at 210: rank 1's transfer 150-200, then its compute 0-150.
    assert path.length_us == 300
    assert (path.compute_pct, path.transfer_pct, path.wait_pct) == pytest.approx((100 * 250 / 300, 100 * 50 / 300, 0))
    assert path.ranks == (1, 0)


def test_one_rank_gives_exposed_time_and_a_warning_instead_of_wait_and_transfer():
    a = analyse(LATE[:1])
    e = a.exposed
    assert (e.ranks[0].exposed_us, e.ranks[0].wait_us, e.ranks[0].transfer_us) == (100, None, None)
    assert e.top[0].wait_us is None and e.critical_path is None and e.stragglers == ()
    (check,) = [c for c in a.integrity.checks if c.name == "causes.inputs"]
    assert check.status == "warning" and "one rank only" in check.detail


def test_without_launch_events_slack_is_unknown_and_said_so():
    a = analyse(LATE, launches=False)
    top = a.exposed.top[0]
    assert (top.slack_us, top.required_gbps, top.wait_us) == (None, None, 50)
    (check,) = [c for c in a.integrity.checks if c.name == "causes.inputs"]
    assert "issue time" in check.detail


def test_without_step_windows_the_critical_path_is_left_out_and_said_so():
    plans = [RankPlan(compute=p.compute, calls=p.calls, phases=p.phases) for p in LATE]
    a = analyse(plans)
    e = a.exposed
    assert e.critical_path is None and e.top[0].slack_us is None
    assert (e.ranks[0].wait_us, e.ranks[0].transfer_us) == (50, 50)
    (check,) = [c for c in a.integrity.checks if c.name == "causes.inputs"]
    assert "no ProfilerStep windows" in check.detail


def test_analyze_json_has_the_exposed_record_in_the_issue_s_shape():
    record = to_json(analyse(LATE))["exposed"]
    assert set(record) == {"ranks", "top", "stragglers", "critical_path"}
    assert record["ranks"]["0"] == {"exposed_us": 100.0, "wait_us": 50.0, "transfer_us": 50.0}
    row = {"kind", "phase", "call", "bytes", "exposed_us", "wait_us", "transfer_us", "slack_us", "required_gbps", "late_rank"}
    assert set(record["top"][0]) == row
    assert set(record["stragglers"][0]) == {"rank", "phase", "extra_ms", "extra_pct", "what"}
    assert set(record["critical_path"]) == {"length_us", "compute_pct", "transfer_pct", "wait_pct", "ranks"}


HORIZON = 400


@st.composite
def plans(draw):
    """2-3 ranks; call j starts on each rank somewhere in [40j, 40j+30) and ends on all ranks at
    one time (a collective ends together everywhere); random compute; one or two steps."""
    num_ranks = draw(st.integers(2, 3))
    num_calls = draw(st.integers(1, 8))
    kinds = draw(st.lists(st.sampled_from(["all_reduce", "reduce_scatter", "all_gather"]), min_size=num_calls, max_size=num_calls))
    ends = [40 * j + draw(st.integers(31, 70)) for j in range(num_calls)]
    split = draw(st.integers(1, HORIZON - 1))
    steps = draw(st.sampled_from([[(1, 0, HORIZON)], [(1, 0, split), (2, split, HORIZON)]]))
    out = []
    for _ in range(num_ranks):
        calls = []
        for j, kind in enumerate(kinds):
            start = 40 * j + draw(st.integers(0, 29))
            issue = 40 * j + draw(st.integers(0, start - 40 * j))
            calls.append(Call(kind, issue, start, ends[j], stream=20 + j % 2))
        compute = [(s, s + w) for s, w in draw(st.lists(st.tuples(st.integers(0, HORIZON - 1), st.integers(1, 60)), max_size=10))]
        out.append(RankPlan(compute=compute, calls=calls, steps=steps))
    return out


def check_against_truth(ps, style):
    a = analyse(ps, style)
    want = truth(ps, style=style)
    for split in a.causes.splits:
        r = split.rank
        got = a.exposed.ranks[r]
        assert (got.exposed_us, got.wait_us, got.transfer_us) == (want.exposed[r], want.wait[r], want.transfer[r])
        assert split.call_wait_us.tolist() == want.call_wait[r]
        assert split.call_transfer_us.tolist() == want.call_transfer[r]
    assert sum(c.exposed_us for c in a.exposed.top) <= sum(want.exposed.values())
    # A call ends together everywhere: the path runs from a step's latest end over the ranks back
    # to one rank's start of that step (on CPU every rank has the same windows: one whole step),
    # split into shares that add up to at most 100%.
    path = a.exposed.critical_path
    windows = [step_windows(p, style) for p in ps]
    ends = {n: max(hi for w in windows for m, _, hi in w if m == n) for n, _, _ in ps[0].steps}
    if path is None:  # GPU: the median step launched no kernel on any rank, its window is empty
        assert style == "gpu" and any(all(hi == lo for w in windows for m, lo, hi in w if m == n) for n in ends)
        return
    assert path.length_us in {ends[n] - lo for w in windows for n, lo, _ in w}
    assert 0 <= path.compute_pct + path.transfer_pct + path.wait_pct <= 100 + 1e-9


@settings(max_examples=40, deadline=None)
@given(ps=plans())
def test_gpu_wait_and_transfer_match_the_grid(ps):
    check_against_truth(ps, "gpu")


def test_the_critical_path_does_not_move_to_a_peer_whose_call_ends_past_its_step_window():
    """Found by the test above: rank 0 launches its third call at its step 2's start (81), rank 1
    inside step 1 (80). Both end it at 111: rank 1's step 1 ends there, rank 0's at 82. The path
    of step 1 starts on rank 1 at 111 and must stay there, not jump to rank 0 past its window."""

    def plan(third: int) -> RankPlan:
        starts = [0, 40, third, 120, 160, 200, 240]
        ends = [31, 82, 111, 151, 191, 231, 271]
        calls = [Call("all_reduce", issue=s, start=s, end=e, stream=20 + k % 2) for k, (s, e) in enumerate(zip(starts, ends))]
        return RankPlan(compute=[], calls=calls, steps=[(1, 0, 81), (2, 81, 400)])

    check_against_truth([plan(81), plan(80)], "gpu")


def test_the_critical_path_starts_on_a_rank_that_has_some_of_the_median_step():
    """Found by the grid test: on GPU, rank 0 launches its only call in step 1 and rank 1 in step 2,
    so each has one empty step window. Step 2 is the median; its path starts on rank 1 (not on rank
    0, whose empty window ends as late) and covers rank 1's 30 us of it."""
    plans = [RankPlan(compute=[], calls=[Call("all_reduce", issue=t, start=t, end=31)], steps=[(1, 0, 1), (2, 1, 400)]) for t in (0, 1)]
    check_against_truth(plans, "gpu")
    assert analyse(plans, "gpu").exposed.critical_path.ranks == (1,)


@settings(max_examples=40, deadline=None)
@given(ps=plans())
def test_cpu_wait_and_transfer_match_the_grid(ps):
    check_against_truth(ps, "cpu")


def test_the_grid_truth_itself_splits_every_exposed_instant_once():
    want = truth(LATE)
    assert [sum(want.call_wait[r]) + sum(want.call_transfer[r]) for r in (0, 1)] == [want.exposed[0], want.exposed[1]]
    assert np.array_equal([want.wait[0], want.transfer[0]], [50, 50])


@pytest.mark.parametrize("folder", ["gloo_2rank", "hta_trace_filter_2rank", "kineto_synthetic_2rank", "hta_nccl_parser_config_1rank"])
def test_real_traces_split_exactly_their_exposed_communication(folder):
    from conftest import DATA

    a = analyze_dir(DATA / folder, max_workers=1)
    for r in a.ranks:
        row = a.exposed.ranks[r.rank]
        assert row.exposed_us == pytest.approx(r.exposed_comm_us)
        if row.wait_us is not None:
            assert row.wait_us + row.transfer_us == pytest.approx(row.exposed_us) and row.wait_us >= 0 and row.transfer_us >= 0
    total = sum(c.exposed_us for c in a.exposed.top)
    assert total <= a.exposed.exposed_us * (1 + 1e-9)


def test_a_job_cycle_gets_wait_and_transfer_scalars_on_its_global_step(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from profile_overlap.api.events import RankEvents, exposed_scalars

    points = exposed_scalars(analyse(LATE).exposed, num_steps=1, step=40)
    # Rank mean per profiled step: wait (50 + 0) / 2 ranks, transfer (50 + 50) / 2, in ms.
    assert points == [("exposed/wait_ms", 0.025, 40), ("exposed/transfer_ms", 0.05, 40)]
    events = RankEvents(tmp_path / "rank0")
    assert events.append_points(points) == 2
    events.close()
    acc = EventAccumulator(str(tmp_path / "rank0"))
    acc.Reload()
    assert [(e.step, round(e.value, 6)) for e in acc.Scalars("exposed/wait_ms")] == [(40, 0.025)]
    assert exposed_scalars(analyse(LATE[:1]).exposed, num_steps=1, step=40) == []  # one rank: no split


def test_the_top_calls_group_codes_as_np_unique_would():
    from profile_overlap.analysis.world.causes import _unique

    rng = np.random.default_rng(3)
    for bound, size in ((10, 1000), (5000, 100), (1, 5), (64, 0)):
        key = rng.integers(0, bound, size)
        codes, inverse = _unique(key, bound)
        want_codes, want_inverse = np.unique(key, return_inverse=True)
        assert np.array_equal(codes, want_codes) and np.array_equal(inverse, want_inverse.reshape(-1))
        assert codes.dtype == want_codes.dtype and inverse.dtype == want_inverse.dtype


def test_the_straggler_sentence_says_what_its_percent_is_of():
    # Rank 1 sleeps 50 µs longer in backward, where rank 0 did not idle at all: the percent is of
    # rank 0's whole backward in its window (50 µs), which the sentence names.
    plans = [RankPlan(compute=list(p.compute), calls=list(p.calls), steps=p.steps, phases=p.phases) for p in LATE]
    plans[1].compute = [(0, 100), (200, 300)]
    (s,) = analyse(plans).exposed.stragglers
    assert s.extra_pct == pytest.approx(100 * 50 / 50)
    assert straggler_sentence(s).endswith("ran 0.05 ms longer per step than its peers' median (+100.0% of the peers' time in backward)")
