"""Per-phase attribution, overlap yield and interference: the formulas on hand-made records (no
processes), old records read back, and what a real 2-rank compare run records and shows (console,
report, TensorBoard)."""

from __future__ import annotations

import copy
import io
import json
import shutil
from pathlib import Path

import msgspec
import pytest
from rich.console import Console

from profile_overlap.cli.report import gate, parse_condition
from profile_overlap.core.errors import UserError
from profile_overlap.record.analysis import AnalysisRecord
from profile_overlap.record.folder import Run, load_run
from profile_overlap.record.load import load_metrics
from profile_overlap.record.metrics import SCHEMA_VERSION, Env, ModeMetrics, RunMetrics, StepTimes
from profile_overlap.record.summary import HEADLINE_NAMES, speedup, with_summary
from profile_overlap.render import console, numbers, write
from profile_overlap.render.compare import build_compare
from profile_overlap.render.markdown import render as render_md
from profile_overlap.render.report import build

STEP_NUMBERS = ("step_us", "comm_us", "compute_us", "overlap_us", "exposed_comm_us", "overlap_pct")
"""A step record's numbers; the hand-made records here leave them unknown."""

GOLDEN_RUN = Path(__file__).resolve().parent / "golden" / "run"
PHASE_KEYS = ("window_us", "comm_us", "compute_us", "overlap_us", "exposed_comm_us")


def _phase(name: str, window: float, comm: float, compute: float, overlap: float) -> dict:
    return dict(zip(("phase", *PHASE_KEYS), (name, window, comm, compute, overlap, comm - overlap)))


def _mode(name: str, times_ms: list[float], phases_per_rank: list[list[dict]], *, comm_us: float = 16000.0) -> ModeMetrics:
    """A mode of 2 ranks and 2 profiled steps; the rank totals only matter for comm_ms."""
    ranks = [
        {
            "rank": r,
            "device": "cpu",
            "comm_us": comm_us,
            "compute_us": 8000.0,
            "overlap_us": 0.0,
            "exposed_comm_us": comm_us,
            "overlap_pct": 0.0,
            "steps": [{"step": s, **dict.fromkeys(STEP_NUMBERS)} for s in (1, 2)],
            "collectives": [],
            "wait_us": None,
            "transfer_us": None,
            "phases": phases,
        }
        for r, phases in enumerate(phases_per_rank)
    ]
    return ModeMetrics(
        mode=name,
        step_time=StepTimes.from_times(times_ms, method="perf_counter+barrier"),
        memory=(),
        checks=(),
        trace_dir=name,
        analysis=msgspec.convert({"ranks": ranks, "world_size": len(ranks), "slowest_rank": None}, AnalysisRecord),
    )


def _run(*modes: ModeMetrics) -> RunMetrics:
    by_name = {m.mode: m for m in modes}
    metrics = RunMetrics(
        schema_version=SCHEMA_VERSION,
        run_dir="/nowhere",
        config={},
        env=Env(world_size=2),
        modes=by_name,
        checks=(),
        speedup=speedup(by_name),
    )
    return with_summary(metrics)


# Split: rank 0 has forward and backward, rank 1 backward only (a missing phase counts 0).
SPLIT = [
    [_phase("forward", 2000, 0, 1800, 0), _phase("backward", 4000, 3000, 2000, 1000)],
    [_phase("backward", 6000, 5000, 4000, 3000)],
]
# Split-blocking: no overlap; forward has no compute; an optimizer phase split lacks.
BLOCKING = [
    [_phase("forward", 1000, 0, 0, 0), _phase("backward", 5000, 3000, 1600, 0), _phase("optimizer", 800, 400, 300, 0)],
    [_phase("forward", 1000, 0, 0, 0), _phase("backward", 7000, 5000, 3200, 0), _phase("optimizer", 800, 400, 300, 0)],
]


def _three_modes() -> RunMetrics:
    return _run(
        _mode("sequential", [20, 20, 20], SPLIT), _mode("split", [10, 11, 12], SPLIT), _mode("split-blocking", [14, 15, 16], BLOCKING)
    )


def test_phases_are_per_profiled_step_and_mean_over_ranks():
    run = _run(_mode("split", [10, 11, 12], SPLIT))
    forward, backward = run.summary.modes["split"].phases
    assert forward.phase == "forward" and backward.phase == "backward"
    # 2 ranks, 2 profiled steps: total / 2 / 2, in ms; rank 1's missing forward counts 0.
    assert forward.window_ms == pytest.approx(2000 / 2 / 2 / 1e3)
    assert forward.compute_ms == pytest.approx(1800 / 2 / 2 / 1e3)
    assert backward.window_ms == pytest.approx((4000 + 6000) / 2 / 2 / 1e3)
    assert backward.comm_ms == pytest.approx((3000 + 5000) / 2 / 2 / 1e3)
    assert backward.compute_ms == pytest.approx((2000 + 4000) / 2 / 2 / 1e3)
    assert backward.hidden_ms == pytest.approx((1000 + 3000) / 2 / 2 / 1e3)
    assert backward.exposed_comm_ms == pytest.approx(((3000 - 1000) + (5000 - 3000)) / 2 / 2 / 1e3)


def test_overlap_yield_and_interference_formulas():
    run = _run(
        _mode("sequential", [20, 20, 20], SPLIT), _mode("split", [10, 11, 12], SPLIT), _mode("split-blocking", [14, 15, 16], BLOCKING)
    )
    assert list(run.summary.modes) == ["sequential", "split", "split-blocking"]
    y = run.summary.overlap_yield
    assert (y.mode, y.baseline) == ("split", "split-blocking")
    assert y.ms == pytest.approx(15 - 11)
    # comm_ms of split-blocking: 16000 µs per rank over 2 steps = 8 ms per step.
    assert y.pct_of_comm == pytest.approx(100 * 4 / 8)
    assert y.within_noise is False  # 11 lies outside 14.2-15.8 and 15 outside 10.2-11.8
    rows = {x.phase: x for x in run.summary.interference}
    assert list(rows) == ["forward", "backward", "optimizer"]
    backward = rows["backward"]
    assert backward.compute_ms == pytest.approx(1.5) and backward.baseline_compute_ms == pytest.approx(1.2)
    assert backward.pct == pytest.approx(100 * (1.5 / 1.2 - 1))
    assert rows["forward"].baseline_compute_ms == 0 and rows["forward"].pct is None  # zero compute
    assert rows["optimizer"].compute_ms is None and rows["optimizer"].pct is None  # split lacks the phase
    h = run.summary.headline
    assert h["overlap_yield_ms"] == pytest.approx(4) and h["overlap_yield_pct"] == pytest.approx(50)
    assert h["split_blocking_step_ms"] == 15 and h["split_step_ms"] == 11 and h["sequential_step_ms"] == 20
    # The speedup stays sequential / split, with three modes too.
    assert h["speedup"] == pytest.approx(20 / 11) and run.speedup.measured == pytest.approx(20 / 11)
    assert set(h) == set(HEADLINE_NAMES)


def test_no_split_blocking_no_yield_and_no_interference():
    run = _run(_mode("sequential", [20, 21, 22], SPLIT), _mode("split", [10, 11, 12], SPLIT))
    assert run.summary.overlap_yield is None and run.summary.interference == ()
    assert run.summary.headline["overlap_yield_ms"] is None and run.summary.headline["split_blocking_step_ms"] is None
    with pytest.raises(UserError, match="has no overlap_yield_pct"):
        gate(run.summary.headline, [parse_condition("overlap_yield_pct<10")], run_name="r")
    assert console.yield_line(run) is None


def test_no_phase_labels_no_interference_but_a_yield():
    run = _run(_mode("split", [10, 11, 12], [[], []], comm_us=0.0), _mode("split-blocking", [14, 15, 16], [[], []], comm_us=0.0))
    assert run.summary.modes["split"].phases == ()
    assert run.summary.interference == ()
    assert run.summary.overlap_yield.ms == pytest.approx(4) and run.summary.overlap_yield.pct_of_comm is None  # no comm profiled


def test_untimed_split_blocking_has_no_yield():
    run = _run(_mode("split", [10, 11, 12], SPLIT), _mode("split-blocking", [], BLOCKING))
    assert run.summary.overlap_yield is None
    assert run.summary.interference  # profiled phases still compare


def test_record_round_trips_and_gates_on_the_yield(capsys):
    run = _run(
        _mode("sequential", [20, 20, 20], SPLIT), _mode("split", [10, 11, 12], SPLIT), _mode("split-blocking", [14, 15, 16], BLOCKING)
    )
    back = RunMetrics.from_json(json.loads(json.dumps(run.to_json())))
    assert back == run
    assert gate(back.summary.headline, [parse_condition("overlap_yield_ms<5")], run_name="r") == 1
    assert gate(back.summary.headline, [parse_condition("overlap_yield_pct<40")], run_name="r") == 0
    assert "FAIL: overlap_yield_ms<5 holds for r (overlap_yield_ms = 4)" in capsys.readouterr().err


def test_a_version_2_record_reads_back_and_gets_the_new_numbers(tmp_path):
    run = _run(
        _mode("sequential", [20, 20, 20], SPLIT), _mode("split", [10, 11, 12], SPLIT), _mode("split-blocking", [14, 15, 16], BLOCKING)
    )
    old = run.to_json()
    old["schema_version"] = 2
    old["speedup"] = None  # version 2 computed it for exactly two modes
    for m in old["summary"]["modes"].values():
        del m["phases"]
    del old["summary"]["overlap_yield"], old["summary"]["interference"]
    for name in ("split_blocking_step_ms", "overlap_yield_ms", "overlap_yield_pct"):
        del old["summary"]["headline"][name]
    read = RunMetrics.from_json(old)
    assert read.summary.overlap_yield is None and read.summary.modes["split"].phases == ()
    (tmp_path / "metrics.json").write_text(json.dumps(old))
    loaded = load_metrics(tmp_path / "metrics.json")
    assert loaded.summary == run.summary and loaded.speedup == run.speedup


@pytest.fixture()
def three_mode_golden(tmp_path) -> Path:
    """The golden record (schema 1, two modes, no phase labels) with phases and a split-blocking
    mode added by hand: split hides 3 of its 4 ms backward communication."""
    data = json.loads((GOLDEN_RUN / "metrics.json").read_text())
    steps = len(data["modes"]["split"]["analysis"]["ranks"][0]["steps"])
    split_phases = [
        _phase("forward", 5000 * steps, 0, 4000 * steps, 0),
        _phase("backward", 9000 * steps, 4000 * steps, 6000 * steps, 3000 * steps),
    ]
    blocking = copy.deepcopy(data["modes"]["split"])
    blocking["mode"] = "split-blocking"
    blocking["step_time"]["times_ms"] = [t + 100 for t in blocking["step_time"]["times_ms"]]
    for key in ("median_ms", "p10_ms", "p90_ms", "mean_ms", "min_ms", "max_ms"):
        blocking["step_time"][key] += 100
    for mode, phases in (("split", split_phases), ("sequential", split_phases)):
        for r in data["modes"][mode]["analysis"]["ranks"]:
            r["phases"] = phases
    blocking_phases = [
        _phase("forward", 4500 * steps, 0, 4000 * steps, 0),
        _phase("backward", 12000 * steps, 4000 * steps, 5000 * steps, 0),
    ]
    for r in blocking["analysis"]["ranks"]:
        r["phases"] = blocking_phases
    data["modes"]["split-blocking"] = blocking
    run_dir = tmp_path / "golden3"
    run_dir.mkdir()
    for name in ("config.json", "env.json", "status.json"):
        shutil.copy(GOLDEN_RUN / name, run_dir / name)
    (run_dir / "metrics.json").write_text(json.dumps(data))
    return run_dir


def test_report_states_phases_yield_and_interference(three_mode_golden):
    run = load_run(three_mode_golden)
    s = run.metrics.summary
    assert s.overlap_yield.ms == pytest.approx(100)
    md = render_md(build(run), figure_png=None)
    for title in (
        "## Sequential vs split vs split-blocking",
        "## Phases: where communication hides",
        "## What overlapping won: overlap yield and interference",
    ):
        assert title in md
    assert "split hides [3.00 ms](#phases) of its [4.00 ms](#phases) backward communication behind backward compute (75.0%)" in md
    assert "split-blocking hides none of its [4.00 ms](#phases) backward communication: backward waits for all of it." in md
    assert "Overlapping won [100 ms](#overlap-yield-and-interference) per step" in md
    # That link lands on the definition: no report heading shares the definitions' heading anchor.
    assert [h for h in md.splitlines() if h.lstrip("#").strip() == "Overlap yield and interference"] == [
        "#### Overlap yield and interference"
    ]
    # Interference per phase: backward 6 ms against 5 ms alone = +20%; forward the same 4 ms = +0%.
    assert "| backward | 5.00 | 6.00 | +20.0 |" in md and "| forward | 4.00 | 4.00 | +0.0 |" in md
    assert "Overlap slows compute down: split's backward compute" in md  # the note
    # The speedup rows stay under split, with a third column beside it.
    assert f"| [speedup](#step-time-and-speedup) measured (×) |  | {numbers.times(run.metrics.speedup.measured)} |  |" in md


def test_console_and_compare_take_three_modes(three_mode_golden):
    run = load_run(three_mode_golden)
    out = io.StringIO()
    console.print_run_summary(run.metrics, Console(file=out, width=160, color_system=None))
    text = out.getvalue()
    assert "split-blocking" in text and "communication per phase" in text
    assert "overlap yield 100.00 ms/step" in text and "interference: forward +0.0%, backward +20.0%" in text
    report = build_compare(run, Run(dir=three_mode_golden, metrics=run.metrics, timeline=None, status=None))
    spread = next(sec for sec in report.sections if sec.id == "spread").blocks[0]
    assert [cell[0] for cell in spread.header[1:]] == ["sequential", "split", "split-blocking"]  # modes as columns
    headline = next(sec for sec in report.sections if sec.id == "headline").blocks[0]
    assert {"overlap_yield_ms", "overlap_yield_pct", "split_blocking_step_ms"} <= {row[0][0] for row in headline.rows}


# ---------------------------------------------------------------- a real 2-rank compare run


def test_a_compare_run_records_phases_yield_and_interference(compare_run_2):
    raw = json.loads((compare_run_2 / "metrics.json").read_text())
    assert raw["schema_version"] == SCHEMA_VERSION == 3
    metrics = load_metrics(compare_run_2 / "metrics.json")
    s = metrics.summary
    assert list(s.modes) == ["sequential", "split", "split-blocking"]
    for name, mode in s.modes.items():
        assert [p.phase for p in mode.phases] == ["forward", "backward", "optimizer"], name
        ranks = metrics.modes[name].analysis.ranks
        backward = next(p for p in mode.phases if p.phase == "backward")
        expected = sum(p.overlap_us for r in ranks for p in r.phases if p.phase == "backward") / len(ranks) / 2 / 1e3
        assert backward.hidden_ms == pytest.approx(expected)
    # The split hides part of its reduce_scatters behind backward compute; the blocking modes hide nothing.
    assert next(p for p in s.modes["split"].phases if p.phase == "backward").hidden_ms > 0
    assert all(p.hidden_ms == 0 for p in s.modes["split-blocking"].phases)
    y = s.overlap_yield
    split_t, blocking_t = metrics.modes["split"].step_time, metrics.modes["split-blocking"].step_time
    assert y.ms == pytest.approx(blocking_t.median_ms - split_t.median_ms)
    assert y.pct_of_comm == pytest.approx(100 * y.ms / s.modes["split-blocking"].comm_ms)
    assert [x.phase for x in s.interference] == ["forward", "backward", "optimizer"]
    for x in s.interference:
        if x.pct is not None:
            assert x.pct == pytest.approx(100 * (x.compute_ms / x.baseline_compute_ms - 1))
    assert s.headline["overlap_yield_ms"] == y.ms and metrics.speedup is not None
    assert raw["summary"]["overlap_yield"]["baseline"] == "split-blocking"


def test_console_and_report_show_yield_and_interference_per_phase(compare_run_2):
    metrics = load_metrics(compare_run_2 / "metrics.json")
    out = " ".join((compare_run_2 / "_stdout.txt").read_text().split())  # rich may wrap a long line
    assert "communication per phase (ms per profiled step, mean over ranks)" in out
    line = console.yield_line(metrics)
    assert " ".join(line.split()) in out
    for x in metrics.summary.interference:
        assert f"{x.phase} {'-' if x.pct is None else f'{x.pct:+.1f}%'}" in line
    md = (compare_run_2 / "report.md").read_text()
    assert "backward communication behind backward compute" in md.split("## Phases: where communication hides")[1]
    section = md.split("## What overlapping won: overlap yield and interference")[1].split("## Collectives")[0]
    y = metrics.summary.overlap_yield
    assert f"[{numbers.ms(abs(y.ms))} ms](#overlap-yield-and-interference) per step" in section
    for x in metrics.summary.interference:
        pct = "–" if x.pct is None else f"{x.pct:+.1f}"
        assert f"| {x.phase} | {numbers.ms(x.baseline_compute_ms)} | {numbers.ms(x.compute_ms)} | {pct} |" in section


def test_tensorboard_event_files_hold_the_phase_scalars(compare_run_2):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    metrics = load_metrics(compare_run_2 / "metrics.json")
    for mode in ("sequential", "split", "split-blocking"):
        acc = EventAccumulator(str(compare_run_2 / mode))
        acc.Reload()
        tags = set(acc.Tags()["scalars"])
        for phase in ("forward", "backward", "optimizer"):
            for name in ("window_ms", "comm_ms", "compute_ms", "hidden_ms", "exposed_comm_ms"):
                assert f"phase/{phase}/{name}" in tags, (mode, phase, name)
        ranks = metrics.modes[mode].analysis.ranks
        for event in acc.Scalars("phase/backward/hidden_ms"):
            rows = [p for r in ranks for s in r.steps if s.step == event.step for p in s.phases if p.phase == "backward"]
            assert event.value == pytest.approx(sum(p.overlap_us for p in rows) / len(ranks) / 1e3, rel=1e-5)
        yields = {"headline/overlap_yield_ms", "headline/overlap_yield_pct", "headline/interference/backward_pct"}
        assert (yields <= tags) == (mode == "split")
    acc = EventAccumulator(str(compare_run_2 / "split"))
    acc.Reload()
    assert acc.Scalars("headline/overlap_yield_ms")[0].value == pytest.approx(metrics.summary.overlap_yield.ms, rel=1e-5)


def test_report_write_of_the_run_is_stable(compare_run_2, tmp_path):
    """Rewriting the report from the record gives the report the run wrote."""
    write.write(compare_run_2, out=tmp_path, formats=("md",))
    assert (tmp_path / "report.md").read_text().split("## Setup")[0] == (compare_run_2 / "report.md").read_text().split("## Setup")[0]
