"""`analyze`'s console whatever the trace's length: summaries by default, a row per step only when
asked (--per-step) or in the CSV beside --json OUT (issue 38)."""

from __future__ import annotations

import csv
import json

import pytest
from synthetic import write_large_trace

from profile_overlap.cli.main import main


@pytest.fixture(scope="module")
def long_traces(tmp_path_factory):
    """Two ranks of 100-odd profiled steps each."""
    folder = tmp_path_factory.mktemp("long")
    for r in range(2):
        write_large_trace(folder / f"rank{r}.pt.trace.json", target_bytes=1_600_000, rank=r, world_size=2, layers_per_step=5)
    return folder


def analyze(capsys, monkeypatch, *args):
    monkeypatch.setenv("COLUMNS", "160")
    assert main(["analyze", *map(str, args)]) == 0
    return capsys.readouterr().out


def test_a_long_trace_prints_a_line_counting_its_steps_not_a_row_per_step(long_traces, capsys, monkeypatch):
    out = analyze(capsys, monkeypatch, long_traces)
    counted = [line for line in out.splitlines() if line.startswith("Profiler steps: ")]
    assert len(counted) == 1 and " per rank (ProfilerStep#" in counted[0] and "--per-step" in counted[0]
    steps = int(counted[0].split()[2].replace(",", ""))
    assert steps > 90
    assert len(out.splitlines()) < 60, out  # the rank and collective tables, the causes, the checks
    assert "Overlap per rank" in out and "Collectives per rank" in out


def test_per_step_prints_a_row_per_rank_and_step(long_traces, capsys, monkeypatch):
    out = analyze(capsys, monkeypatch, long_traces, "--per-step")
    first = analyze(capsys, monkeypatch, long_traces).splitlines()
    steps = int(next(line for line in first if line.startswith("Profiler steps: ")).split()[2].replace(",", ""))
    assert "Profiler steps (each metric clipped" in out
    table = out[out.index("Profiler steps (each metric clipped") :]
    rows = [line for line in table.splitlines() if line.startswith("│")]
    assert len(rows) == 2 * steps


def test_with_json_the_line_names_the_steps_csv_which_holds_every_row(long_traces, tmp_path, capsys, monkeypatch):
    out = analyze(capsys, monkeypatch, long_traces, "--json", tmp_path / "a.json")
    line = next(line for line in out.splitlines() if line.startswith("Profiler steps: "))
    steps = int(line.split()[2].replace(",", ""))
    assert str(tmp_path / "a.steps.csv") in line
    with open(tmp_path / "a.steps.csv", newline="") as f:
        assert len(list(csv.DictReader(f))) == 2 * steps


def test_ranks_that_wait_alike_name_no_rank_the_others_wait_for(long_traces, tmp_path, capsys, monkeypatch):
    # Every call takes as long on one rank as on the other: neither waits, so neither holds the
    # other back (before, the lower rank won the tie and the console said the others waited for it).
    out = analyze(capsys, monkeypatch, long_traces, "--json", tmp_path / "a.json")
    record = json.loads((tmp_path / "a.json").read_text())
    assert [r["wait_us"] for r in record["ranks"]] == [0.0, 0.0]
    assert record["slowest_rank"] is None
    assert "waits least" not in out
    words = " ".join(out.split())  # the console wraps its lines
    assert "Wait vs transfer: each collective call is matched" in words
    assert "Every rank waits the same: none holds the others back." in words
