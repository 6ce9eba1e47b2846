"""Which rank the others wait for, read two ways: by the calls' durations (`slowest_rank`, the
least wait) and by the aligned clock (`last_arrival_pct`, who started each call last). Where the
two name different ranks, the console, the report's straggler view and its note say so, rather
than name the durations' rank as the one the others wait for while Why exposed names the other."""

from __future__ import annotations

from pathlib import Path

from profile_overlap.analysis.world.cross_rank import RankWait, _clock_slowest
from profile_overlap.cli.main import main
from profile_overlap.record.load import load_metrics

DATA = Path(__file__).parent / "data"


def words_of_analyze(capsys, monkeypatch, *args) -> str:
    monkeypatch.setenv("COLUMNS", "160")
    assert main(["analyze", *map(str, args)]) == 0
    return " ".join(capsys.readouterr().out.split())  # the console wraps its lines


def test_the_console_says_when_the_durations_and_the_arrivals_name_different_ranks(capsys, monkeypatch):
    # gloo_2rank: rank 1's calls are shorter (wait 12.4 ms against rank 0's 40.4), yet rank 0 starts
    # all 6 matched calls last, and runs its last all_reduce 35 ms past rank 1's end: by duration
    # rank 1 holds the other back, by the clock rank 0 does (Why exposed: late rank 0).
    words = words_of_analyze(capsys, monkeypatch, DATA / "gloo_2rank")
    assert (
        "Rank 1 waits least by duration, but on the aligned clock rank 0 started last at 100.0% of its matched calls "
        "(rank 1 at 0.0%)" in words
    )
    assert "the two disagree on which rank the others wait for" in words
    assert "the others wait for it" not in words
    assert "late rank 0" in words


def test_where_they_agree_the_console_names_one_rank(capsys, monkeypatch):
    # hta_trace_filter_2rank: rank 1 waits least and starts 80% of the matched calls last.
    words = words_of_analyze(capsys, monkeypatch, DATA / "hta_trace_filter_2rank")
    assert "Rank 1 waits least: the others wait for it." in words
    assert "disagree" not in words


def test_the_report_says_it_in_the_straggler_view_and_its_note(tmp_path, capsys, monkeypatch):
    out = tmp_path / "overlap"
    words_of_analyze(capsys, monkeypatch, DATA / "gloo_2rank", "--tensorboard", out)
    analysis = load_metrics(out / "metrics.json").modes["trace"].analysis
    assert analysis is not None and analysis.slowest_rank == 1 and analysis.clock_slowest_rank == 0
    assert main(["report", str(out)]) == 0
    report = (out / "report.md").read_text()
    assert (
        "On the aligned clocks, rank 0 arrived last at [100.0%](#clock-alignment-across-ranks) of the collective calls. "
        "The durations and the arrivals disagree on which rank the others wait for "
        "(rank 1 against [rank 0](#wait-vs-transfer-across-ranks))"
    ) in report
    assert "| **waits least (by duration)** |" in report and "slowest: the others wait for it" not in report
    note = next(line for line in report.splitlines() if line.startswith("- Ranks wait for each other"))
    assert "rank 0 at [100.0%](#clock-alignment-across-ranks): the durations and the arrivals disagree" in note


def _waits(pcts: dict[int, float | None]) -> list[RankWait]:
    return [RankWait(rank=r, wait_us=0.0, transfer_us=0.0, matched=4, last_arrival_pct=p) for r, p in pcts.items()]


def test_the_clock_names_another_rank_only_where_both_readings_place_the_ranks():
    assert _clock_slowest(_waits({0: 20.0, 1: 80.0}), 1) is None  # they agree
    assert _clock_slowest(_waits({0: 80.0, 1: 20.0}), 1) == 0
    assert _clock_slowest(_waits({0: 60.0, 1: 20.0, 2: 20.0}), 2) == 0  # last at most of its calls
    # No rank last at most of its calls: 4 ranks, 16 calls, one call apart (the quickstart's run).
    assert _clock_slowest(_waits({0: 25.0, 1: 31.25, 2: 25.0, 3: 18.75}), 0) is None
    assert _clock_slowest(_waits({0: 50.0, 1: 50.0}), 1) is None  # the slowest starts last as often
    assert _clock_slowest(_waits({0: 100.0, 1: None}), 1) is None  # rank 1's clock not aligned: unknown, not 0%
    assert _clock_slowest(_waits({0: 100.0, 1: 0.0}), None) is None  # every rank waits the same
