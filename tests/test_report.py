"""The report: what a colleague reads without the tool. Built from the shared real 2-rank compare
run (which writes its own report when it finishes), plus copies of it altered to be hostile or
failed."""

from __future__ import annotations

import base64
import json
import re
import shutil
import sys
from pathlib import Path

import pytest

from profile_overlap.record.load import load_metrics
from profile_overlap.render import numbers, write

from conftest import clean_env, cli, with_reader_gone

pytestmark = pytest.mark.slow  # reads the shared compare run and runs `report` in a subprocess

SECTIONS = (
    "verdict",
    "setup",
    "verification",
    "comparison",
    "timeline",
    "heatmap",
    "phases",
    "attribution",
    "yield",
    "collectives",
    "stragglers",
    "exposed",
    "integrity",
    "notes",
    "definitions",
)
EVIL = "<script>alert(1)</script>"


def _copy_run(src: Path, dst: Path) -> Path:
    """The record files of a run (not its traces), to alter freely."""
    dst.mkdir(parents=True)
    for name in ("config.json", "env.json", "status.json", "metrics.json", "timeline.json"):
        shutil.copy(src / name, dst / name)
    return dst


def _section_order(html: str) -> list[str]:
    return re.findall(r'<section id="([a-z]+)"', html)


def test_a_run_writes_its_report_with_every_section(compare_run_2):
    html = (compare_run_2 / "report.html").read_text()
    md = (compare_run_2 / "report.md").read_text()
    assert _section_order(html) == list(SECTIONS)
    # The timeline is embedded, not linked; the Markdown points at the PNG beside it.
    assert html.count('src="data:image/svg+xml;base64,') == 1
    assert "![overlap timeline](timeline.png)" in md and (compare_run_2 / "timeline.png").stat().st_size > 10_000
    for title in (
        "## Verdict",
        "## Setup",
        "## Verification",
        "## Sequential vs split vs split-blocking",
        "## Overlap timeline",
        "## Phases: where communication hides",
        "## Communication by phase",
        "## What overlapping won: overlap yield and interference",
        "## Collectives",
        "## Stragglers: wait vs transfer",
        "## Notes",
        "## Appendix: metric definitions",
    ):
        assert title in md
    assert json.loads((compare_run_2 / "report.json").read_text()) == json.loads((compare_run_2 / "metrics.json").read_text())
    # Setup: the exact command and every config flag.
    metrics = load_metrics(compare_run_2 / "metrics.json")
    assert "torchrun --standalone --nproc-per-node 2 -m profile_overlap" in html
    for key in metrics.config.present():
        assert f"<td>{key}</td>" in html
    # Verification: every check, with its max error and tolerance.
    for check in metrics.all_checks():
        assert check.name in html
    # Stragglers: each rank, and one named slowest; "by duration" in a mode where the aligned clock names another.
    disputed = [m for m in metrics.modes.values() if m.analysis is not None and m.analysis.clock_slowest_rank is not None]
    assert html.count("slowest: the others wait for it") == 3 - len(disputed)  # one per mode
    assert html.count("waits least (by duration)") == len(disputed)
    assert html.count("The durations and the arrivals disagree on which rank the others wait for") == len(disputed)


def test_html_is_self_contained(compare_run_2):
    html = (compare_run_2 / "report.html").read_text()
    assert "http://" not in html and "https://" not in html
    assert "@import" not in html and "<link" not in html.lower() and "<script" not in html.lower()
    assert "url(" not in html
    for attr in re.findall(r'(?:src|href)="([^"]*)"', html):
        assert attr.startswith(("data:", "#")), attr
    # The figure is an SVG image: nothing inside it fetches anything either.
    svg = base64.b64decode(re.search(r'src="data:image/svg\+xml;base64,([^"]+)"', html).group(1)).decode()
    assert "<script" not in svg and 'href="http' not in svg and 'xlink:href="http' not in svg


def test_every_metric_link_lands_on_a_definition(compare_run_2):
    html = (compare_run_2 / "report.html").read_text()
    ids = set(re.findall(r'id="([^"]+)"', html))
    targets = set(re.findall(r'href="#([^"]+)"', html))
    assert targets and targets <= ids
    assert len([t for t in targets if t.startswith("def-")]) >= 15
    md = (compare_run_2 / "report.md").read_text()
    headings = {re.sub(r"[^\w\- ]", "", h.lower().replace("`", "")).replace(" ", "-") for h in re.findall(r"^#+ (.+)$", md, re.M)}
    assert set(re.findall(r"\]\(#([^)]+)\)", md)) <= headings


def test_headline_numbers_are_the_records(compare_run_2):
    metrics = load_metrics(compare_run_2 / "metrics.json")
    values = metrics.summary.headline
    seq, split = metrics.modes["sequential"], metrics.modes["split"]
    assert values["speedup"] == metrics.speedup.measured == seq.step_time.median_ms / split.step_time.median_ms
    assert values["predicted_speedup"] == metrics.speedup.predicted
    assert values["split_step_ms"] == split.step_time.median_ms
    ranks = split.analysis.ranks
    assert values["overlap_pct"] == pytest.approx(100 * sum(r.overlap_us for r in ranks) / sum(r.comm_us for r in ranks))
    assert values["optimizer_state_mib"] == split.memory[0].optimizer_state_bytes / 2**20
    assert values["failed_checks"] == 0
    # The verdict quotes the same numbers.
    html = (compare_run_2 / "report.html").read_text()
    verdict = html[html.index('<section id="verdict">') : html.index('<section id="setup">')]
    assert f">{numbers.ms(split.step_time.median_ms)} ms<" in verdict
    assert f">{numbers.ms(seq.step_time.median_ms)} ms<" in verdict
    assert f">{numbers.mib(split.memory[0].optimizer_state_bytes)} MiB<" in verdict
    assert "1/2 of the optimizer state" in verdict


def test_compare_two_runs_states_noise_honestly(compare_run_2, tmp_path):
    proc = cli(["report", "--compare", str(compare_run_2), str(compare_run_2), "--out", str(tmp_path)])
    assert proc.returncode == 0, proc.stderr
    stem = f"compare-{compare_run_2.name}-vs-{compare_run_2.name}"
    html = (tmp_path / f"{stem}.html").read_text()
    # A run against itself: every delta is zero and every difference is within noise.
    assert "no measurable difference" in html and "within run-to-run noise" in html
    record = json.loads((tmp_path / f"{stem}.json").read_text())
    assert all(v in (0, None) for v in record["delta"].values())
    assert record["a"]["headline"]["speedup"] == load_metrics(compare_run_2 / "metrics.json").speedup.measured


def test_fail_if_gates_on_headline_metrics(compare_run_2, tmp_path):
    speedup = load_metrics(compare_run_2 / "metrics.json").speedup.measured
    base = ["report", str(compare_run_2), "--format", "json", "--out", str(tmp_path)]
    held = cli([*base, "--fail-if", f"speedup<{speedup + 1}", "--fail-if", "overlap_pct>1000"])
    assert held.returncode == 1
    assert f"FAIL: speedup<{speedup + 1} holds" in held.stderr and "overlap_pct>1000" not in held.stderr
    passed = cli([*base, "--fail-if", f"speedup<{speedup - 0.01}", "--fail-if", "failed_checks>0"])
    assert passed.returncode == 0, passed.stderr
    unknown = cli([*base, "--fail-if", "overlap<60"])
    assert unknown.returncode == 2 and "unknown metric 'overlap'" in unknown.stderr and "overlap_pct" in unknown.stderr


def test_fail_if_decides_the_exit_status_when_stdout_has_no_reader(compare_run_2, tmp_path):
    """`report RUN --fail-if ... | head -1`: head has gone before the gate's lines; the exit status is
    still the gate's (0 for a pass, not 1 from the broken pipe), and the files are written."""
    speedup = load_metrics(compare_run_2 / "metrics.json").speedup.measured
    base = [sys.executable, "-m", "profile_overlap", "report", str(compare_run_2), "--format", "json", "--out", str(tmp_path)]
    passed = with_reader_gone([*base, "--fail-if", f"speedup<{speedup - 0.01}"], env=clean_env())
    assert passed.returncode == 0 and passed.stderr == ""
    assert json.loads((tmp_path / "report.json").read_text())["run_dir"]
    held = with_reader_gone([*base, "--fail-if", f"speedup<{speedup + 1}"], env=clean_env())
    assert held.returncode == 1 and f"FAIL: speedup<{speedup + 1} holds" in held.stderr


def test_trace_text_is_escaped_everywhere(compare_run_2, tmp_path):
    run = _copy_run(compare_run_2, tmp_path / "evil-run")
    timeline = json.loads((run / "timeline.json").read_text())
    for mode in timeline["modes"].values():
        for rank in mode["ranks"]:
            rank["spans"] = [[*s[:4], EVIL] for s in rank["spans"]]
    (run / "timeline.json").write_text(json.dumps(timeline))
    metrics = json.loads((run / "metrics.json").read_text())
    for rank in metrics["modes"]["split"]["analysis"]["ranks"]:
        rank["collectives"][0]["kind"] = EVIL
    metrics["summary"]["modes"]["split"]["collectives"][0]["kind"] = EVIL  # what the report reads
    for r in metrics["env"]["ranks"]:
        r["host"] = '<img src=x onerror="alert(2)">'
    metrics["env"]["hosts"] = ['<img src=x onerror="alert(2)">']
    metrics["env"]["command"] = "python -m profile_overlap --out '</code><script>alert(3)</script>'"
    (run / "metrics.json").write_text(json.dumps(metrics))

    write.write(run, out=tmp_path / "out")
    html = (tmp_path / "out" / "report.html").read_text()
    assert "<script" not in html.lower() and "<img src=x" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "&lt;img src=x onerror=&quot;alert(2)&quot;&gt;" in html
    svg = base64.b64decode(re.search(r'src="data:image/svg\+xml;base64,([^"]+)"', html).group(1)).decode()
    assert "<script" not in svg.lower()
    md = (tmp_path / "out" / "report.md").read_text()
    prose = re.sub(r"^```text\n.*?^```$", "", md, flags=re.M | re.S)
    assert "<script" not in prose.lower() and "<img" not in prose
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in prose
    # The command sits in a code fence, where Markdown shows text verbatim and runs nothing.
    assert re.search(r"^```text\ntorchrun .* -m profile_overlap --out '</code><script>alert\(3\)</script>'\n```$", md, re.M)


def test_failed_run_says_failed_at_the_top(compare_run_2, tmp_path):
    run = _copy_run(compare_run_2, tmp_path / "failed-run")
    (run / "status.json").write_text(
        json.dumps(
            {"state": "failed", "time": "2026-01-01T00:00:00+00:00", "reason": "verification failed: sequential == split: final parameters"}
        )
    )
    write.write(run, out=tmp_path / "out", formats=("html", "md"))
    html = (tmp_path / "out" / "report.html").read_text()
    body = html[html.index("<body>") :]
    assert body.index("FAILED") < body.index('<section id="verdict">')
    assert (tmp_path / "out" / "report.md").read_text().split("## Verdict")[0].count("FAILED") == 1


def test_bad_input_is_one_line(compare_run_2, tmp_path):
    not_a_run = cli(["report", str(tmp_path)])
    assert not_a_run.returncode == 2 and "is not a run folder" in not_a_run.stderr
    assert len(not_a_run.stderr.strip().splitlines()) == 1
    crashed = tmp_path / "crashed"
    crashed.mkdir()
    (crashed / "status.json").write_text(json.dumps({"state": "failed", "time": "t", "reason": "RuntimeError: boom"}))
    proc = cli(["report", str(crashed)])
    assert proc.returncode == 2 and "FAILED before writing metrics.json (RuntimeError: boom)" in proc.stderr
    assert "Traceback" not in proc.stderr
