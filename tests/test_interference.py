"""Interference: compute with communication in flight against the same operators alone, on synthetic
traces where the slowdown is planted (tests/interference_traces.py), and on a real compare run."""

from __future__ import annotations

import json
from pathlib import Path

import interference_traces
import numpy as np
import pytest
from interference_agreement import _calls

from profile_overlap.analysis.folder import analyze_dir
from profile_overlap.analysis.rank.interference import EXACT_UP_TO, _resampled_means, _sample
from profile_overlap.analysis.record import analysis_record, to_json
from profile_overlap.cli.main import main
from profile_overlap.core.modes import PHASES
from profile_overlap.record.interference import MIN_PAIRS
from profile_overlap.record.interference_used import NONE, OPERATORS, SPLIT_BLOCKING, UsedInterference, charged, used_interference
from profile_overlap.record.load import load_metrics
from profile_overlap.record.metrics import PhaseInterference
from profile_overlap.tools.whatif import Measured, model
from profile_overlap.tools.whatif.replay import COMM, COMPUTE, Task, replay

STYLES = ("cpu", "gpu")


def _interference(folder: Path) -> dict:
    return to_json(analyze_dir(folder, max_workers=1))["interference"]


@pytest.mark.parametrize("style", STYLES)
def test_compute_planted_25_percent_slower_beside_a_collective_measures_25_percent(tmp_path, style):
    x = _interference(interference_traces.write(tmp_path, slowdown=0.25, style=style))
    assert x["slowdown_pct"] == pytest.approx(25, abs=2)
    assert x["low_pct"] <= x["slowdown_pct"] <= x["high_pct"]
    # 2 ranks x 8 steps x 3 operators seen beside the all_reduce, each also seen alone.
    assert x["pairs"] == 2 * 8 * 3
    for rank in ("0", "1"):
        backward = x["ranks"][rank]["phases"]["backward"]
        assert backward["slowdown_pct"] == pytest.approx(25, abs=2) and backward["pairs"] == 8 * 3
        # Nothing is in flight in the forward: no pairs, so no figure.
        assert x["ranks"][rank]["phases"]["forward"] == {"slowdown_pct": None, "low_pct": None, "high_pct": None, "pairs": 0}


@pytest.mark.parametrize("style", STYLES)
def test_no_slowdown_planted_measures_no_interference(tmp_path, style):
    x = _interference(interference_traces.write(tmp_path, slowdown=0.0, style=style))
    assert x["slowdown_pct"] == pytest.approx(0, abs=2)
    assert x["low_pct"] <= 0 <= x["high_pct"]


@pytest.mark.parametrize("style", STYLES)
def test_a_forward_beside_prefetched_all_gathers_is_not_measured_against_the_first_step_whose_gathers_the_trace_missed(tmp_path, style):
    """Every forward runs 25% slower beside an all_gather launched at the end of the step before; step
    0's was launched before the profiler started, so the trace shows no event of it. Counted alone,
    step 0's forward would pair with the others' and read 0% (pulling the rank's figure to about 12%);
    the calls before the first launch the trace shows are left out, so the forward has nothing seen
    alone and no figure, and the rank reads the backward's 25%."""
    x = _interference(interference_traces.write(tmp_path, slowdown=0.25, style=style, prefetch=True))
    assert x["slowdown_pct"] == pytest.approx(25, abs=2)
    for rank in ("0", "1"):
        assert x["ranks"][rank]["phases"]["forward"]["slowdown_pct"] is None
        assert x["ranks"][rank]["phases"]["backward"]["slowdown_pct"] == pytest.approx(25, abs=2)


def test_a_collective_is_in_flight_from_its_launch_while_it_waits_for_gloo_s_worker(tmp_path):
    """gloo's worker starts the all_reduce 150 µs after its c10d op launched it, and the backward's second
    pass runs beside it from the launch: its first operator (125 µs) ends before the work starts. From
    the launch on, all three operators are beside it: 3 pairs a step, at 25%. (From the work's start,
    the first would count alone and the second partly covered: 1 pair a step.)"""
    x = _interference(interference_traces.write(tmp_path, slowdown=0.25, style="cpu", queued_us=150.0))
    assert x["pairs"] == 2 * 8 * 3
    assert x["slowdown_pct"] == pytest.approx(25, abs=2)


def test_a_collective_is_in_flight_only_until_ddp_s_reducer_has_seen_it_complete(tmp_path):
    """gloo's worker closes the all_reduce's event after a third backward pass that runs alone, once DDP's
    reducer has waited for the call and copied the bucket back. Counted to the event's end, that pass's
    calls would be beside communication at their alone time, 6 pairs a step at about 12%; in flight until
    the copy, the figure is the planted 25% from the second pass's 3 pairs."""
    x = _interference(interference_traces.write(tmp_path, slowdown=0.25, style="cpu", late_end=True))
    assert x["pairs"] == 2 * 8 * 3
    assert x["slowdown_pct"] == pytest.approx(25, abs=2)


@pytest.mark.parametrize("slowdown", [0.25, 200.0])
def test_microsecond_calls_beside_communication_give_no_figure_and_analyze_says_why(tmp_path, capsys, slowdown):
    """Tens of pairs a rank, but of calls of about a microsecond (tens of µs of compute beside the
    all_reduce): one call descheduled for a microsecond would decide the figure, so there is none; nor
    when the calls beside it stalled for milliseconds (201x their alone time): the guard counts their
    alone time."""
    folder = interference_traces.write(tmp_path, slowdown=slowdown, style="cpu", scale=0.01)
    x = _interference(folder)
    assert x["pairs"] >= 2 * 8 * 3 and x["slowdown_pct"] is None
    assert all(r["pairs"] >= MIN_PAIRS and r["slowdown_pct"] is None for r in x["ranks"].values())
    assert main(["analyze", str(folder)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"too little compute beside communication ({x['pairs']} pairs, under the 1 ms needed)" in out


def test_without_jitter_the_figure_is_exact_and_its_interval_has_no_width(tmp_path):
    x = _interference(interference_traces.write(tmp_path, slowdown=0.25, style="cpu", jitter=0.0))
    assert (x["slowdown_pct"], x["low_pct"], x["high_pct"]) == pytest.approx((25.0, 25.0, 25.0), abs=1e-6)


def test_the_json_has_the_issue_s_shape_top_level_ranks_and_phases(tmp_path):
    x = _interference(interference_traces.write(tmp_path, slowdown=0.25, style="gpu"))
    four = {"slowdown_pct", "low_pct", "high_pct", "pairs"}
    assert set(x) == four | {"ranks"}
    assert set(x["ranks"]) == {"0", "1"}
    for r in x["ranks"].values():
        assert set(r) == four | {"phases"}
        assert all(set(p) == four for p in r["phases"].values())


def test_operators_of_other_shapes_are_not_paired(tmp_path):
    """The beside pass runs only the 32x64 mm (70 µs alone) and the alone pass only the 64x64 one
    (100 µs): by name alone they would pair and read -30%; by name and shapes nothing pairs."""
    p = interference_traces.plan(slowdown=0.0, steps=8)
    by_step = len(interference_traces.OPERATORS)
    ops = []
    for s in range(8):
        alone, beside = (
            p["ops"][3 * by_step * s + by_step : 3 * by_step * s + 2 * by_step],
            p["ops"][3 * by_step * s + 2 * by_step : 3 * by_step * (s + 1)],
        )
        ops += [o for o in alone if o[0] == 0] + [o for o in beside if o[0] == 2]
    p["ops"] = ops
    folder = tmp_path / "t"
    folder.mkdir()
    interference_traces.write_trace(interference_traces.cpu_doc(p, rank=0, world=1), folder / "rank0.pt.trace.json")
    x = _interference(folder)
    assert x["pairs"] == 0 and x["slowdown_pct"] is None


def test_too_few_pairs_give_no_figure_and_analyze_says_so(tmp_path, capsys):
    # One rank, three steps: step 0's alone calls come before its first launch and are left out, so
    # each of the 3 operators runs twice alone and 3 times beside communication: 3 x 3 pairs.
    folder = interference_traces.write(tmp_path / "t", slowdown=0.25, style="cpu", steps=3, ranks=1)
    x = _interference(folder)
    assert x["pairs"] == 3 * 3 and x["slowdown_pct"] is None and x["low_pct"] is None
    assert main(["analyze", str(folder)]) == 0
    assert (
        "Interference (compute with communication in flight vs alone, same operators): too few pairs (9 of the 10 needed)"
        in capsys.readouterr().out
    )


def test_an_operator_seen_only_once_alone_is_not_paired(tmp_path):
    """Two steps: each operator runs alone once (step 1) and beside communication twice. One call's
    mean has no interval (the bootstrap redraws the same call), so a lone call, descheduled for
    milliseconds on a busy host, would set its operator's figure and an interval of no width around it."""
    folder = interference_traces.write(tmp_path / "t", slowdown=0.25, style="cpu", steps=2, ranks=1)
    x = _interference(folder)
    assert x["pairs"] == 0 and x["slowdown_pct"] is None
    assert all(p["pairs"] == 0 for r in x["ranks"].values() for p in r["phases"].values())


def test_analyze_prints_the_interference_in_one_line(tmp_path, capsys):
    folder = interference_traces.write(tmp_path / "t", slowdown=0.25, style="gpu")
    assert main(["analyze", str(folder), "--json", str(tmp_path / "a.json")]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("Interference")]
    x = json.loads((tmp_path / "a.json").read_text())["interference"]
    assert lines == [
        f"Interference (compute with communication in flight vs alone, same operators): {x['slowdown_pct']:+.1f}% "
        f"[{x['low_pct']:+.1f}, {x['high_pct']:+.1f}] ({x['pairs']} pairs); per phase (median rank): backward "
        f"{sorted(r['phases']['backward']['slowdown_pct'] for r in x['ranks'].values())[0]:+.1f}%"
    ]


def test_a_compare_run_measures_interference_where_communication_overlaps_and_states_both_figures(compare_run_2):
    """On a real 2-rank compare run: split's collectives run beside its backward, so every rank pairs
    its backward operators; sequential and split-blocking wait for each collective at once, so none of
    their compute runs beside communication and they have no pairs. Both figures, the per-operator one
    (where its pairs are enough: an operator must run twice each way, and with 2 profiled steps a rank's
    backward can rest on too little compute, under 1 ms at its alone time) and split vs split-blocking,
    come with well-formed intervals and show in the report's phases.

    On this shared 2-core host the two do not reliably agree (the closing note of issue 36 has the
    figures): split's operators run slower than split-blocking's whether or not a collective of their
    own rank is in flight, which the per-operator figure, by design, does not count."""
    m = load_metrics(compare_run_2 / "metrics.json")
    for mode in ("sequential", "split-blocking"):
        x = m.modes[mode].analysis.interference
        assert x is not None and x.pairs == 0 and x.slowdown_pct is None
    split = m.modes["split"].analysis.interference
    assert split is not None and set(split.ranks) == {"0", "1"}
    for r in split.ranks.values():
        backward = r.phases["backward"]
        assert backward.pairs > 0
        assert backward.slowdown_pct is None or backward.low_pct <= backward.high_pct
    assert split.pairs > 0 and (split.slowdown_pct is None or split.low_pct <= split.high_pct)
    # Where the per-operator figure has too few pairs, the run's split vs split-blocking stands in.
    assert {row.phase for row in m.summary.interference} >= {"backward", "optimizer"}
    for row in m.summary.interference:
        assert row.pct is not None and row.low_pct <= row.high_pct
    md = (compare_run_2 / "report.md").read_text()
    assert "[Interference](#interference-every-run-and-job) in split, its compute with communication in flight" in md
    assert f"({split.pairs} pairs) over its ranks and phases" in md


def test_split_and_split_blocking_run_the_same_compute_operators_in_each_phase(compare_run_2):
    """gloo's reduce_scatter is an all_reduce whose wait keeps this rank's chunk (aten::chunk, then
    aten::copy_) on the waiting thread: in split-blocking's backward, in split's optimizer. That is the
    collective finishing, not compute; counted as compute it read as +45% to +211% interference in
    split's optimizer against split-blocking's (benchmarks/interference_agreement.py)."""
    split, blocking = (_calls(compare_run_2 / mode) for mode in ("split", "split-blocking"))
    assert set(split) == set(blocking) == {(rank, phase) for rank in (0, 1) for phase in PHASES}
    for where, ops in split.items():
        assert set(ops) == set(blocking[where]), where
        assert ops and not any(op.startswith("aten::chunk") for op in ops), where


# ---------------------------------------------------------------- the replay charges it


def _ddp(slowdown: float) -> model.StepGraph:
    """Two units (F 1, 2; B1 4 then B0 3; Adam 0.5 each); unit 1's bucket (2 µs) all-reduces beside B0."""
    comms = (model.Comm("all_reduce", 0, "backward", 1, 2.0), model.Comm("all_reduce", 0, "backward", 0, 2.0))
    return model.StepGraph("ddp", 0.0, (1.0, 2.0), (3.0, 4.0), (0.5, 0.5), comms, slowdown=(("backward", slowdown),))


def test_compute_beside_a_collective_takes_one_plus_the_interference_of_its_alone_time():
    # B0 starts at 7 beside the 2 µs all_reduce [7, 9): 2 µs of wall time do 2 / 1.5 of its work, the
    # rest (3 − 2 / 1.5) runs alone; unit 0's all_reduce (2) and Adam (1) follow it.
    assert model.simulate(_ddp(0.0)).step_us == pytest.approx(1 + 2 + 4 + 3 + 2 + 1)
    assert model.simulate(_ddp(0.5)).step_us == pytest.approx(1 + 2 + 4 + (2 + (3 - 2 / 1.5)) + 2 + 1)


def test_a_task_slowed_through_several_collectives_and_gaps_ends_where_its_work_is_done():
    tasks = [
        Task("F0", COMPUTE, 1.0),
        Task("a", COMM, 2.0, deps=(0,)),  # [1, 3)
        Task("F1", COMPUTE, 5.0, deps=(0,), slowdown=1.0),  # from 1: 2 µs beside = 1 of work, then 4 alone
    ]
    assert replay(tasks)[2] == pytest.approx((1.0, 7.0))


def test_the_measured_phase_gives_back_its_interference_to_replay_from_alone_time():
    m = Measured(
        mode="ddp",
        pre_us=0.0,
        phase_us={"forward": 3.0, "backward": 10.0, "optimizer": 1.0},
        calls=(),
        backward_cuts=None,
        step_ms=None,
        profiled_ms=None,
        overlap_us={"backward": 6.0},
        interference={
            "backward": UsedInterference(phase="backward", slowdown_pct=50.0, low_pct=40.0, high_pct=60.0, pairs=20, source="operators")
        },
    )
    # 6 µs ran beside communication at 1.5 x their alone time: alone, they take 4.
    assert m.alone_us("backward") == pytest.approx(10 - 6 + 4)
    assert m.alone_us("forward") == 3.0 and m.slowdown("forward") == 0.0


def test_a_negative_interference_is_charged_as_none():
    u = UsedInterference(phase="optimizer", slowdown_pct=-30.0, low_pct=-45.0, high_pct=-15.0, pairs=50, source="operators")
    assert charged(u) == 0.0


def test_the_replay_uses_the_mode_s_own_figure_else_split_vs_split_blocking_else_none(tmp_path):
    record = analysis_record(analyze_dir(interference_traces.write(tmp_path, slowdown=0.25, style="cpu"), max_workers=1))
    blocking = (PhaseInterference(phase="forward", compute_ms=1.2, baseline_compute_ms=1.0, pct=20.0, low_pct=10.0, high_pct=30.0),)
    used = used_interference(record, blocking)
    assert used["backward"].source == OPERATORS and used["backward"].slowdown_pct == pytest.approx(25, abs=2)
    assert used["forward"].source == SPLIT_BLOCKING and used["forward"].slowdown_pct == 20.0
    assert used["optimizer"].source == NONE and used["optimizer"].slowdown_pct == 0.0


def test_above_the_exact_size_a_resampled_mean_spreads_as_resampling_the_calls_does():
    """The interval's shortcut for many calls (the mean's normal approximation) against resampling
    the calls by brute force, on heavy-tailed calls (a few descheduled ones): the same 95% range
    within 5% of its width."""
    rng = np.random.default_rng(1)
    n = 4 * EXACT_UP_TO
    calls = np.sort(np.where(rng.random(n) < 0.02, 2000.0, 50.0) + rng.uniform(0, 5, n))
    shortcut = _resampled_means(calls, np.array([0]), np.array([n]), rng).ravel()
    brute = calls[rng.integers(0, n, size=(2000, n))].mean(axis=1)
    lo, hi = np.percentile(brute, [2.5, 97.5])
    s_lo, s_hi = np.percentile(shortcut, [2.5, 97.5])
    assert s_lo == pytest.approx(lo, abs=0.05 * (hi - lo)) and s_hi == pytest.approx(hi, abs=0.05 * (hi - lo))
    assert np.mean(shortcut) == pytest.approx(calls.mean(), rel=0.01)


def test_a_call_descheduled_for_milliseconds_beside_communication_counts():
    """On a shared CPU, interference arrives as a few calls descheduled for milliseconds; the figure is a
    ratio of means, so they count (a median would discard them and read 0)."""
    rng = np.random.default_rng(0)
    alone = 100 + rng.uniform(-2, 2, 200)
    beside = 100 + rng.uniform(-2, 2, 200)
    beside[::20] += 2500  # 1 call in 20 descheduled for 2.5 ms: +125% of the beside time
    key = np.zeros(400, dtype=np.int64)
    dur = np.concatenate([alone, beside])
    flags = np.arange(400) < 200
    s = _sample(key, dur, flags, ~flags, np.random.default_rng(1)).estimate()
    assert s.slowdown_pct == pytest.approx(125, abs=2)
    assert s.low_pct is not None and s.high_pct is not None and s.low_pct < 125 < s.high_pct
