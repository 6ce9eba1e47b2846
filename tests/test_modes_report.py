"""Any set of modes, torch's engines included: collectives by phase, their bytes against the model's
parameter bytes and every mode's speedup over the first, on hand-made records (no processes), then
what a real 2-rank run of sequential, split, ddp and fsdp2 and a real ddp-only run print and report."""

from __future__ import annotations

import io
import json

import msgspec
import pytest
from rich.console import Console

from profile_overlap.record.analysis import AnalysisRecord
from profile_overlap.record.config import RunConfig
from profile_overlap.record.folder import load_run
from profile_overlap.record.metrics import SCHEMA_VERSION, Env, ModeMetrics, RunMetrics, StepTimes
from profile_overlap.record.summary import BYTES_PADDING, HEADLINE_NAMES, speedup, with_summary
from profile_overlap.render import console, modes, notes
from profile_overlap.render.compare import build_compare
from profile_overlap.render.markdown import render as render_md

from conftest import ENGINE_MODES

STEP_NUMBERS = ("step_us", "comm_us", "compute_us", "overlap_us", "exposed_comm_us", "overlap_pct")
"""A step record's numbers; the hand-made records here leave them unknown."""

P = 1_000_000
"""The hand-made model's parameter bytes."""
FOUR = ENGINE_MODES


def _calls(phase: str, kind: str, count: int, nbytes: int | None, dur_us: float) -> dict:
    return {"phase": phase, "kind": kind, "count": count, "nbytes": nbytes, "dur_us": dur_us}


def _mode(name: str, times_ms: list[float], calls_per_rank: list[list[dict]], *, param_bytes: int | None = P) -> ModeMetrics:
    """A mode of len(calls_per_rank) ranks and 2 profiled steps; phase_collectives summed over both steps."""
    ranks = [
        {
            "rank": r,
            "device": "cpu",
            "comm_us": 4000.0,
            "compute_us": 8000.0,
            "overlap_us": 0.0,
            "exposed_comm_us": 4000.0,
            "overlap_pct": 0.0,
            "steps": [{"step": s, **dict.fromkeys(STEP_NUMBERS)} for s in (1, 2)],
            "collectives": [],
            "phases": [],
            "phase_collectives": calls,
            "wait_us": None,
            "transfer_us": None,
        }
        for r, calls in enumerate(calls_per_rank)
    ]
    return ModeMetrics(
        mode=name,
        step_time=StepTimes.from_times(times_ms, method="perf_counter+barrier"),
        memory=(),
        checks=(),
        trace_dir=name,
        analysis=msgspec.convert({"ranks": ranks, "world_size": len(ranks), "slowest_rank": None}, AnalysisRecord),
        model_param_bytes=param_bytes,
    )


def _run(*mode_list: ModeMetrics, reshard: str = "true") -> RunMetrics:
    by_name = {m.mode: m for m in mode_list}
    metrics = RunMetrics(
        schema_version=SCHEMA_VERSION,
        run_dir="/nowhere",
        config=RunConfig.from_dict({"reshard_after_forward": reshard}),
        env=Env(world_size=2),
        modes=by_name,
        checks=(),
        speedup=speedup(by_name),
    )
    return with_summary(metrics)


def _both(*calls: dict) -> list[list[dict]]:
    """The same calls on both ranks."""
    return [list(calls), list(calls)]


# Two profiled steps each: every parameter byte once per step is 2 * P over the record's two steps.
DDP = _both(_calls("backward", "all_reduce", 2, 2 * P, 3000))
FSDP2 = _both(
    _calls("forward", "all_gather", 8, 2 * P, 2000),
    _calls("backward", "all_gather", 8, 2 * P, 1000),
    _calls("backward", "reduce_scatter", 8, 2 * P, 4000),
)
SEQUENTIAL = _both(_calls("backward", "all_reduce", 8, 2 * P + 16, 5000))  # a few padding bytes
SPLIT = _both(_calls("backward", "reduce_scatter", 8, 2 * P, 3000), _calls("optimizer", "all_gather", 5, P, 1000))
BLOCKING = _both(_calls("backward", "reduce_scatter", 8, 2 * P, 3000), _calls("optimizer", "all_gather", 8, 2 * P, 1000))


def test_collectives_by_phase_are_per_profiled_step_and_mean_over_ranks():
    calls = [
        [_calls("other", "broadcast", 2, 400, 100), _calls("backward", "all_gather", 4, 4000, 800)]
        + [_calls("forward", "all_gather", 4, 4000, 600)],
        [_calls("forward", "all_gather", 4, 4000, 1000), _calls("backward", "all_gather", 4, None, 400)],  # no broadcast on rank 1
    ]
    rows = _run(_mode("fsdp2", [10, 10, 10], calls)).summary.modes["fsdp2"].phase_collectives
    # Phase order (forward, backward, optimizer, other), then kind.
    assert [(r.phase, r.kind) for r in rows] == [("forward", "all_gather"), ("backward", "all_gather"), ("other", "broadcast")]
    forward, backward, other = rows
    # 2 ranks, 2 profiled steps: the ranks' sum / 2 / 2.
    assert forward.calls_per_step == (4 + 4) / 2 / 2 and forward.bytes_per_step == (4000 + 4000) / 2 / 2
    assert forward.ms_per_step == pytest.approx((600 + 1000) / 2 / 2 / 1e3)
    assert backward.bytes_per_step is None  # one rank's size is unknown
    assert other.calls_per_step == 2 / 2 / 2 and other.bytes_per_step == 400 / 2 / 2  # rank 1 counts 0


def test_bytes_ratio_of_every_mode_against_the_parameter_bytes():
    four = (_mode("sequential", [20] * 3, SEQUENTIAL), _mode("split", [10] * 3, SPLIT))
    four += (_mode("ddp", [9] * 3, DDP), _mode("fsdp2", [30] * 3, FSDP2))
    run = _run(*four)
    checks = {name: [(c.phase, c.kind, c.expected, c.matches) for c in x.bytes_checks] for name, x in run.summary.modes.items()}
    assert checks == {
        "sequential": [("backward", "all_reduce", 1.0, True)],
        # split's all_gathers are not checked (the last profiled step's run after its window): 0.5 P here.
        "split": [("backward", "reduce_scatter", 1.0, True)],
        "ddp": [("backward", "all_reduce", 1.0, True)],
        "fsdp2": [("forward", "all_gather", 1.0, True), ("backward", "all_gather", 1.0, True), ("backward", "reduce_scatter", 1.0, True)],
    }
    assert run.summary.modes["sequential"].bytes_checks[0].ratio == pytest.approx((2 * P + 16) / 2 / P)
    assert run.summary.modes["ddp"].bytes_checks[0].ratio == 1.0

    # Without resharding, fsdp2 gathers nothing in backward: 0 expected, and a backward gather is a mismatch.
    kept = _run(_mode("fsdp2", [30] * 3, _both(FSDP2[0][0], FSDP2[0][2])), reshard="false").summary.modes["fsdp2"].bytes_checks
    assert [(c.phase, c.kind, c.ratio, c.expected, c.matches) for c in kept][1] == ("backward", "all_gather", 0.0, 0.0, True)
    regathered = _run(_mode("fsdp2", [30] * 3, FSDP2), reshard="false").summary.modes["fsdp2"].bytes_checks[1]
    assert (regathered.ratio, regathered.matches) == (1.0, False)

    # Above the padding allowance, missing, or of unknown size.
    over = round(2 * P * (1 + 2 * BYTES_PADDING))  # bytes are whole
    (too_many,) = _run(_mode("ddp", [9] * 3, _both(_calls("backward", "all_reduce", 2, over, 1)))).summary.modes["ddp"].bytes_checks
    assert too_many.matches is False and too_many.ratio == pytest.approx(1 + 2 * BYTES_PADDING)
    (elsewhere,) = _run(_mode("ddp", [9] * 3, _both(_calls("other", "all_reduce", 2, 2 * P, 1)))).summary.modes["ddp"].bytes_checks
    assert (elsewhere.ratio, elsewhere.matches) == (0.0, False)
    (unknown,) = _run(_mode("ddp", [9] * 3, _both(_calls("backward", "all_reduce", 2, None, 1)))).summary.modes["ddp"].bytes_checks
    assert (unknown.ratio, unknown.matches) == (None, None)
    # No parameter bytes (a record before schema 3) or no attribution: nothing to check.
    assert _run(_mode("ddp", [9] * 3, DDP, param_bytes=None)).summary.modes["ddp"].bytes_checks == ()
    assert _run(_mode("ddp", [9] * 3, [[], []])).summary.modes["ddp"].bytes_checks == ()


def test_speedup_vs_first_in_the_run_order_with_five_modes():
    five = (
        _mode("ddp", [10, 10.5, 11], DDP),
        _mode("sequential", [20, 20, 20], SEQUENTIAL),
        _mode("split", [10.2, 10.4, 10.8], SPLIT),
        _mode("split-blocking", [], BLOCKING),  # not timed (a failed verification stops a mode first)
        _mode("fsdp2", [40, 40, 40], FSDP2),
    )
    run = _run(*five)
    assert list(run.summary.modes) == ["ddp", "sequential", "split", "split-blocking", "fsdp2"]  # the run's order
    rows = {x.mode: x for x in run.summary.speedup_vs_first}
    assert list(rows) == list(run.summary.modes) and {x.baseline for x in rows.values()} == {"ddp"}
    assert (rows["ddp"].speedup, rows["ddp"].within_noise) == (1.0, None)
    assert rows["sequential"].speedup == pytest.approx(10.5 / 20) and rows["sequential"].within_noise is False
    assert rows["split"].speedup == pytest.approx(10.5 / 10.4) and rows["split"].within_noise is True
    assert rows["split-blocking"].speedup is None and rows["fsdp2"].speedup == pytest.approx(10.5 / 40)
    # The headline keeps its names: speedup stays sequential / split; every mode's step time is there.
    h = run.summary.headline
    assert set(h) == set(HEADLINE_NAMES) and h["speedup"] == pytest.approx(20 / 10.4)
    assert (h["ddp_step_ms"], h["fsdp2_step_ms"], h["split_blocking_step_ms"]) == (10.5, 40, None)
    # The summary survives metrics.json.
    again = RunMetrics.from_json(json.loads(json.dumps(run.to_json())))
    assert again.summary == run.summary

    # Rendered in that order, from the record alone.
    out = io.StringIO()
    rich = Console(file=out, width=200, color_system=None)
    rich.print(console.summary_table(run))
    for line in console.attribution_lines(run):
        rich.print(line)
    text = out.getvalue()
    assert "speedup vs ddp" in text and "*: within run-to-run noise of ddp's step time" in text
    lines = [ln.split()[0] for ln in text.splitlines() if ln.strip().split(" ")[0] in rows and "ms" not in ln.split()[0]]
    assert lines[:5] == ["ddp", "sequential", "split", "split-blocking", "fsdp2"]
    assert "0.53x" in text and "1.01x*" in text
    assert "  fsdp2: all_gather issued in forward and backward (8 calls/step, 1.91 MiB/step), reduce_scatter in backward" in text
    assert modes.describe(run.summary.modes["split"]) == (
        "split: reduce_scatter issued in backward (4 calls/step, 0.95 MiB/step), all_gather in optimizer (2.5 calls/step, 0.48 MiB/step)"
    )
    assert text.count("all match") == 1


def test_notes_state_the_bytes_ratios_and_a_mismatch_first():
    fine = _run(_mode("ddp", [9] * 3, DDP), _mode("fsdp2", [30] * 3, FSDP2))
    said = ["".join(p if isinstance(p, str) else p.text for p in note) for note in notes.notes(fine, fine.summary.modes)]
    assert said[-1].startswith("Collective bytes add up: per profiled step, ddp all-reduced 1.00× P in backward; fsdp2 all-gathered ")
    assert "1.00× P in forward and 1.00× in backward, and reduce-scattered 1.00× P in backward" in said[-1]

    bad = _run(_mode("ddp", [9] * 3, DDP), _mode("fsdp2", [30] * 3, FSDP2), reshard="false")
    said = ["".join(p if isinstance(p, str) else p.text for p in note) for note in notes.notes(bad, bad.summary.modes)]
    assert said[0].startswith("Collective bytes do not add up")
    assert "fsdp2 all-gathered 1.00× P in backward, where 0× was expected (none: not resharded after forward)" in said[0]
    assert not any(s.startswith("Collective bytes add up") for s in said)


# ---------------------------------------------------------------- real runs


@pytest.fixture(scope="module")
def engine_runs(engine_run_2, ddp_run_2):
    """The shared 2-rank run of sequential, split, ddp and fsdp2, and a ddp-only run, of the same tiny transformer."""
    return {"four": engine_run_2, "ddp": ddp_run_2}


def test_four_modes_side_by_side_in_console_and_report(engine_runs):
    run_dir, stdout = engine_runs["four"]
    run = load_run(run_dir)
    s = run.metrics.summary
    assert list(s.modes) == list(FOUR) and [x.mode for x in s.speedup_vs_first] == list(FOUR)

    # Console: every mode's row with its speedup over sequential, one attribution line per mode, the bytes verdict.
    assert "speedup vs" in stdout  # "sequential" may wrap onto the next header line
    table = stdout[stdout.index("━") : stdout.index("busbw GB/s")]  # the rows, under the header's rule
    assert [ln.split()[0] for ln in table.splitlines()[1:] if ln.strip() and not ln.strip().startswith("*")] == list(FOUR)
    assert "  ddp: all_reduce issued in backward (1 call/step, 0.51 MiB/step)" in stdout
    assert "  fsdp2: all_gather issued in forward and backward (8 calls/step, 1.02 MiB/step), reduce_scatter in backward" in stdout
    assert "  sequential: all_reduce issued in backward (4 calls/step, 0.51 MiB/step)" in stdout
    assert "  split: reduce_scatter issued in backward (4 calls/step, 0.51 MiB/step)" in stdout
    bytes_line = next(ln for ln in stdout.splitlines() if ln.startswith("collective bytes per step"))
    assert "fsdp2 fwd all_gather 1.00x, bwd all_gather 1.00x, bwd reduce_scatter 1.00x" in stdout.replace("\n", " ")
    assert "all match" in stdout and "MISMATCH" not in stdout, bytes_line

    # Every checked row of every mode moved the model's parameter bytes once per step (2 gloo ranks: no padding).
    assert {(x.mode, c.phase, c.kind, c.ratio, c.matches) for x in s.modes.values() for c in x.bytes_checks} == {
        ("sequential", "backward", "all_reduce", 1.0, True),
        ("split", "backward", "reduce_scatter", 1.0, True),
        ("ddp", "backward", "all_reduce", 1.0, True),
        ("fsdp2", "forward", "all_gather", 1.0, True),
        ("fsdp2", "backward", "all_gather", 1.0, True),
        ("fsdp2", "backward", "reduce_scatter", 1.0, True),
    }

    md = (run_dir / "report.md").read_text()
    assert "## Sequential vs split vs ddp vs fsdp2" in md and "| | sequential | split | ddp | fsdp2 |" in md.replace("|   |", "| |")
    assert "](#step-time-and-speedup) vs sequential (×) | 1.00× |" in md
    assert "4 ways, in this order. sequential" in md and "ddp: torch's DistributedDataParallel" in md
    assert "Against sequential, the first mode (median step " in md  # the verdict's second paragraph: every mode
    section = md[md.index("## Communication by phase") : md.index("## What overlapping won")]
    for mode in FOUR:
        assert f"\n{mode}: " in section and f"_{mode}: collectives by the phase that issued them" in section
    assert "\nddp: all_reduce issued in backward (1 call/step, 0.51 MiB/step).\n" in section
    assert section.count("| OK |") == 6 and "MISMATCH" not in section
    assert "| fsdp2 | backward | all_gather | 0.51 | 1.000 | 1× (again: resharded after forward) | OK |" in section
    assert "Collective bytes add up: per profiled step, sequential all-reduced [1.00×](#communication-by-phase) P in backward" in md

    # TensorBoard: one run per mode, each with its speedup over the first among its HParams metrics.
    from tensorboard.backend.event_processing.event_file_loader import LegacyEventFileLoader

    for x in s.speedup_vs_first:
        (events,) = (run_dir / x.mode).glob("events.out.tfevents.*.profile_overlap")
        tagged = [v for e in LegacyEventFileLoader(str(events)).Load() for v in e.summary.value if v.tag == "headline/speedup_vs_first"]
        values = [v.simple_value for v in tagged]
        assert values == [pytest.approx(x.speedup, rel=1e-6)], x.mode

    # The figure stacks the modes in the run's order.
    from profile_overlap.render import timeline

    fig = timeline.figure(run.metrics, run.timeline)
    assert [ax.get_title(loc="left").split(":")[0] for ax in fig.axes] == list(FOUR)


def test_one_engine_mode_and_two_runs_with_different_modes(engine_runs, tmp_path):
    run_dir, stdout = engine_runs["ddp"]
    one = load_run(run_dir)
    assert list(one.metrics.summary.modes) == ["ddp"] and one.metrics.speedup is None
    assert "  ddp: all_reduce issued in backward (1 call/step, 0.51 MiB/step)" in stdout and "ddp bwd all_reduce 1.00x: all match" in stdout
    md = (run_dir / "report.md").read_text()
    assert "ddp only: median step" in md and "What was run: one real training step" in md
    assert "Collective bytes add up: per profiled step, ddp all-reduced" in md

    # Modes as columns: A's order, then B's other modes; only the shared one is compared.
    four = load_run(engine_runs["four"][0])
    md = render_md(build_compare(four, one), figure_png=None)
    assert "| | sequential | split | ddp | fsdp2 |" in md.replace("|   |", "| |")
    assert "ddp: B is" in md or "ddp: no measurable difference" in md
    assert "Only in A: sequential, split, fsdp2: nothing to compare these modes with." in md
    assert "are of split in A and of ddp in B." in md
    assert "| B: [speedup](#step-time-and-speedup) vs ddp | – | – | 1.00× | – |" in md
    md = render_md(build_compare(one, four), figure_png=None)
    assert "| | ddp | sequential | split | fsdp2 |" in md.replace("|   |", "| |")

    # A record whose modes came in another order is shown in that order (no fixed list).
    flipped = msgspec.structs.replace(four.metrics, modes=dict(reversed(four.metrics.modes.items())))
    assert list(with_summary(flipped).summary.modes) == list(reversed(FOUR))
