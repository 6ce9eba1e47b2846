"""The package's commands and renderers in this process, fed recorded data (tests/data traces,
the golden run): the fast subset's view of modules that the end-to-end tests reach only through
torchrun jobs and subprocesses."""

from __future__ import annotations

import json
import runpy
import shutil
import sys

import pytest

from profile_overlap.cli.main import main
from profile_overlap.core.files import METRICS_JSON, REPORT_HTML, REPORT_MD, TIMELINE_JSON
from profile_overlap.record.folder import load_run

from conftest import DATA, REPO

GLOO = DATA / "gloo_2rank"
GOLDEN_RUN = REPO / "tests" / "golden" / "run"


def one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in text, text
    return lines[0]


def test_analyze_prints_the_overlap_and_writes_the_record_and_the_tab_data(tmp_path, capsys):
    out, tab = tmp_path / "a.json", tmp_path / "tab"
    assert main(["analyze", str(GLOO), "--json", str(out), "--tensorboard", str(tab)]) == 0
    printed = capsys.readouterr().out
    record = json.loads(out.read_text())
    assert [r["rank"] for r in record["ranks"]] == [0, 1]
    assert "overlap" in printed.lower() and f"wrote {out}" in printed
    # The tab's two files: a record the run loader reads back, one mode holding this analysis.
    tab_run = load_run(tab)
    (mode,) = tab_run.metrics.modes
    analysis = tab_run.metrics.modes[mode].analysis
    assert analysis is not None
    assert [(r.rank, r.comm_us, r.overlap_us) for r in analysis.ranks] == [
        (r["rank"], r["comm_us"], r["overlap_us"]) for r in record["ranks"]
    ]
    assert (tab / TIMELINE_JSON).is_file()


def test_analyze_gives_back_the_garbage_collector_as_it_found_it_even_when_it_fails(tmp_path, capsys):
    """The command pauses Python's cyclic garbage collector while it runs (cli/analyze.py main); a
    program that calls it keeps its collector, whether the command succeeded or failed."""
    import gc

    assert gc.isenabled()
    assert main(["analyze", str(GLOO)]) == 0 and gc.isenabled()
    assert main(["analyze", str(tmp_path)]) == 2 and gc.isenabled()
    gc.disable()
    try:
        assert main(["analyze", str(GLOO)]) == 0 and not gc.isenabled()
    finally:
        gc.enable()


def test_analyze_of_an_empty_folder_is_one_line_and_exit_2(tmp_path, capsys):
    assert main(["analyze", str(tmp_path)]) == 2
    assert str(tmp_path) in one_line(capsys.readouterr().err)


def test_python_dash_m_explains_the_worked_example(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["profile_overlap", "explain", "--world-size", "2"])
    with pytest.raises(SystemExit) as exit_:
        runpy.run_module("profile_overlap", run_name="__main__")
    assert exit_.value.code == 0
    printed = capsys.readouterr().out
    assert "reduce_scatter" in printed and "all_gather" in printed and "all_reduce" in printed


def test_whatif_on_a_folder_that_is_not_a_run_is_one_line(tmp_path, capsys):
    assert main(["whatif", str(tmp_path)]) == 2
    assert "is not a run folder" in one_line(capsys.readouterr().err)


def test_bench_collectives_refuses_a_backwards_size_range(capsys):
    assert main(["bench-collectives", "--sizes", "16M:1K"]) == 2
    assert "MAX is below MIN" in one_line(capsys.readouterr().err)


def test_tensorboard_writes_the_event_files_a_finished_run_lacks(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from profile_overlap.cli.tensorboard import write_missing_events

    run_dir = shutil.copytree(GOLDEN_RUN, tmp_path / "runs" / "golden", ignore=shutil.ignore_patterns("expected"))
    for mode in load_run(run_dir).metrics.modes:
        (run_dir / mode).mkdir()
    assert write_missing_events(tmp_path / "runs") == [run_dir]
    assert write_missing_events(tmp_path / "runs") == []  # written once
    events = EventAccumulator(str(run_dir / "split"))
    events.Reload()
    assert any(tag.endswith("overlap_pct") for tag in events.Tags()["scalars"]), events.Tags()["scalars"]


def test_tensorboard_on_a_missing_folder_is_one_line(tmp_path, capsys):
    assert main(["tensorboard", str(tmp_path / "nope")]) == 2
    assert "is not a folder" in one_line(capsys.readouterr().err)


def test_report_of_a_recorded_run_writes_html_and_markdown(tmp_path, capsys):
    run_dir = shutil.copytree(GOLDEN_RUN, tmp_path / "golden", ignore=shutil.ignore_patterns("expected"))
    assert main(["report", str(run_dir), "--format", "html,md", "--out", str(tmp_path / "out")]) == 0
    html = (tmp_path / "out" / REPORT_HTML).read_text()
    md = (tmp_path / "out" / REPORT_MD).read_text()
    # Self-contained: the timeline is an inline SVG image, nothing is fetched.
    assert 'src="data:image/svg+xml;base64,' in html and "http://" not in html and "https://" not in html
    assert "split" in md and "sequential" in md and "(timeline.png)" in md and (tmp_path / "out" / "timeline.png").is_file()
    assert (run_dir / METRICS_JSON).read_text() == (GOLDEN_RUN / METRICS_JSON).read_text()  # the record is not rewritten


def test_a_one_rank_collective_benchmark_counts_no_wrong_values(tmp_path):
    import torch
    import torch.distributed as dist

    from profile_overlap.tools.bench.collectives import bench_in_folder
    from profile_overlap.tools.bench.config import BenchConfig

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        result = bench_in_folder(
            BenchConfig(sizes="1K:4K:4", iters=2, warmup=1), backend="gloo", device=torch.device("cpu"), run_dir=tmp_path
        )
    finally:
        dist.destroy_process_group()
    assert result.passed and [row.nbytes for row in result.rows] == [1024, 4096]
    assert json.loads((tmp_path / "bench.json").read_text())["rows"][0]["nbytes"] == 1024


def test_whatif_console_shows_each_predicted_point_and_where_the_split_wins():
    import io

    from rich.console import Console

    from profile_overlap.record.whatif import SCHEMA, Crossover, SelfReplay, WhatifPoint, WhatifResult
    from profile_overlap.render.whatif import print_result

    points = (
        WhatifPoint("sequential", 8, 25.0, step_ms=12.0, exposed_comm_ms=4.0, overlap_pct=0.0, speedup_vs_first=1.0),
        WhatifPoint("split", 8, 25.0, step_ms=10.0, exposed_comm_ms=2.0, overlap_pct=50.0, speedup_vs_first=1.2),
    )
    result = WhatifResult(
        schema=SCHEMA, run_dir="r", measured_world_size=2, latency_us=4.0, compute_scale=1.0, fit=None,
        world_sizes=(8,), link_gbps=(25.0,), modes=("sequential", "split"), points=points,
        self_replay=(SelfReplay("split", measured_ms=9.0, predicted_ms=9.9, error_pct=10.0),),
        crossovers=(Crossover("split", "sequential", "world_size", at=25.0, value="from 4"),), notes=(),
    )  # fmt: skip
    out = io.StringIO()
    print_result(result, Console(file=out, width=160, color_system=None), png=None)
    text = out.getvalue()
    rows = [line.split() for line in text.splitlines() if line.strip().startswith("8 ")]
    assert rows == [["8", "25", "sequential", "12.0", "4.00", "0.0", "1.00×"], ["8", "25", "split", "10.0", "2.00", "50.0", "1.20×"]]
    assert "split beats sequential: by world size from 4 at 25 GB/s" in text
    assert "self-replay: split measured 9.00 ms, predicted 9.90 ms (error +10.0 %)" in text


def test_the_overlap_tab_lists_a_recorded_run_and_serves_its_timeline_within_the_span_budget(tmp_path):
    from profile_overlap.record.timeline import load_timeline
    from profile_overlap.tb_plugin.plugin import describe_run, find_runs, timeline_replies

    run_dir = shutil.copytree(GOLDEN_RUN, tmp_path / "logdir" / "golden", ignore=shutil.ignore_patterns("expected"))
    assert find_runs(tmp_path / "logdir") == [run_dir]
    row = describe_run(tmp_path / "logdir", run_dir)
    assert row.run == "golden" and row.modes == ["sequential", "split"] and row.has_timeline and row.error is None
    replies = {mode: json.loads(body) for mode, body in timeline_replies(load_timeline(run_dir / TIMELINE_JSON), max_spans=3).items()}
    assert list(replies) == ["sequential", "split"]
    for reply in replies.values():
        assert reply["num_spans_served"] < reply["num_spans_in_file"]
        for rank in reply["ranks"]:
            for kind in ("comm", "compute"):
                assert sum(span[3] == kind for span in rank["spans"]) <= 3


def test_a_one_rank_compare_run_in_this_process_trains_every_mode_alike_and_writes_its_folder(tmp_path, capsys):
    """No profiler (its first trace alone takes seconds): the harness, pipelines, timing and
    verification on a one-rank gloo group."""
    import torch
    import torch.distributed as dist

    from profile_overlap.run import harness
    from profile_overlap.run.config import Config

    config = Config.of(mode="compare", layers=2, dim=32, batch=8, steps=2, warmup_steps=1, profile=False)
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        metrics = harness.run_in_folder(config, backend="gloo", device=torch.device("cpu"), run_dir=tmp_path)
    finally:
        dist.destroy_process_group()
    assert list(metrics.modes) == ["sequential", "split", "split-blocking"]
    assert all(len(m.step_time.times_ms) == 2 for m in metrics.modes.values())
    checks = metrics.all_checks()
    assert checks and all(c.passed for c in checks)
    assert "sequential == split: final parameters" in {c.name for c in checks}
    assert json.loads((tmp_path / "status.json").read_text())["state"] == "succeeded"
    assert load_run(tmp_path).metrics.speedup == metrics.speedup
    assert "speedup" in capsys.readouterr().out.lower()
