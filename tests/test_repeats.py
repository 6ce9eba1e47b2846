"""--repeats: modes alternate in blocks inside one job, and every noise verdict follows from intervals
over the blocks. The bootstrap on hand-made blocks with known answers, the record's rules, the compare
verdicts of single runs and of runs with repeats, and one real 2-rank job on gloo."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import msgspec
import pytest

from profile_overlap.record import noise
from profile_overlap.record.folder import Run, load_run
from profile_overlap.record.metrics import StepTimes
from profile_overlap.render import html
from profile_overlap.render.compare import build_compare
from profile_overlap.render.markdown import render as render_md
from profile_overlap.render.report import build

from conftest import SMALL, cli, only_run_dir, torchrun

GOLDEN_RUN = Path(__file__).resolve().parent / "golden" / "run"


# ---------------------------------------------------------------- the bootstrap, by hand


def test_two_blocks_give_the_interval_between_them():
    # A resample of 2 blocks is (a, a), (a, b), (b, a) or (b, b): pooled medians a, (a+b)/2, (a+b)/2, b
    # with chances 1/4, 1/2, 1/4, so the 2.5th and 97.5th percentiles are exactly a and b.
    interval = noise.median_interval([[10.0] * 4, [14.0] * 4])
    assert (interval.low, interval.high) == (10.0, 14.0)
    assert noise.median_interval([[10.0, 11.0, 12.0]]) is None  # one block: no interval
    same = noise.median_interval([[7.0, 7.0], [7.0, 7.0], [7.0, 7.0]])
    assert (same.low, same.high) == (7.0, 7.0)


def test_pairing_by_round_cancels_drift():
    # The machine slows down 8-fold over four rounds; in every round the other mode takes half as long.
    drift = (1.0, 2.0, 4.0, 8.0)
    first = [[10.0 * d] * 5 for d in drift]
    other = [[5.0 * d] * 5 for d in drift]
    paired = noise.paired_ratio_interval(first, other)
    assert (paired.low, paired.high) == (2.0, 2.0)  # every resample's ratio is exactly 2
    alone = noise.median_interval(first)
    assert alone.low <= 20.0 and alone.high >= 40.0  # unpaired, the drift is all there is
    difference = noise.paired_difference_interval([[d + 3.0] * 5 for d in drift], [[d] * 5 for d in drift])
    assert (difference.low, difference.high) == (3.0, 3.0)
    assert noise.paired_ratio_interval(first, other[:3]) is None  # not the same rounds


def test_the_bootstrap_is_seeded():
    blocks = [[10.0, 11.0, 10.5], [12.0, 12.5, 11.0], [9.0, 9.5, 10.0], [11.0, 13.0, 12.0]]
    assert noise.median_interval(blocks) == noise.median_interval(blocks)
    low, high = noise.median_interval(blocks).low, noise.median_interval(blocks).high
    assert 9.0 <= low < high <= 13.0


def test_single_runs_tell_only_changes_beyond_the_measured_spread():
    x = noise.single_run_bound()
    assert x == pytest.approx(math.exp(1.959964 * math.sqrt(2) * noise.SINGLE_RUN_SD) - 1)
    # Steps that never vary: the runs' own spread is 0, so the least change they can tell is exactly x.
    inside = noise.compare_runs([[10.0, 10.0]], [[10.0 * (1 + x / 2)] * 2])
    assert (inside.rule, inside.different, inside.smallest_change) == (noise.SINGLE_RUNS, False, pytest.approx(x))
    assert noise.compare_runs([[10.0] * 2], [[10.0 / (1 + x / 2)] * 2]).different is False  # faster, inside too
    assert noise.compare_runs([[10.0] * 2], [[10.0 * (1 + 2 * x)] * 2]).different is True
    # Steps that vary widen it: the same 2x change is no longer told from noise.
    noisy = [[5.0, 10.0, 20.0, 7.0, 14.0]]
    assert noise.compare_runs(noisy, [[t * (1 + 2 * x) for t in noisy[0]]]).different is False


def test_runs_with_repeats_add_the_job_to_job_spread():
    # Blocks that never vary: each run's own spread is 0, so s = sqrt(2) * RUN_TO_RUN_SD exactly.
    s = math.sqrt(2) * noise.RUN_TO_RUN_SD
    a = [[10.0] * 3] * 4
    near = noise.compare_runs(a, [[10.0 * math.exp(0.5 * 1.959964 * s)] * 3] * 4)
    assert near.rule == noise.BETWEEN_RUNS and near.different is False
    assert near.interval.low == pytest.approx(math.exp(0.5 * 1.959964 * s - 1.959964 * s))
    far = noise.compare_runs(a, [[10.0 * math.exp(2 * 1.959964 * s)] * 3] * 4)
    assert far.different is True and far.interval.low > 1


def test_few_blocks_widen_the_limit_by_students_t():
    assert noise.t_quantile(4) == 2.776 and noise.t_quantile(1e12) == pytest.approx(1.959964)
    # Two runs of 5 blocks, each log median with variance v, no job-level part: Welch's degrees of
    # freedom are (2v)^2 / (2 v^2 / 4) = 8, and t(8) = 2.306.
    assert noise.difference_limit(0.01, 5, 0.01, 5, 0.0) == pytest.approx(2.306 * math.sqrt(0.02))
    # All of it job-level (known): the normal quantile.
    assert noise.difference_limit(0.0, 5, 0.0, 5, 0.1) == pytest.approx(1.959964 * math.sqrt(0.02))


# ---------------------------------------------------------------- the record's rules


def _run_with_blocks(tmp_path: Path, name: str, blocks: dict[str, list[list[float]]]) -> Run:
    """The golden run's record with each mode's timed steps replaced by `blocks`."""
    data = json.loads((GOLDEN_RUN / "metrics.json").read_text())
    for mode, mode_blocks in blocks.items():
        flat = [t for b in mode_blocks for t in b]
        data["modes"][mode]["step_time"] = msgspec.to_builtins(
            StepTimes.from_times(flat, method="perf_counter+barrier", blocks_ms=tuple(map(tuple, mode_blocks)))
        )
    data.pop("summary", None)
    run_dir = tmp_path / name
    run_dir.mkdir()
    for file in ("config.json", "env.json", "status.json"):
        shutil.copy(GOLDEN_RUN / file, run_dir / file)
    (run_dir / "metrics.json").write_text(json.dumps(data))
    return load_run(run_dir)


def test_with_repeats_within_noise_follows_the_paired_interval(tmp_path):
    # Split is 10% faster in every round, but the rounds drift so much that the steps of the two
    # modes overlap: the p10-p90 rule would call them equal, the paired interval does not.
    drift = (1.0, 1.6, 1.2, 2.0, 1.4)
    run = _run_with_blocks(
        tmp_path,
        "paired",
        {"sequential": [[20.0 * d, 20.2 * d, 19.8 * d] for d in drift], "split": [[18.0 * d, 18.2 * d, 17.8 * d] for d in drift]},
    )
    s = run.metrics.summary
    assert s.noise.rule == noise.PAIRED_BLOCKS and s.noise.num_blocks == 5
    assert s.noise.speedup.low > 1 and s.within_noise is False
    row = next(x for x in s.speedup_vs_first if x.mode == "split")
    assert s.noise.speedup_vs_first["split"] == s.noise.speedup and row.within_noise is False
    st = run.metrics.modes["split"].step_time
    assert s.noise.step_time_ms["split"].contains(st.median_ms)
    md = render_md(build(run), figure_png=None)
    assert "over 5 paired blocks excludes 1" in md
    html.render(build(run), figure_svg=None)  # every link lands on a definition


def test_one_block_keeps_the_p10_p90_rule(tmp_path):
    run = _run_with_blocks(tmp_path, "one", {"sequential": [[20.0, 30.0, 25.0]], "split": [[24.0, 28.0, 22.0]]})
    s = run.metrics.summary
    assert (s.noise.rule, s.noise.num_blocks, s.noise.speedup) == (noise.P10_P90, 1, None)
    assert s.within_noise is True  # each median inside the other's p10-p90
    assert "each inside the other's p10–p90 range" in render_md(build(run), figure_png=None)


# ---------------------------------------------------------------- report --compare


def test_compare_of_single_runs_says_it_cannot_tell(tmp_path):
    # Both runs at the same code, B 15.6% slower: the case. One run each is not enough to say so.
    a = _run_with_blocks(tmp_path, "a", {"sequential": [[72.5, 71.0, 74.0]], "split": [[60.0, 61.0, 59.0]]})
    b = _run_with_blocks(tmp_path, "b", {"sequential": [[83.7, 82.0, 85.0]], "split": [[60.5, 61.0, 60.0]]})
    report = build_compare(a, b)
    verdict = render_md(report, figure_png=None)
    diff = noise.compare_runs([[72.5, 71.0, 74.0]], [[83.7, 82.0, 85.0]])
    assert not diff.different and diff.smallest_change > 83.7 / 72.5 - 1
    assert "sequential: no measurable difference with one run each" in verdict
    assert f"One run each cannot tell a change below [{diff.smallest_change:.0%}](#comparing-two-runs)" in verdict
    assert "more than [run-to-run noise]" not in verdict
    html.render(report, figure_svg=None)


def test_compare_of_runs_with_repeats_uses_intervals(tmp_path):
    same = [[20.0, 20.4, 19.6], [21.0, 20.8, 21.2], [19.5, 19.8, 20.1], [20.2, 20.0, 20.5]]
    a = _run_with_blocks(tmp_path, "a", {"sequential": same, "split": same})
    slower = [[t * 2 for t in b] for b in same]
    b = _run_with_blocks(tmp_path, "b", {"sequential": same, "split": slower})
    verdict = render_md(build_compare(a, b), figure_png=None)
    assert "sequential: no measurable difference" in verdict and "which contains 1" in verdict
    assert "split: B is slower" in verdict and "which excludes 1), so more than" in verdict
    assert "from 4 and 4 blocks" in verdict
    assert "A: [95% interval](#step-time-and-speedup) of the median (ms)" in verdict


# ---------------------------------------------------------------- a real job


def test_rounds_rotate_so_every_mode_takes_every_place():
    from profile_overlap.run.harness import rounds

    assert rounds(["a", "b"], 3) == [("a", "b"), ("b", "a"), ("a", "b")]
    assert rounds(["a", "b", "c"], 4) == [("a", "b", "c"), ("b", "c", "a"), ("c", "a", "b"), ("a", "b", "c")]
    assert rounds([], 3) == []


@pytest.mark.slow
def test_repeats_alternate_blocks_in_one_job(tmp_path):
    proc = torchrun(["--mode", "compare", "--modes", "sequential,split", "--repeats", "3", "--out", str(tmp_path), *SMALL], nproc=2)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run_dir = only_run_dir(tmp_path)
    record = json.loads((run_dir / "metrics.json").read_text())
    # Rounds rotate: sequential first, then split first, then sequential first.
    assert record["rounds"] == [["sequential", "split"], ["split", "sequential"], ["sequential", "split"]]
    steps = int(SMALL[SMALL.index("--steps") + 1])
    for mode in ("sequential", "split"):
        st = record["modes"][mode]["step_time"]
        assert [len(b) for b in st["blocks_ms"]] == [steps] * 3
        assert [t for b in st["blocks_ms"] for t in b] == st["times_ms"]
        interval = record["summary"]["noise"]["step_time_ms"][mode]
        assert interval["low"] <= st["median_ms"] <= interval["high"]
        assert (run_dir / mode).is_dir()  # profiled once per mode, after the rounds
    noise_record = record["summary"]["noise"]
    assert noise_record["rule"] == "paired blocks" and noise_record["num_blocks"] == 3
    speedup = noise_record["speedup"]
    assert speedup["low"] <= record["speedup"]["measured"] <= speedup["high"]
    assert record["summary"]["within_noise"] == (speedup["low"] <= 1 <= speedup["high"])
    assert all(c["passed"] for c in record["checks"])  # the same steps on the same data, blocks or not
    assert "round 2/3: 3 timed steps of split, sequential" in proc.stdout
    # report --compare of the run with itself: by interval, and no difference.
    out = tmp_path / "cmp"
    done = cli(["report", "--compare", str(run_dir), str(run_dir), "--out", str(out), "--format", "md"])
    assert done.returncode == 0, done.stderr
    md = next(out.glob("*.md")).read_text()
    assert "sequential: no measurable difference" in md and "which contains 1" in md


@pytest.mark.slow
def test_repeats_zero_is_one_line():
    proc = cli(["--repeats", "0"])
    assert proc.returncode == 2
    assert "--repeats must be a positive integer, got 0" in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
