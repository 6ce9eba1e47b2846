"""The rank x time heatmap (analysis/world/heatmap.py) on a synthetic 64-rank job with a late rank, a
slow node of 8 ranks and a phase-wide pattern planted (benchmarks/many_ranks.py)."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from many_ranks import planted, write

from profile_overlap.analysis.folder import analyze_dir
from profile_overlap.analysis.record import folder_metrics, timeline_of
from profile_overlap.analysis.world.heatmap import covered, covered_rows
from profile_overlap.core import intervals as iv
from profile_overlap.tb_plugin.export import FOREIGN_MODE, write_plugin_data

from test_tb_plugin import serve_tensorboard
from test_tb_plugin_browser import CHROMIUM, Browser, plugin_frame


def _cells(rows) -> np.ndarray:
    return np.array([[int(c, 16) for c in row] for row in rows])


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    folder = write(tmp_path_factory.mktemp("many") / "traces", 64, 3)
    return analyze_dir(folder)


@pytest.mark.slow
def test_the_heatmap_shows_the_slow_node_the_late_rank_and_the_optimizer_band(job):
    late, node = planted(64)
    h = job.heatmap
    assert h.ranks == tuple(range(64)) and h.ranks_per_row == 1
    wait, transfer = _cells(h.wait), _cells(h.transfer)
    phase = np.array([list(p) for p in h.phase])
    forward, backward, optimizer = (np.all(phase == p, axis=0) for p in "fbo")
    # Forward: everyone waits at each all_gather for the slow node, whose 8 rows do not wait.
    quiet = np.argsort(wait[:, forward].sum(axis=1), kind="stable")[:8]
    assert sorted(quiet.tolist()) == list(range(node, node + 8))
    others = np.delete(wait[:, forward], quiet, axis=0)
    assert wait[quiet][:, forward].sum() / 8 * 10 < others.sum() / 56  # a tenth of the others' wait per row
    # Backward: everyone waits for the late rank at its end; the late rank alone does not.
    by_wait = wait[:, backward].sum(axis=1)
    assert int(np.argmin(by_wait)) == late and by_wait[late] == 0 and np.all(np.delete(by_wait, late) > 0)
    # Optimizer: its all_reduce overlaps nothing on any rank, a column band of transfer on every row.
    assert optimizer.any() and np.all(transfer[:, optimizer].max(axis=1) == 15)


@pytest.mark.slow
def test_timeline_json_carries_the_heatmap_typed(job):
    mode = timeline_of({"traces": job}).modes["traces"]
    assert mode.heatmap == job.heatmap and len(mode.heatmap.wait) == 64 and all(len(r) == mode.heatmap.bins for r in mode.heatmap.wait)


def test_a_bin_gets_the_fraction_of_it_an_interval_union_covers():
    u = (np.array([1.0, 4.0]), np.array([2.5, 8.0]))
    edges = np.array([0.0, 2.0, 4.0, 6.0, 10.0])
    assert covered(u, edges).tolist() == [0.5, 0.25, 1.0, 0.5]


@pytest.mark.slow
def test_analyze_of_64_ranks_prints_each_number_s_spread_and_writes_the_full_tables_to_csv(job, tmp_path):
    late, node = planted(64)
    out = tmp_path / "a.json"
    p = subprocess.run(
        [sys.executable, "-m", "profile_overlap", "analyze", job.source, "--json", out],
        capture_output=True, text=True, env={**os.environ, "COLUMNS": "160"},
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert len(lines) <= 60 and "Overlap per rank" not in p.stdout
    assert f"a.ranks.csv and {tmp_path / 'a.steps.csv'}" in p.stdout
    waits = next(line for line in lines if line.startswith("│ wait_us"))
    assert waits.split("│")[8].strip().startswith(f"{late}, ")  # best: the late rank waits least
    ranks = list(csv.DictReader((tmp_path / "a.ranks.csv").open()))
    steps = list(csv.DictReader((tmp_path / "a.steps.csv").open()))
    assert [int(r["rank"]) for r in ranks] == list(range(64)) and len(steps) == 64 * 3
    record = json.loads(out.read_text())
    wait = next(s for s in record["spread"] if s["metric"] == "wait_us")
    assert wait["best"][0] == late and set(range(node, node + 8)) <= set(wait["outliers"])
    full = subprocess.run([sys.executable, "-m", "profile_overlap", "analyze", job.source, "--per-rank"], capture_output=True, text=True)
    assert "Overlap per rank" in full.stdout and "Profiler steps" in full.stdout


@pytest.mark.slow
def test_a_truncated_an_empty_and_another_job_s_file_among_64_ranks_get_one_line_answers_and_the_missing_are_named(tmp_path):
    folder = write(tmp_path / "damaged", 64, 2, damage=True)

    def analyze(*extra):
        cmd = [sys.executable, "-m", "profile_overlap", "analyze", folder, *extra]
        return subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "COLUMNS": "160"})

    p = analyze()
    assert p.returncode == 2 and "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert "rank5.pt.trace.json is not valid JSON" in p.stderr and "--skip-bad" in p.stderr
    p = analyze("--skip-bad")
    assert p.returncode == 0, p.stderr
    warnings = p.stderr.strip().splitlines()
    assert len(warnings) == 3 and all(w.startswith("warning: ") for w in warnings)
    assert "rank6.pt.trace.json is empty" in p.stderr and "rank7.pt.trace.json both claim rank 1" in p.stderr
    assert "missing ranks 5, 6, 7, 9" in p.stdout and len(p.stdout.splitlines()) <= 60


@pytest.mark.slow
@pytest.mark.skipif(not shutil.which(CHROMIUM), reason=f"{CHROMIUM} not found: apt-get install -y chromium")
def test_the_tab_at_64_ranks_draws_a_row_per_rank_and_the_explain_example_s_last_rank(job, tmp_path):
    out = tmp_path / "logdir" / "many"
    write_plugin_data(out, folder_metrics(job, out_dir=str(out)), timeline_of({FOREIGN_MODE: job}))
    server = serve_tensorboard(tmp_path / "logdir")
    base = next(server)
    browser = Browser()
    try:
        browser.page("Page.navigate", url=f"{base}/#profile_overlap")
        frame = plugin_frame(browser)
        assert frame.js("document.querySelector('.po-heatmap canvas.po-heat').height") == 64
        # Rank 63 of 64 holds 4033 … 4096; the column sums are 64·(j+1) + 64²·63/2.
        row = frame.js("""[...document.querySelectorAll('.po-explain tr')].map(r => [...r.cells].map(c => c.innerText))
            .find(r => r[0] === '63')""")
        assert row == [
            "63",
            "[4033, 4034, 4035, …, 4096]",
            "[129088, 129152, 129216, …, 133120]",
            "[133120]",
            "[129088, 129152, 129216, …, 133120]",
        ]
    finally:
        browser.close()
        server.close()


def test_covered_rows_are_covered_to_the_bit() -> None:
    """All ranks' rows at once (what the heatmap computes) give each rank's `covered` exactly, with
    empty ranks, intervals past the last edge or before the first, and edges on interval ends."""
    rng = np.random.default_rng(7)
    for trial in range(200):
        unions = []
        for _ in range(int(rng.integers(1, 10))):
            n = int(rng.integers(0, 7))
            points = np.sort(rng.choice(np.arange(0.0, 100.0, 0.5), size=2 * n, replace=False))
            unions.append(iv.union(points[0::2], points[1::2]) if n else iv.EMPTY)
        edges = (
            np.linspace(0, 100, 41) if trial % 3 == 0 else np.linspace(rng.uniform(-5, 20), rng.uniform(60, 110), int(rng.integers(2, 30)))
        )
        rows = covered_rows(unions, edges)
        one_by_one = np.array([covered(u, edges) for u in unions])
        assert rows.shape == one_by_one.shape
        assert rows.tobytes() == one_by_one.tobytes(), trial
