"""TensorBoard: the event files the end-of-run hook writes, served by a real TensorBoard (started by
`profile_overlap tensorboard` on a free loopback port over a copy of a real 2-rank compare run),
checked through its HTTP API, and the traces' compatibility with torch-tb-profiler."""

from __future__ import annotations

import gzip
import json
import re
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from profile_overlap.core.errors import UserError
from profile_overlap.record.load import load_metrics
from profile_overlap.render import console
from profile_overlap.render import tensorboard as tb

from conftest import REPO, clean_env, free_port

pytestmark = pytest.mark.slow  # the shared compare run and a tensorboard server

MODES = ("sequential", "split", "split-blocking")
# torch-tb-profiler's file pattern (torch_tb_profiler/consts.py WORKER_PATTERN), written out here.
WORKER_FILE = re.compile(r"^(.*?)(\.\d+)?\.pt\.trace\.json(?:\.gz)?$")


def our_event_files(run_dir: Path, mode: str) -> list[Path]:
    return sorted((run_dir / mode).glob(f"events.out.tfevents.*{tb.EVENT_SUFFIX}"))


class Server:
    def __init__(self, base: str, run: str, proc: subprocess.Popen, log: Path, run_dir: Path):
        self.base, self.run, self.proc, self.log, self.run_dir = base, run, proc, log, run_dir

    def get(self, path: str, **query) -> bytes:
        url = f"{self.base}/{path}" + ("?" + urllib.parse.urlencode(query) if query else "")
        with urllib.request.urlopen(url, timeout=30) as resp:
            return resp.read()

    def json(self, path: str, **query):
        return json.loads(self.get(path, **query))

    def post(self, path: str, body: dict):
        req = urllib.request.Request(
            f"{self.base}/{path}",
            data=json.dumps(body).encode(),
            method="POST",
            headers={"Content-Type": "application/json", "X-XSRF-Protected": "1"},
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read())


def wait_for(srv: Server, ready, *, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        assert srv.proc.poll() is None, srv.log.read_text()[-3000:]
        try:
            if ready():
                return
        except OSError:
            pass
        assert time.monotonic() < deadline, srv.log.read_text()[-3000:]
        time.sleep(2)


@pytest.fixture(scope="module")
def server(compare_run_2, tmp_path_factory):
    # The end-of-run hook wrote one event file per mode; the copy drops them so that the
    # `tensorboard` command's "write what is missing" path writes them again.
    for mode in MODES:
        assert len(our_event_files(compare_run_2, mode)) == 1
    logdir = tmp_path_factory.mktemp("tb")
    run_dir = logdir / compare_run_2.name
    shutil.copytree(compare_run_2, run_dir)
    for mode in MODES:
        for f in our_event_files(run_dir, mode):
            f.unlink()
    port = free_port()
    log = logdir.parent / "tensorboard.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "profile_overlap", "tensorboard", str(logdir), "--port", str(port)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=clean_env(),
            cwd=REPO,
        )
    srv = Server(f"http://127.0.0.1:{port}", run_dir.name, proc, log, run_dir)
    try:
        wait_for(srv, lambda: len(srv.json("data/plugin/scalars/tags")) == len(MODES))
        yield srv
    finally:
        proc.terminate()  # the command became TensorBoard (exec), so this PID is TensorBoard's
        proc.wait(timeout=30)


def test_command_prints_url_and_offline_note_and_binds_loopback(server):
    text = server.log.read_text()
    port = server.base.rsplit(":", 1)[1]
    assert f"wrote TensorBoard event files for {server.run_dir}" in text
    assert f"TensorBoard on http://localhost:{port}/" in text
    assert f"TensorBoard 2.21.0 at http://127.0.0.1:{port}/" in text  # TensorBoard's own line: loopback
    assert "charts load Google Charts" in text and "Images" in text and "HParams" in text


def test_scalars_for_both_modes_match_the_record(server):
    metrics = load_metrics(server.run_dir / "metrics.json")
    tags = server.json("data/plugin/scalars/tags")
    for mode in MODES:
        run_tags = set(tags[f"{server.run}/{mode}"])
        for name in tb.PER_STEP:
            assert {f"rank0/{name}", f"rank1/{name}", f"mean/{name}", f"max/{name}"} <= run_tags
        assert {"step_time/timed_ms", "step_time/median_ms", "memory/rank1/optimizer_state_bytes"} <= run_tags
    assert "mean/busbw_gbps/all_reduce" in tags[f"{server.run}/sequential"]
    assert {"mean/busbw_gbps/reduce_scatter", "mean/busbw_gbps/all_gather"} <= set(tags[f"{server.run}/split"])

    # The overlaid series are the record's numbers, per profiled step.
    ranks = metrics.modes["split"].analysis.ranks
    points = server.json("data/plugin/scalars/scalars", run=f"{server.run}/split", tag="max/exposed_comm_ms")
    expected = {s.step: max(x.exposed_comm_us for r in ranks for x in r.steps if x.step == s.step) / 1e3 for s in ranks[0].steps}
    assert {p[1]: round(p[2], 3) for p in points} == {k: round(v, 3) for k, v in expected.items()}
    # Why exposed: wait and transfer per rank and profiled step, one point per mode.
    for mode in MODES:
        want = metrics.modes[mode].exposed.per_rank_step_ms(len(ranks[0].steps))
        got = [
            server.json("data/plugin/scalars/scalars", run=f"{server.run}/{mode}", tag=f"exposed/{x}_ms")[-1][2]
            for x in ("wait", "transfer")
        ]
        assert [round(x, 3) for x in got] == [round(x, 3) for x in want]
    timed = server.json("data/plugin/scalars/scalars", run=f"{server.run}/sequential", tag="step_time/timed_ms")
    assert [round(p[2], 3) for p in timed] == [round(t, 3) for t in metrics.modes["sequential"].step_time.times_ms]
    # Split keeps 1/N of the optimizer state: half of sequential's on 2 ranks.
    opt = {
        mode: server.json("data/plugin/scalars/scalars", run=f"{server.run}/{mode}", tag="memory/rank0/optimizer_state_bytes")[0][2]
        for mode in MODES
    }
    assert opt["split"] * 2 == opt["sequential"]


def test_images_return_each_modes_timeline_png(server):
    sizes = set()
    for mode in MODES:
        entries = server.json("data/plugin/images/images", run=f"{server.run}/{mode}", tag="timeline")
        assert len(entries) == 1
        png = server.get(f"data/plugin/images/individualImage?{entries[0]['query']}")
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        assert int.from_bytes(png[16:20], "big") > 1200  # wide enough to read both lanes' labels
        sizes.add(png)
    assert len(sizes) == len(MODES)  # one figure per mode, shown side by side


def test_text_returns_the_summary_table_verification_and_config(server):
    metrics = load_metrics(server.run_dir / "metrics.json")
    # Once per run, under its first mode, so the Text dashboard does not repeat it.
    tags = server.json("data/plugin/text/tags")
    assert sorted(tags[f"{server.run}/sequential"]) == ["summary/configuration", "summary/table", "summary/verification"]
    assert f"{server.run}/split" not in tags and f"{server.run}/split-blocking" not in tags
    html = server.json("data/plugin/text/text", run=f"{server.run}/sequential", tag="summary/table")[0]["text"]
    assert "<table>" in html and "step median ms" in html and "exposed comm ms" in html
    for row in console.summary_rows(metrics) + console.phase_rows(metrics):  # the console's cells, every mode
        assert all(cell in html for cell in row)
    assert "overlap yield" in html and "interference: forward" in html
    html = server.json("data/plugin/text/text", run=f"{server.run}/sequential", tag="summary/verification")[0]["text"]
    assert "all checks passed" in html and "AllReduce == AllGather(ReduceScatter): OK" in html
    html = server.json("data/plugin/text/text", run=f"{server.run}/sequential", tag="summary/configuration")[0]["text"]
    assert "<code>layers</code>" in html and "<code>gloo</code>" in html


def test_hparams_session_groups_sortable_by_headline_metrics(server):
    metrics = load_metrics(server.run_dir / "metrics.json")
    experiment = server.post("data/plugin/hparams/experiment", {"experimentName": ""})
    assert {m["name"]["tag"] for m in experiment["metricInfos"]} == set(tb.HEADLINE)
    groups = server.post(
        "data/plugin/hparams/session_groups",
        {
            "experimentName": "",
            "allowedStatuses": ["STATUS_UNKNOWN", "STATUS_SUCCESS", "STATUS_FAILURE", "STATUS_RUNNING"],
            "colParams": [{"metric": {"tag": "headline/median_step_ms"}, "order": "ORDER_ASC"}],
            "startIndex": 0,
            "sliceSize": 10,
        },
    )
    names = [g["name"] for g in groups["sessionGroups"]]
    assert sorted(names) == [f"{server.run}/{mode}" for mode in MODES]
    for g in groups["sessionGroups"]:
        mode = g["name"].rsplit("/", 1)[1]
        assert g["hparams"]["mode"] == mode and g["hparams"]["world_size"] == 2
        values = {v["name"]["tag"]: v["value"] for v in g["sessions"][0]["metricValues"]}
        assert values["headline/median_step_ms"] == pytest.approx(metrics.modes[mode].step_time.median_ms, rel=1e-6)
        assert values["headline/speedup"] == pytest.approx(metrics.speedup.measured, rel=1e-6)
        # The overlap yield is split against split-blocking: the split run alone carries it.
        assert ("headline/overlap_yield_ms" in values) == (mode == "split")
        if mode == "split":
            assert values["headline/overlap_yield_ms"] == pytest.approx(metrics.summary.overlap_yield.ms, rel=1e-6)
    medians = [g["sessions"][0]["metricValues"] for g in groups["sessionGroups"]]
    ordered = [next(v["value"] for v in m if v["name"]["tag"] == "headline/median_step_ms") for m in medians]
    assert ordered == sorted(ordered)


def test_custom_scalars_put_both_modes_on_one_chart_each(server):
    layout = server.json("data/plugin/custom_scalars/layout")
    charts = {c["title"]: c["multiline"]["tag"] for cat in layout["category"] for c in cat["chart"]}
    assert charts["step time, profiled steps, rank mean (ms)"] == ["^mean/step_ms$"]
    data = server.json("data/plugin/custom_scalars/scalars", run=f"{server.run}/split", tag="^mean/overlap_pct$")
    assert data["regex_valid"] and list(data["tag_to_events"]) == ["mean/overlap_pct"]


def test_profiler_plugin_lists_both_modes_with_rank_workers_and_logs_no_errors(server):
    # The plugin loads each run's traces in worker processes; it can take a minute on a busy machine.
    wait_for(server, lambda: len(server.json("data/plugin/pytorch_profiler/runs")["runs"]) == len(MODES))
    runs = server.json("data/plugin/pytorch_profiler/runs")["runs"]
    assert runs == [f"{server.run}/{mode}" for mode in MODES]
    host = load_metrics(server.run_dir / "metrics.json").env.hosts[0]
    for run in runs:
        assert "Overview" in server.json("data/plugin/pytorch_profiler/views", run=run)
        workers = server.json("data/plugin/pytorch_profiler/workers", run=run, view="Overview")
        assert workers == [f"{host}_0", f"{host}_1"]
    log = server.log.read_text()
    # torch-tb-profiler assumes every collective starts and ends inside one ProfilerStep. The
    # split's all_gathers start in one step's optimizer and end under the next step's forward (that
    # is the overlap), so it logs this one error for split runs; any other error is ours.
    crossing = re.compile(r"^E\d{4} .*Found (a communication op|communication ops) not belong to any step")
    errors = [line for line in log.splitlines() if re.match(r"^E\d{4} ", line) and not crossing.match(line)]
    assert not errors and "Traceback" not in log, log[-3000:]


def test_traces_are_plain_chrome_trace_json_named_for_the_profiler_plugin(compare_run_2):
    for mode in MODES:
        files = sorted((compare_run_2 / mode).glob("*.pt.trace.json*"))
        assert len(files) == 2
        for path in files:
            assert WORKER_FILE.match(path.name), path.name
            with gzip.open(path, "rt") as f:
                trace = json.load(f)
            events = trace["traceEvents"]
            assert events and all("ph" in e for e in events)
            complete = [e for e in events if e["ph"] == "X"]
            assert complete and all(isinstance(e["ts"], (int, float)) and isinstance(e["dur"], (int, float)) for e in complete)


def test_write_run_again_replaces_our_event_files_only(compare_run_2, tmp_path):
    run_dir = tmp_path / compare_run_2.name
    shutil.copytree(compare_run_2, run_dir)
    traces = sorted(p.name for p in (run_dir / "split").iterdir() if "tfevents" not in p.name)
    written = tb.write_run(run_dir)
    assert sorted(p.parent.name for p in written) == list(MODES)
    for mode in MODES:
        assert our_event_files(run_dir, mode) == [p for p in written if p.parent.name == mode]
    assert sorted(p.name for p in (run_dir / "split").iterdir() if "tfevents" not in p.name) == traces
    with pytest.raises(UserError, match="metrics.json not found"):
        tb.write_run(tmp_path)


@pytest.fixture()
def no_exec(monkeypatch):
    """The command's exec into TensorBoard, refused: these tests must stop before it."""

    def refuse(*args):
        raise AssertionError(f"the command would have started TensorBoard: {args}")

    monkeypatch.setattr("profile_overlap.cli.tensorboard.os.execv", refuse)


@pytest.mark.parametrize("host", ["nonexistent.invalid", "bad..name", "999.1.1.1"])
def test_a_host_that_does_not_resolve_is_one_line_and_exit_2(host, tmp_path, capsys, no_exec):
    from profile_overlap.cli.main import main as cli_main

    assert cli_main(["tensorboard", str(tmp_path), "--host", host]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert f"--host {host}: cannot resolve it" in err and "pass an address of this machine" in err


def test_a_port_that_cannot_be_bound_is_one_line_and_exit_2(tmp_path, capsys, no_exec):
    import socket

    from profile_overlap.cli.main import main as cli_main

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert cli_main(["tensorboard", str(tmp_path), "--port", str(port)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert f"cannot listen on 127.0.0.1 port {port}: Address already in use; pick another --port" in err


@pytest.mark.parametrize("port", ["70000", "-1", "http"])
def test_a_port_out_of_range_is_refused_by_the_parser(port, tmp_path, capsys, no_exec):
    from profile_overlap.cli.main import main as cli_main

    with pytest.raises(SystemExit) as exit_:
        cli_main(["tensorboard", str(tmp_path), "--port", port])
    assert exit_.value.code == 2
    assert "is not a port number: pass 1 to 65535" in capsys.readouterr().err
