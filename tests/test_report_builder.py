"""One report builder for runs, jobs and bare trace folders: the sections follow what the record holds."""

from __future__ import annotations

from pathlib import Path

from profile_overlap.analysis.folder import analyze_dir
from profile_overlap.analysis.record import folder_metrics
from profile_overlap.record.folder import Run, load_run
from profile_overlap.record.metrics import FOLDER
from profile_overlap.render.markdown import render as render_md
from profile_overlap.render.report import build

from conftest import DATA

GOLDEN_RUN = Path(__file__).resolve().parent / "golden" / "run"


def _folder_run(tmp_path: Path) -> Run:
    result = analyze_dir(DATA / "gloo_2rank", max_workers=1)
    return Run(dir=tmp_path, metrics=folder_metrics(result, out_dir=str(tmp_path)), timeline=None, status=None)


def test_a_bare_trace_folder_gets_typed_facts_and_the_job_sections(tmp_path):
    run = _folder_run(tmp_path)
    job = run.metrics.job
    assert job is not None and job.kind == FOLDER and job.profiled_ranks == (0, 1) and job.trace_files == 2
    assert run.metrics.env.backend == "gloo" and [r.host for r in run.metrics.env.ranks] == ["?", "?"]
    report = build(run)
    ids = [s.id for s in report.sections]
    assert ids[:3] == ["verdict", "setup", "overlap"] and "verification" not in ids and "yield" not in ids
    setup = render_md(report, figure_png=None).split("## Setup", 1)[1].split("\n## ", 1)[0]
    assert report.subtitle == "traces gloo_2rank: 2 ranks, gloo on cpu"
    assert "A folder of PyTorch profiler traces" in setup and "trace_handler" not in setup


def test_a_run_keeps_its_own_sections():
    report = build(load_run(GOLDEN_RUN))
    ids = [s.id for s in report.sections]
    assert ids[:4] == ["verdict", "setup", "verification", "comparison"] and "overlap" not in ids
