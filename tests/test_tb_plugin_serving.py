"""The Overlap tab's routes on hostile run folders and requests, in-process (werkzeug's test
client over the plugin's own WSGI apps): what is served, what is refused, and that every refusal is
a 4xx with one line. The logdir holds `analyze --tensorboard` output of the checked-in gloo traces."""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path

import pytest
from tensorboard.plugins import base_plugin
from werkzeug.test import Client

from profile_overlap.analysis.folder import analyze_dir
from profile_overlap.analysis.record import folder_metrics, timeline_of
from profile_overlap.tb_plugin import plugin
from profile_overlap.tb_plugin.export import FOREIGN_MODE, write_plugin_data
from profile_overlap.tb_plugin.plugin import MAX_MAX_SPANS, OverlapPlugin

from conftest import DATA

SECRET = b"the secret outside the logdir\n"


@pytest.fixture(scope="module")
def good_run(tmp_path_factory) -> Path:
    """A real run folder (metrics.json and timeline.json of the gloo traces), to copy from."""
    out = tmp_path_factory.mktemp("good") / "run"
    analysis = analyze_dir(DATA / "gloo_2rank")
    write_plugin_data(out, folder_metrics(analysis, out_dir=str(out)), timeline_of({FOREIGN_MODE: analysis}))
    return out


@pytest.fixture()
def logdir(good_run, tmp_path) -> Path:
    """tmp/logdir/good: the real run; tmp/secret: a file outside the logdir."""
    (tmp_path / "secret").write_bytes(SECRET)
    shutil.copytree(good_run, tmp_path / "logdir" / "good")
    return tmp_path / "logdir"


def served(logdir: Path, query: str) -> tuple[int, bytes]:
    """(status, body) of one request to the plugin's route, as TensorBoard would route it."""
    apps = OverlapPlugin(base_plugin.TBContext(logdir=str(logdir))).get_plugin_apps()
    reply = Client(apps["/" + query.split("?")[0]]).get("/" + query)
    return reply.status_code, reply.data


def refusal(status: int, body: bytes) -> str:
    """The one-line message of a 4xx reply."""
    assert 400 <= status < 500, (status, body[:300])
    error = json.loads(body)["error"]
    assert "\n" not in error and "Traceback" not in error
    return error


def runs(logdir: Path) -> dict[str, dict]:
    status, body = served(logdir, "runs")
    assert status == 200, body[:300]
    return {r["run"]: r for r in json.loads(body)["runs"]}


def test_a_run_file_that_links_outside_the_logdir_is_refused_and_the_run_listed_as_broken(logdir):
    secret = logdir.parent / "secret"
    (logdir / "runB").mkdir()
    (logdir / "runB" / "metrics.json").symlink_to(secret)
    (logdir / "good" / "perfetto.json.gz").symlink_to(secret)
    (logdir / "good" / "advice.json").symlink_to(secret)
    for query in ("metrics?run=runB", "perfetto?run=good", "timeline?run=runB&mode=trace"):
        status, body = served(logdir, query)
        assert SECRET not in body
        assert status == 403 and "leads outside the logdir" in refusal(status, body), query
    listed = runs(logdir)
    assert "leads outside the logdir" in listed["runB"]["error"] and listed["runB"]["modes"] == []
    assert listed["good"]["perfetto"] is False
    assert "leads outside the logdir" in listed["good"]["error"]  # its advice.json


def test_a_symlink_to_a_regular_file_inside_the_logdir_is_served(logdir):
    (logdir / "alias").mkdir()
    (logdir / "alias" / "metrics.json").symlink_to(logdir / "good" / "metrics.json")
    status, body = served(logdir, "metrics?run=alias")
    assert status == 200 and body == (logdir / "good" / "metrics.json").read_bytes()
    assert runs(logdir)["alias"]["error"] is None


def test_a_fifo_in_place_of_timeline_json_is_refused_without_blocking(logdir):
    (logdir / "good" / "timeline.json").unlink()
    os.mkfifo(logdir / "good" / "timeline.json")
    replies: list[tuple[int, bytes]] = []
    asker = threading.Thread(target=lambda: replies.append(served(logdir, "timeline?run=good&mode=trace")), daemon=True)
    asker.start()
    asker.join(timeout=30)
    if asker.is_alive():  # unblock the reader, so that the test process can end
        os.close(os.open(logdir / "good" / "timeline.json", os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("the timeline route blocked on a FIFO")
    assert "not a regular file" in refusal(*replies[0])
    assert runs(logdir)["good"]["has_timeline"] is False


@pytest.mark.parametrize(
    "query, message",
    [
        ("metrics?run=good%00A", "is not a folder's path"),
        ("timeline?run=good%0Aevil&mode=trace", "is not a folder's path"),
        ("metrics?run=" + "a" * 5000, "is not a folder's path"),
        ("timeline?run=good", "missing ?mode="),
        ("timeline?run=good&mode=tr%00ace", "is not a mode's name"),
        ("heatmap?run=good&mode=%1b[31m", "is not a mode's name"),
        ("timeline?run=good&mode=trace&max_spans=1e23", "not a whole number"),
        ("timeline?run=good&mode=trace&max_spans=-16", "not a whole number"),
        ("timeline?run=good&mode=trace&max_spans=%D9%A1%D9%A6", "not a whole number"),  # Arabic-Indic 16
        ("timeline?run=good&mode=trace&max_spans=" + "9" * 5000, None),
        ("timeline?run=good&mode=trace&max_spans=15", "below 16"),
    ],
)
def test_malformed_parameters_get_a_400_with_one_line(logdir, query, message):
    status, body = served(logdir, query)
    if message is None:  # a huge number is served as the maximum
        assert status == 200 and json.loads(body)["max_spans"] == MAX_MAX_SPANS
        return
    assert status == 400 and message in refusal(status, body)
    assert len(refusal(status, body)) < 400  # the parameter is quoted cut short


def test_a_run_folder_that_is_a_symlink_loop_is_a_400(logdir):
    (logdir / "loop").symlink_to(logdir / "loop")
    status, body = served(logdir, "metrics?run=loop")
    assert status == 400 and "is not a folder's path" in refusal(status, body)


def test_max_spans_is_rounded_down_to_a_power_of_two_and_capped(logdir):
    for asked, applied in ((16, 16), (17, 16), (4095, 2048), (4096, 4096), (MAX_MAX_SPANS + 1, MAX_MAX_SPANS), (10**23, MAX_MAX_SPANS)):
        status, body = served(logdir, f"timeline?run=good&mode=trace&max_spans={asked}")
        assert status == 200 and json.loads(body)["max_spans"] == applied, asked


def test_distinct_max_spans_parse_the_file_once_and_merge_at_most_thirteen_times(logdir, monkeypatch):
    parsed, merged = [], []
    decode, replies = plugin.decode_timeline, plugin.timeline_replies
    monkeypatch.setattr(plugin, "decode_timeline", lambda *a, **k: parsed.append(1) or decode(*a, **k))
    monkeypatch.setattr(plugin, "timeline_replies", lambda *a, **k: merged.append(k["max_spans"]) or replies(*a, **k))
    apps = OverlapPlugin(base_plugin.TBContext(logdir=str(logdir))).get_plugin_apps()
    client = Client(apps["/timeline"])
    for asked in [*range(16, 3000, 7), 10**23, *range(16, 3000, 7)]:
        assert client.get(f"/timeline?run=good&mode=trace&max_spans={asked}").status_code == 200
    assert client.get("/timeline?run=good&mode=trace").status_code == 200
    assert Client(apps["/heatmap"]).get("/heatmap?run=good&mode=trace").status_code in (200, 404)
    assert len(parsed) == 1
    assert sorted(merged, key=str) == sorted([1 << k for k in range(4, 12)] + [MAX_MAX_SPANS, None], key=str)


def test_a_damaged_timeline_json_is_a_422_with_one_line(logdir):
    (logdir / "good" / "timeline.json").write_text('{"modes": {"trace": \n')
    status, body = served(logdir, "timeline?run=good&mode=trace")
    assert status == 422 and "unreadable timeline.json" in refusal(status, body)


def test_a_broken_run_is_listed_with_its_reason_and_the_others_still_show(logdir):
    (logdir / "deep").mkdir()
    (logdir / "deep" / "metrics.json").write_text('{"schema_version": 1, "x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    (logdir / "deep_advice").mkdir()
    shutil.copy(logdir / "good" / "metrics.json", logdir / "deep_advice" / "metrics.json")
    (logdir / "deep_advice" / "advice.json").write_text('{"x": ' + "[" * 100_000)
    (logdir / "nested" / "inner").mkdir(parents=True)
    (logdir / "nested" / "inner" / "metrics.json").write_text("not json")
    listed = runs(logdir)
    assert set(listed) == {"good", "deep", "deep_advice", "nested/inner"}
    assert listed["good"]["error"] is None and listed["good"]["modes"] == ["trace"]
    assert "nests deeper than any metrics record" in listed["deep"]["error"]
    assert "nests deeper than any advice record" in listed["deep_advice"]["error"]
    assert "is not valid JSON" in listed["nested/inner"]["error"]
    assert all("\n" not in r["error"] for r in listed.values() if r["error"])
