"""Golden numbers: fixed inputs must give the same numbers, whatever the code's layout.

- Analysis: every trace folder under tests/data, analysed as `analyze --json` would, against
  tests/golden/analysis/<folder>.json, including its "exposed" key (why communication is exposed:
  wait/transfer per rank, top calls, stragglers, critical path; analysis/causes.py).
- Record to renderers: a real 2-rank compare run frozen in tests/golden/run (its config, env,
  status, metrics.json and timeline.json) gives the same report.md, headline numbers and console
  table as tests/golden/run/expected/.

Every key of a golden file must be there with the same value (floats to 1e-9 relative); new keys
may appear. After a deliberate change of numbers, regenerate with
`PROFILE_OVERLAP_REGOLD=1 python -m pytest tests/test_golden.py` and say why in the commit.
"""

from __future__ import annotations

import io
import json
import math
import os
from pathlib import Path

import pytest
from rich.console import Console

from profile_overlap.analysis.folder import analyze_dir
from profile_overlap.analysis.record import to_json
from profile_overlap.record.folder import load_run
from profile_overlap.render import console
from profile_overlap.render.markdown import render as render_md
from profile_overlap.render.report import build

from conftest import DATA

GOLDEN = Path(__file__).resolve().parent / "golden"
REGOLD = bool(os.environ.get("PROFILE_OVERLAP_REGOLD"))
TRACE_FOLDERS = sorted(p.name for p in DATA.iterdir() if p.is_dir())


def same(golden, actual, where: str = "$") -> None:
    """Every key and value of `golden` is in `actual` (floats to 1e-9 relative)."""
    if isinstance(golden, dict):
        assert isinstance(actual, dict), f"{where}: expected an object, got {actual!r}"
        for key, value in golden.items():
            assert key in actual, f"{where}.{key} is missing"
            same(value, actual[key], f"{where}.{key}")
    elif isinstance(golden, list):
        assert isinstance(actual, list) and len(actual) == len(golden), f"{where}: {len(golden)} items expected, got {actual!r}"
        for i, (g, a) in enumerate(zip(golden, actual)):
            same(g, a, f"{where}[{i}]")
    elif isinstance(golden, float) and not isinstance(actual, bool) and isinstance(actual, (int, float)):
        assert math.isclose(golden, actual, rel_tol=1e-9, abs_tol=1e-12), f"{where}: {golden} expected, got {actual}"
    else:
        assert golden == actual, f"{where}: {golden!r} expected, got {actual!r}"


def check_json(path: Path, actual) -> None:
    if REGOLD:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(actual, indent=1, sort_keys=True) + "\n")
    same(json.loads(path.read_text()), actual)


def check_text(path: Path, actual: str) -> None:
    if REGOLD:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(actual)
    assert actual == path.read_text(), f"{path.name} changed; diff it against {path}"


@pytest.mark.parametrize("folder", TRACE_FOLDERS)
def test_analysis_of_fixed_traces(folder):
    record = to_json(analyze_dir(DATA / folder, max_workers=1))
    record["source"] = folder  # the path differs from machine to machine
    check_json(GOLDEN / "analysis" / f"{folder}.json", record)


@pytest.fixture(scope="module")
def golden_run():
    return load_run(GOLDEN / "run")


def test_headline_numbers_of_a_fixed_record(golden_run):
    check_json(GOLDEN / "run" / "expected" / "headline.json", golden_run.metrics.summary.headline)


def test_report_of_a_fixed_record(golden_run):
    check_text(GOLDEN / "run" / "expected" / "report.md", render_md(build(golden_run), figure_png="timeline.png"))


def test_console_summary_of_a_fixed_record(golden_run):
    out = io.StringIO()
    console.print_run_summary(golden_run.metrics, Console(file=out, width=160, color_system=None))
    check_text(GOLDEN / "run" / "expected" / "console.txt", out.getvalue())
