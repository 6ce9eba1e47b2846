"""The replay's knobs (advise predicts with them): DDP bucket boundaries and the first bucket's
cap, the split's wait-ahead distance, FSDP2's prefetch distance, resharding, unit groups and the
serial replay of a run whose collectives overlapped nothing. Every case is worked by hand in its comment:
F0 = 1, F1 = 2, B1 = 4, B0 = 3, Adam 0.5 per unit, no time before the forward (µs)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from profile_overlap.record.config import RunConfig
from profile_overlap.tools import whatif
from profile_overlap.tools.advise import candidates as advise_replay
from profile_overlap.tools.whatif import model

FWD, BWD, OPT = (1.0, 2.0), (3.0, 4.0), (0.5, 0.5)


def graph(mode: str, comms: list[tuple[str, str, int, float]], knobs: model.Knobs | None = None) -> model.StepGraph:
    return model.StepGraph(
        mode=mode,
        pre_us=0.0,
        forward_us=FWD,
        backward_us=BWD,
        optimizer_us=OPT,
        comms=tuple(model.Comm(kind=k, nbytes=0, phase=p, unit=u, dur_us=d) for k, p, u, d in comms),
        knobs=knobs or model.Knobs(),
    )


def test_ddp_buckets_fill_in_reverse_and_close_at_the_cap():
    params = [(0, 4), (1, 4), (1, 4), (2, 8)]
    # Reversed: unit 2's 8 closes a bucket at cap 8; unit 1's 4 + 4 close the next; unit 0's 4 is the rest.
    assert model.ddp_buckets(params, 8) == ((2, 8), (1, 8), (0, 4))
    assert model.ddp_buckets(params, 100) == ((0, 20),)  # one bucket: it fills only when unit 0's backward ends


def test_smaller_ddp_buckets_overlap_the_earlier_units_backward():
    one = graph("ddp", [("all_reduce", "backward", 0, 5.0)])
    # One bucket: F 0..3, B1 3..7, B0 7..10, all_reduce 10..15, Adam 15..16.
    assert model.simulate(one).step_us == 16
    # Two buckets at 1 µs a byte: unit 1's (3 bytes) 7..10 beside B0 7..10, unit 0's (2) 10..12, Adam 12..13.
    two = model.rebucket(one, model.ddp_buckets([(0, 2), (1, 3)], 3), cost=lambda n: float(n))
    assert [(c.unit, c.dur_us) for c in two.comms] == [(1, 3.0), (0, 2.0)]
    st = model.simulate(two)
    assert st.step_us == 13 and st.overlap_us == 3


SPLIT = [
    ("reduce_scatter", "backward", 1, 1.0),
    ("reduce_scatter", "backward", 0, 1.0),
    ("all_gather", "optimizer", 0, 2.0),
    ("all_gather", "optimizer", 1, 6.0),
]


def test_split_prefetch_makes_the_first_unit_wait_for_the_later_gathers_too():
    # Steady step from t = 12 (Adam of the step before ends): AG0 of that step ends 13.5, AG1 19.5.
    # Distance 0: F0 13.5..14.5, F1 waits for AG1: 19.5..21.5, B1 ..25.5, B0 ..28.5, RS0 ..29.5, Adam o0 ..30,
    # o1 ..30.5: the next step starts at 30.5, a period of 18.5.
    assert model.simulate(graph("split", SPLIT)).step_us == 18.5
    # Distance 1: F0 waits for AG1 as well: F0 19.5..20.5, F1 ..22.5, and everything after 1 µs later.
    assert model.simulate(graph("split", SPLIT, model.Knobs(split_prefetch=1))).step_us == 19.5


FSDP = [
    ("all_gather", "forward", 0, 1.0),
    ("all_gather", "forward", 1, 3.0),
    ("reduce_scatter", "backward", 1, 0.0),
    ("reduce_scatter", "backward", 0, 0.0),
]


def test_fsdp2_prefetch_distance_moves_the_forward_gathers_earlier():
    # d = 0: AG0 0..1, F0 1..2, AG1 issued as F1 starts: 2..5, F1 5..7, B1 ..11, B0 ..14, Adam ..15.
    assert model.simulate(graph("fsdp2", FSDP, model.Knobs(fsdp_forward_ahead=0))).step_us == 15
    # d = 1: AG0 0..1, AG1 1..4 beside F0 1..2, F1 4..6, B1 ..10, B0 ..13, Adam ..14.
    assert model.simulate(graph("fsdp2", FSDP, model.Knobs(fsdp_forward_ahead=1))).step_us == 14


def test_fsdp2_resharding_adds_the_backward_gathers_and_their_prefetch_hides_them():
    base = model.Knobs(fsdp_forward_ahead=1)
    # d = 1 in backward: F1 ends 6, AGb1 6..9 and AGb0 9..10 issued at once; B1 9..13, B0 13..16, Adam ..17.
    assert model.simulate(graph("fsdp2", FSDP, dataclasses.replace(base, reshard=True))).step_us == 17
    # d = 0: AGb1 6..9, B1 9..13, AGb0 issued as B0 starts: 13..14, B0 14..17, Adam ..18.
    later = dataclasses.replace(base, reshard=True, fsdp_backward_ahead=0)
    assert model.simulate(graph("fsdp2", FSDP, later)).step_us == 18
    # Without resharding, no backward gathers: 14, as measured.
    assert model.simulate(graph("fsdp2", FSDP, dataclasses.replace(base, reshard=False))).step_us == 14


def test_a_first_bucket_cap_closes_only_the_first_bucket_early():
    params = [(0, 4), (1, 4), (1, 4), (2, 8)]
    # Cap 100, first 8: unit 2's 8 closes the first bucket at once; the other 12 bytes fill one more.
    assert model.ddp_buckets(params, 100, 8) == ((2, 8), (0, 12))
    # Cap 8, first 4: the first closes at unit 2's 8 (>= 4), the next at unit 1's 4 + 4, unit 0's 4 is the rest.
    assert model.ddp_buckets(params, 8, 4) == ((2, 8), (1, 8), (0, 4))


def test_a_small_first_bucket_overlaps_the_rest_of_backward():
    one = graph("ddp", [("all_reduce", "backward", 0, 5.0)])
    # First bucket 3 bytes (unit 1's), the rest under the 100-byte cap: unit 1's 3 µs run beside B0
    # (7..10), unit 0's 2 bytes 10..12, Adam 12..13: 3 µs faster than one bucket (16).
    first = model.rebucket(one, model.ddp_buckets([(0, 2), (1, 3)], 100, 3), cost=lambda n: float(n))
    assert model.simulate(first).step_us == 13


def _fsdp_cost(kind: str, n: int) -> float:
    return 2.0 + n if kind == "all_gather" else 0.0  # 2 µs a call, 1 µs a byte; reduce_scatters free


def test_fsdp2_groups_merge_compute_and_gather_each_group_in_one_call():
    per_unit = graph("fsdp2", [("all_gather", "forward", 0, 0.0), ("reduce_scatter", "backward", 0, 0.0)])
    # One unit per call (bytes 1 and 3): AG0 0..3, AG1 3..8 (prefetched), F0 3..4, F1 8..10, B1 ..14,
    # B0 ..17, Adam ..18.
    ungrouped = model.regroup(per_unit, (1, 3), 1, _fsdp_cost)
    assert [(c.kind, c.unit, c.dur_us) for c in ungrouped.comms] == [
        ("all_gather", 0, 3.0),
        ("all_gather", 1, 5.0),
        ("reduce_scatter", 1, 0.0),
        ("reduce_scatter", 0, 0.0),
    ]
    assert model.simulate(ungrouped).step_us == 18
    # Both in one call of 4 bytes: AG 0..6, F 6..9, B 9..16, Adam 16..17: one latency fewer wins 1 µs.
    grouped = model.regroup(per_unit, (1, 3), 2, _fsdp_cost)
    assert (grouped.forward_us, grouped.backward_us, grouped.optimizer_us) == ((3.0,), (7.0,), (1.0,))
    assert model.simulate(grouped).step_us == 17


def test_serial_fsdp2_gains_nothing_from_prefetch_and_everything_from_dropping_backward_gathers():
    serial = model.Knobs(serial=True)
    # Every collective holds the compute stream: AG0 0..1, AG1 1..4, F0 4..5, F1 5..7, B1 ..11, B0 ..14,
    # Adam ..15, whatever the prefetch distance (overlapped: 14 at distance 1, 15 at 0).
    for ahead in (0, 1):
        assert model.simulate(graph("fsdp2", FSDP, dataclasses.replace(serial, fsdp_forward_ahead=ahead))).step_us == 15
    # Resharding adds the backward gathers (1 + 3 µs) in full; not resharding takes them off in full.
    assert model.simulate(graph("fsdp2", FSDP, dataclasses.replace(serial, reshard=True))).step_us == 19
    assert model.simulate(graph("fsdp2", FSDP, dataclasses.replace(serial, reshard=False))).step_us == 15


def _measured_fsdp2() -> whatif.Measured:
    calls = [("all_gather", "forward", 1.0), ("all_gather", "forward", 3.0), ("reduce_scatter", "backward", 0.0)]
    return whatif.Measured(
        mode="fsdp2",
        pre_us=0.0,
        phase_us={"forward": 3.0, "backward": 7.0, "optimizer": 1.0},
        calls=tuple(whatif.MeasuredCall(kind=k, nbytes=8, phase=p, dur_us=d) for k, p, d in calls),
        backward_cuts=None,
        step_ms=None,
        profiled_ms=0.015,
    )


def test_fsdp2_measured_without_overlap_is_replayed_serial_and_prefetch_predicts_no_gain():
    units = whatif.Units(nbytes=(8, 8), backward_share=(3 / 7, 4 / 7), optimizer_share=(0.5, 0.5), measured_cuts=True)
    cfg = RunConfig(mode="fsdp2", model="mlp", layers=2)
    overlapped = advise_replay.replay_as_run(_measured_fsdp2(), units, cfg, 2, overlap_pct=40.0)
    serial = advise_replay.replay_as_run(_measured_fsdp2(), units, cfg, 2, overlap_pct=0.0)
    assert not overlapped.graph.knobs.serial and serial.graph.knobs.serial
    # Overlapped, the run's 15 µs calibrates to gathering at each unit's own start (AG1 2.29..5.29 before
    # F1): prefetching one unit ahead runs AG1 beside F0 (F0 = 3 · 3/7 µs), 15 -> 13.71.
    fetch = [c for c in advise_replay.fsdp2_prefetch(overlapped, cfg) if c.kind == "fsdp2-prefetch"]
    assert [c.config for c in fetch] == [{"fsdp_prefetch": 1}] and abs(fetch[0].gain_us - 9 / 7) < 1e-9
    # Serial, the gathers ran beside no compute: moving them earlier hides nothing, and the item says why.
    (fetch,) = [c for c in advise_replay.fsdp2_prefetch(serial, cfg) if c.kind == "fsdp2-prefetch"]
    assert abs(fetch.gain_us) < 1e-9 and "replayed serial" in fetch.change


def test_the_backward_gathers_work_is_their_ranges_busy_time_in_the_backward_window(tmp_path):
    from profile_overlap.analysis.rank.per_rank import analyze_rank

    def x(name: str, ts: float, dur: float, cat: str = "user_annotation", tid: int = 1) -> dict:
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur}

    events = [x("ProfilerStep#1", 0, 100), x("ProfilerStep#2", 100, 100)]
    for t in (0, 100):
        events += [x("forward", t, 40), x("backward", t + 40, 50)]
        # Forward: a gather's work, not counted (a run without resharding still does it).
        events += [x("FSDP::all_gather (blocks.0)", t + 1, 5), x("fsdp::all_gather_copy_in", t + 2, 2, "cpu_op")]
        # Backward: a prefetch range of 6 µs holding the issue of a gather (3 µs, its copy-in inside)
        # and the gather itself running 4 µs on gloo's thread with nothing on the training thread:
        # 6 - 4 = 2 µs busy; then the copy-out, 5 µs; an ordinary copy and the unit's other hooks: not counted.
        events += [x("FSDP::backward_prefetch for blocks.0", t + 41, 6), x("FSDP::all_gather (blocks.0)", t + 41, 1)]
        events += [x("fsdp::all_gather_copy_in", t + 41.5, 0.5, "cpu_op"), x("gloo:all_gather", t + 42, 4, tid=2)]
        events += [x("FSDP::all_gather_copy_out (blocks.0)", t + 50, 5), x("aten::copy_", t + 60, 7, "cpu_op")]
        events += [x("FSDP::post_backward_reduce (blocks.0)", t + 70, 3)]
    path = tmp_path / "rank0.pt.trace.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    busy = analyze_rank([path]).fsdp
    assert busy is not None and busy.backward_gathers_us == 7.0  # per step: 2 + 5
    # The unit's own cost counts every range naming it, forward and backward: 5 + 2 + 5 + 3.
    assert {u.unit: u.busy_us for u in busy.units} == {"blocks.0": 15.0}


def test_a_schedule_switch_the_run_timed_is_predicted_from_its_timed_medians_not_the_replay():
    # The replay of the profiled steps has split 3 ms faster; the run's timed steps have it 31.5 ms slower.
    r = {
        m: advise_replay.Replayed(mode=m, graph=None, step_us=us, profiled_ms=us / 1e3) for m, us in (("sequential", 50e3), ("split", 47e3))
    }  # type: ignore[arg-type]
    (c,) = advise_replay.schedule(r, {"sequential": 21.3, "split": 52.8})
    assert (c.mode, c.flag, c.timed) == ("split", "--mode sequential", True) and c.gain_us == pytest.approx(31_500)
    assert "timed split at 52.8 ms and sequential at 21.3 ms per step (the replay of the profiled steps gives -3 ms)" in c.change
    # Without timed steps of both, the replay decides.
    (c,) = advise_replay.schedule(r, {"sequential": None, "split": 52.8})
    assert (c.mode, c.flag, c.timed) == ("sequential", "--mode split", False) and c.gain_us == pytest.approx(3_000)


def test_fsdp2s_cost_per_unit_is_the_busy_time_in_the_ranges_naming_it_less_its_waits(tmp_path):
    from profile_overlap.analysis.rank.per_rank import analyze_rank

    def x(name: str, ts: float, dur: float, cat: str = "user_annotation", tid: int = 1) -> dict:
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur}

    events = [x("ProfilerStep#1", 0, 100), x("ProfilerStep#2", 100, 100)]
    for t in (0, 100):
        events += [x("aten::mm", t, 10, "cpu_op")]  # the model's own compute: no unit's
        # blocks.0: a 20 µs pre_forward that waits 10 µs for its gather (gloo's worker thread, nothing
        # else running), then a 5 µs prefetch range naming it: 15 µs busy.
        events += [x("FSDP::pre_forward (blocks.0)", t + 10, 20), x("aten::copy_", t + 12, 4, "cpu_op")]
        events += [x("gloo:all_gather", t + 18, 10, tid=2), x("FSDP::backward_prefetch for blocks.0", t + 40, 5)]
        # head: 8 µs, its gather runs 4 µs of which 2 beside an operator: 2 µs waited, 6 busy.
        events += [x("FSDP::pre_forward (head)", t + 50, 8), x("gloo:all_gather", t + 52, 4, tid=2), x("aten::add", t + 52, 2, "cpu_op")]
        events += [x("FSDP::root_post_backward_callback", t + 70, 9)]  # names no unit
    path = tmp_path / "rank0.pt.trace.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    busy = analyze_rank([path]).fsdp
    assert busy is not None and {u.unit: u.busy_us for u in busy.units} == {"blocks.0": 15.0, "head": 6.0}


def test_the_robust_line_is_not_tilted_by_one_call_that_waited_and_adds_up_to_the_measured_total():
    # y = 2x + 1 but the last call waited 89 µs more: 6 of the 10 slopes are 2, the median 2; the
    # intercept puts the line through the mean: (1 + 1 + 1 + 1 + 90) / 5.
    a, b = model.robust_line([(1, 3), (2, 5), (3, 7), (4, 9), (5, 100)])
    assert b == 2 and a == pytest.approx(94 / 5)
    # Falling with size: held at slope 0 (the mean). Sizes closer than 10%: no slope between them.
    assert model.robust_line([(1, 5), (2, 4), (3, 3)]) == (4, 0)
    assert model.robust_line([(100, 1), (105, 50)]) == (25.5, 0)


def test_merging_fsdp2_units_saves_each_dropped_units_own_cost_beside_its_calls_latency():
    units = whatif.Units(nbytes=(8, 8), backward_share=(3 / 7, 4 / 7), optimizer_share=(0.5, 0.5), measured_cuts=True)
    cfg = RunConfig(mode="fsdp2", model="mlp", layers=2)
    serial = advise_replay.replay_as_run(_measured_fsdp2(), units, cfg, 2, overlap_pct=0.0)
    assert serial.step_us == 15  # AG 1 + 3, F 3, B 7, RS 0, Adam 1: all on the compute stream

    def cost(kind: str, n: int) -> float:
        return 1.0 if kind == "all_gather" else 0.0  # a gather costs its latency, whatever its size

    # As run (2 units, each paying 2 µs of its own in F + B = 10): compute 6 + 2 · 2, AG 2 · 1, Adam 1: 13.
    # One unit: compute 6 + 2, one AG 1, Adam 1: 10. The gain, 3 µs: one unit's 2 and one gather's 1.
    (c,) = advise_replay.fsdp2_groups(serial, units, cfg, cost, unit_us=2.0)
    assert c.config == {"fsdp_group": 2} and c.gain_us == pytest.approx(3.0)
    assert "0.002 ms of FSDP2 hook work per unit measured" in c.change
    # Without a cost of its own per unit, only the latency.
    (c,) = advise_replay.fsdp2_groups(serial, units, cfg, cost)
    assert c.gain_us == pytest.approx(1.0)


def test_the_fsdp2_group_fit_error_is_how_far_the_calls_leave_the_latency_a_merge_saves_uncertain():
    units = whatif.Units(nbytes=(8, 8), backward_share=(3 / 7, 4 / 7), optimizer_share=(0.5, 0.5), measured_cuts=True)
    cfg = RunConfig(mode="fsdp2", model="mlp", layers=2)
    serial = advise_replay.replay_as_run(_measured_fsdp2(), units, cfg, 2, overlap_pct=0.0)
    # Calls of both kinds on one line, t = 5 + 2·n µs: every resample fits it again, so a merge's
    # saving (one all_gather's and one reduce_scatter's 5 µs of latency) is certain.
    line = [(n, 5 + 2 * n) for n in (4, 8, 16, 32) for _ in range(3)]
    exact = {"all_gather": line, "reduce_scatter": line}
    fit = advise_replay.collective_cost(exact["all_gather"])
    assert fit(0) == pytest.approx(5) and fit(10) == pytest.approx(25)
    draws = advise_replay.cost_draws(exact)
    assert len(draws) == advise_replay.FIT_RESAMPLES
    (c,) = advise_replay.fsdp2_groups(serial, units, cfg, lambda kind, n: fit(n), draws=draws)
    assert c.gain_us == pytest.approx(10) and c.fit_error_us == pytest.approx(0, abs=1e-9)
    # The same sizes, each call 0 to 8 µs off the line: the latency is uncertain, and the error says
    # by how much; the draws are seeded, so the same calls give the same interval.
    off = [(n, 5 + 2 * n + 4 * k) for n in (4, 8, 16, 32) for k in range(3)]
    scattered = {"all_gather": off, "reduce_scatter": off}
    (c1,) = advise_replay.fsdp2_groups(serial, units, cfg, lambda kind, n: fit(n), draws=advise_replay.cost_draws(scattered))
    (c2,) = advise_replay.fsdp2_groups(serial, units, cfg, lambda kind, n: fit(n), draws=advise_replay.cost_draws(scattered))
    assert 0 < c1.fit_error_us < 16 and c1.fit_error_us == c2.fit_error_us


def test_fsdp2_group_calls_of_one_size_are_replayed_all_bandwidth_and_all_latency_and_the_gain_is_midway():
    from types import SimpleNamespace

    units = whatif.Units(nbytes=(8, 8), backward_share=(3 / 7, 4 / 7), optimizer_share=(0.5, 0.5), measured_cuts=True)
    cfg = RunConfig(mode="fsdp2", model="mlp", layers=2)
    # Every call 8 bytes and 2 µs: all bandwidth, a merge moves the same bytes and saves nothing; all
    # latency, the one merged call of each kind costs 2 µs instead of two: 2 + 2 saved.
    calls = tuple(
        whatif.MeasuredCall(kind=k, nbytes=8, phase=p, dur_us=2.0)
        for k, p in [("all_gather", "forward")] * 2 + [("reduce_scatter", "backward")] * 2
    )
    measured = dataclasses.replace(_measured_fsdp2(), call_samples=calls)
    serial = advise_replay.replay_as_run(measured, units, cfg, 2, overlap_pct=0.0)
    ctx = advise_replay.Context(
        cfg=cfg, measured={"fsdp2": measured}, world=2, params=[], units=units, analysis=lambda mode: SimpleNamespace(ranks=())
    )
    (c,) = advise_replay._fsdp2_group(serial, ctx)
    assert c.gain_range_us == pytest.approx((0.0, 4.0)) and c.gain_us == pytest.approx(2.0)
    assert (
        "the all_gather and reduce_scatter calls have one size: the gain is midway between replaying them all bandwidth and all latency"
        in c.change
    )


def test_a_rank_of_several_files_costs_fsdp2s_work_per_step_over_all_of_them():
    from profile_overlap.analysis.file.fsdp_units import rank_busy
    from profile_overlap.record.analysis import FsdpRecord, FsdpUnitRecord

    def rec(backward_us: float, **units: float) -> FsdpRecord:
        return FsdpRecord(units=tuple(FsdpUnitRecord(unit=u, busy_us=us) for u, us in units.items()), backward_gathers_us=backward_us)

    # Two steps at 10 µs for blocks.0, then one at 16 µs that also names head (3 µs): (2*10 + 16) / 3 = 12, 3 / 3 = 1.
    busy = rank_busy([(rec(4.0, **{"blocks.0": 10.0}), 2), (rec(1.0, **{"blocks.0": 16.0, "head": 3.0}), 1)])
    assert busy is not None and {u.unit: u.busy_us for u in busy.units} == {"blocks.0": 12.0, "head": 1.0}
    assert busy.backward_gathers_us == 3.0  # (2*4 + 1) / 3
    assert rank_busy([]) is None
