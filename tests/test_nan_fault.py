"""A NaN in one rank's reduce_scatter output, end to end on real ranks: verification fails naming
the rank, step and layer with the words "not finite"; the console, the report (HTML, Markdown,
JSON, --fail-if), TensorBoard and the Overlap tab show the failure and render; the exit status is 1."""

from __future__ import annotations

import json
import shutil

import pytest

from conftest import SMALL, clean_env, cli, only_run_dir, torchrun
from test_tb_plugin import serve_tensorboard
from test_tb_plugin_browser import CHROMIUM, Browser, plugin_frame

pytestmark = pytest.mark.slow  # a torchrun job with an injected NaN

WHERE = "at rank 1, step 0, layer 2"


@pytest.fixture(scope="module")
def nan_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("nan")
    env = clean_env(PROFILE_OVERLAP_FAULT="nan:rank=1:step=0:layer=2")
    proc = torchrun(["--mode", "split", "--out", str(out), *SMALL], nproc=2, env=env)
    return proc, only_run_dir(out)


def test_exit_status_is_1_and_the_console_names_rank_step_layer(nan_run):
    proc, run_dir = nan_run
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert f"AllReduce == AllGather(ReduceScatter): FAILED (values not finite {WHERE}" in proc.stdout
    ours = [line for line in proc.stderr.splitlines() if line.startswith("profile_overlap run: error:")]
    assert len(ours) == 1 and "verification failed" in ours[0] and "not finite" in ours[0] and WHERE in ours[0]
    # torchrun's agent repeats our line as the root cause, at the bottom of its failure summary.
    root_cause = proc.stderr[proc.stderr.rindex("Root Cause") :]
    assert "profile_overlap run: error: verification failed" in root_cause
    assert "Traceback" not in proc.stdout and "[rank1]: Traceback" not in proc.stderr


def test_the_record_and_status_say_not_finite(nan_run):
    _, run_dir = nan_run
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "failed" and "not finite" in status["reason"]
    check = json.loads((run_dir / "metrics.json").read_text())["modes"]["split"]["checks"][0]
    assert check["passed"] is False and check["max_abs_err"] is None
    assert (check["worst_rank"], check["worst_step"], check["worst_layer"]) == (1, 0, 2)


def test_reports_render_the_failure(nan_run, tmp_path):
    _, run_dir = nan_run
    html = (run_dir / "report.html").read_text()
    md = (run_dir / "report.md").read_text()
    for text in (html, md):
        assert "FAILED" in text and "not finite" in text
    again = cli(["report", str(run_dir), "--out", str(tmp_path)])
    assert again.returncode == 0, again.stderr
    assert "not finite" in (tmp_path / "report.html").read_text()
    gate = cli(["report", str(run_dir), "--out", str(tmp_path / "gate"), "--fail-if", "max_error>0.001"])
    assert gate.returncode == 1 and "FAIL: max_error>0.001 holds" in gate.stderr, gate.stderr


def test_tensorboard_text_shows_the_failure(nan_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    _, run_dir = nan_run
    acc = EventAccumulator(str(run_dir / "split"), size_guidance={"tensors": 0})
    acc.Reload()
    texts = [t.tensor_proto.string_val[0].decode() for tag in acc.Tags()["tensors"] if "verification" in tag for t in acc.Tensors(tag)]
    assert texts and "verification FAILED" in texts[0] and f"values not finite {WHERE}" in texts[0]


@pytest.mark.skipif(not shutil.which(CHROMIUM), reason=f"{CHROMIUM} not found: apt-get install -y chromium")
def test_overlap_tab_shows_the_failure_without_errors(nan_run, tmp_path):
    _, run_dir = nan_run
    logdir = tmp_path / "logdir"
    shutil.copytree(run_dir, logdir / "nan")
    server = serve_tensorboard(logdir)
    base = next(server)
    browser = Browser()
    try:
        browser.page("Page.navigate", url=f"{base}/#profile_overlap")
        frame = plugin_frame(browser)
        text = frame.js("document.body.innerText")
        assert "This run FAILED verification" in text and f"values not finite {WHERE}" in text
        assert "the run failed before this mode was profiled" in text
        errors = [
            e["params"]
            for e in browser.events
            if e.get("method") == "Runtime.exceptionThrown"
            or (e.get("method") == "Runtime.consoleAPICalled" and e["params"]["type"] == "error")
        ]
        assert errors == [], json.dumps(errors)[:2000]
    finally:
        browser.close()
        server.close()
