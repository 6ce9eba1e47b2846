"""The Overlap tab's backend in a real TensorBoard: a subprocess on a free loopback port, with a
logdir holding a real compare run and `analyze --tensorboard` output of foreign traces."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from profile_overlap.record.timeline import TimelineSpan
from profile_overlap.tb_plugin.plugin import PLUGIN_NAME, merge_spans

from conftest import DATA, REPO, clean_env, cli, free_port

ROUTES = f"/data/plugin/{PLUGIN_NAME}"


@pytest.fixture(scope="session")
def tb_logdir(compare_run_2, tmp_path_factory) -> Path:
    """logdir/compare: the shared 2-rank compare run; logdir/foreign/overlap: written by
    `analyze logdir/foreign --tensorboard` from checked-in gloo traces; a run folder outside the
    logdir that the plugin must refuse to serve."""
    root = tmp_path_factory.mktemp("tb")
    logdir = root / "logdir"
    shutil.copytree(compare_run_2, logdir / "compare")
    shutil.copytree(DATA / "gloo_2rank", logdir / "foreign")
    proc = cli(["analyze", str(logdir / "foreign"), "--tensorboard"])
    assert proc.returncode == 0, proc.stderr
    assert "Overlap tab" in proc.stdout
    (root / "outside").mkdir()
    (root / "outside" / "metrics.json").write_text("{}")
    return logdir


@pytest.fixture(scope="session")
def tensorboard(tb_logdir):
    """Base URL of `tensorboard --logdir LOGDIR --host 127.0.0.1 --port P`, once it answers."""
    yield from serve_tensorboard(tb_logdir)


def serve_tensorboard(tb_logdir: Path):
    """Start TensorBoard on a free loopback port over tb_logdir; yield its base URL once it
    answers; stop it afterwards (a generator for fixtures)."""
    port = free_port()
    log = tb_logdir.parent / f"tensorboard-{port}.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tensorboard.main", "--logdir", str(tb_logdir), "--host", "127.0.0.1", "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=clean_env(),
            cwd=REPO,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, f"tensorboard exited: {log.read_text()[-3000:]}"
            try:
                get(base + "/data/plugins_listing")
                break
            except (urllib.error.URLError, ConnectionError):
                assert time.monotonic() < deadline, f"tensorboard did not answer: {log.read_text()[-3000:]}"
                time.sleep(0.5)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


def get(url: str) -> tuple[int, str, bytes]:
    """(status, content type, body); error statuses are returned, not raised."""
    try:
        with urllib.request.urlopen(url, timeout=120) as resp:
            return resp.status, resp.headers["Content-Type"], resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.headers["Content-Type"], err.read()


def get_json(url: str):
    status, _, body = get(url)
    assert status == 200, body
    return json.loads(body)


def test_plugins_listing_shows_the_overlap_tab(tensorboard):
    listing = get_json(tensorboard + "/data/plugins_listing")
    entry = listing[PLUGIN_NAME]
    assert entry["enabled"] is True
    assert entry["tab_name"] == "Overlap"
    assert entry["loading_mechanism"] == {"type": "IFRAME", "module_path": f"{ROUTES}/index.js"}


def test_runs_lists_our_run_and_the_foreign_one(tensorboard):
    runs = {r["run"]: r for r in get_json(tensorboard + f"{ROUTES}/runs")["runs"]}
    assert set(runs) == {"compare", "foreign/overlap"}
    assert runs["compare"]["modes"] == ["sequential", "split", "split-blocking"]
    assert runs["compare"]["world_size"] == 2
    assert runs["compare"]["status"] == "succeeded"
    assert runs["compare"]["has_timeline"] is True
    assert runs["foreign/overlap"]["modes"] == ["trace"]
    assert runs["foreign/overlap"]["world_size"] == 2


def test_metrics_route_is_metrics_json_byte_for_byte(tensorboard, tb_logdir):
    status, content_type, body = get(tensorboard + f"{ROUTES}/metrics?run=compare")
    assert status == 200 and content_type.startswith("application/json")
    assert body == (tb_logdir / "compare" / "metrics.json").read_bytes()
    split = json.loads(body)["modes"]["split"]["analysis"]
    assert [r["rank"] for r in split["ranks"]] == [0, 1]
    # Real measurements: on 2 shared cores a rank's gathers can all finish before its forward pass,
    # so only "some overlap somewhere" is certain (test_run checks overlap per rank on 4 ranks).
    assert any(r["overlap_us"] > 0 for r in split["ranks"])


def test_timeline_route_serves_each_mode_of_timeline_json(tensorboard, tb_logdir):
    record = json.loads((tb_logdir / "compare" / "timeline.json").read_text())
    for mode in ("sequential", "split", "split-blocking"):
        reply = get_json(tensorboard + f"{ROUTES}/timeline?run=compare&mode={mode}")
        assert reply["ranks"] == record["modes"][mode]["ranks"]
        num = sum(len(r["spans"]) for r in record["modes"][mode]["ranks"])
        assert reply["num_spans_in_file"] == reply["num_spans_served"] == num


def test_timeline_route_merges_to_max_spans_and_covers_every_span(tensorboard, tb_logdir):
    record = json.loads((tb_logdir / "compare" / "timeline.json").read_text())["modes"]["split"]["ranks"]
    reply = get_json(tensorboard + f"{ROUTES}/timeline?run=compare&mode=split&max_spans=16")
    assert reply["max_spans"] == 16
    assert reply["num_spans_served"] < reply["num_spans_in_file"] == sum(len(r["spans"]) for r in record)
    for original, merged in zip(record, reply["ranks"]):
        assert merged["steps"] == original["steps"]
        for kind in ("comm", "compute"):
            mine = [s for s in merged["spans"] if s[3] == kind]
            assert len(mine) <= 16
            for s in (s for s in original["spans"] if s[3] == kind):
                assert any(m[1] <= s[1] and s[2] <= m[2] for m in mine), f"{s} is not inside a merged span"


def test_foreign_traces_show_their_analyze_json_numbers(tensorboard, tb_logdir, tmp_path):
    out = tmp_path / "overlap.json"
    proc = cli(["analyze", str(DATA / "gloo_2rank"), "--json", str(out)])
    assert proc.returncode == 0, proc.stderr
    expected = json.loads(out.read_text())
    served = get_json(tensorboard + f"{ROUTES}/metrics?run=foreign/overlap")["modes"]["trace"]["analysis"]
    assert served["ranks"] == expected["ranks"]
    assert served["world_size"] == expected["world_size"] == 2
    timeline = get_json(tensorboard + f"{ROUTES}/timeline?run=foreign/overlap&mode=trace")
    assert [r["rank"] for r in timeline["ranks"]] == [0, 1]
    assert all({s[3] for s in r["spans"]} == {"comm", "compute"} for r in timeline["ranks"])


def test_frontend_is_served_and_requests_nothing_outside(tensorboard):
    status, content_type, js = get(tensorboard + f"{ROUTES}/index.js")
    assert status == 200 and content_type.startswith("text/javascript")
    assert b"export async function render" in js
    # The modules index.js imports, by paths relative to itself (the plugin's routes).
    modules = []
    for name in ("timeline.js", "common.js"):
        assert f'from "./{name}"'.encode() in js
        status, content_type, body = get(tensorboard + f"{ROUTES}/{name}")
        assert status == 200 and content_type.startswith("text/javascript")
        modules.append(body)
    status, content_type, css = get(tensorboard + f"{ROUTES}/style.css")
    assert status == 200 and content_type.startswith("text/css")
    for text in (js, *modules, css):
        assert b"http://" not in text and b"https://" not in text and b"//cdn" not in text and b"@import" not in text
    status, _, entry = get(tensorboard + f"/data/plugin_entry.html?name={PLUGIN_NAME}")
    assert status == 200 and b"index.js" in entry


@pytest.mark.parametrize(
    "query, code, message",
    [
        ("metrics?run=../outside", 403, "outside the logdir"),
        ("metrics?run=/etc", 403, "outside the logdir"),
        ("metrics?run=nope", 404, "has no metrics.json"),
        ("metrics", 400, "missing ?run="),
        ("timeline?run=compare&mode=nope", 404, "it has sequential, split"),
        ("timeline?run=compare&mode=split&max_spans=many", 400, "not a whole number"),
        ("timeline?run=compare&mode=split&max_spans=2", 400, "below 16"),
    ],
)
def test_bad_requests_get_one_line_errors(tensorboard, query, code, message):
    status, _, body = get(tensorboard + f"{ROUTES}/{query}")
    assert status == code
    assert message in json.loads(body)["error"]


def test_merge_spans_keeps_the_largest_gaps():
    spans = [
        TimelineSpan(1, 0.0, 1.0, "comm", "a"),
        TimelineSpan(1, 1.5, 2.0, "comm", "b"),
        TimelineSpan(1, 5.0, 9.0, "comm", "c"),
        TimelineSpan(1, 9.5, 10.0, "comm", "d"),
        TimelineSpan(2, 0.0, 3.0, "compute", "x"),
    ]
    # Gaps 0.5, 3.0, 0.5: with two spans allowed only the gap of 3.0 stays. Each merged span has
    # its first piece's step and its longest piece's label (c is 4 µs long).
    merged = [TimelineSpan(1, 0.0, 2.0, "comm", "a"), TimelineSpan(2, 0.0, 3.0, "compute", "x"), TimelineSpan(1, 5.0, 10.0, "comm", "c")]
    assert merge_spans(spans, max_spans=2) == merged
    assert merge_spans(spans, max_spans=4) is spans
