"""`perfetto`: one merged trace of all ranks. Its structure is what Perfetto needs to drop nothing
(slices nest on every track, flows have both ends), it holds every rank and step of the analysis on
the aligned clock, and it works for the real traces in tests/data (GPU and CPU), our runs and jobs
from trace_handler. The browser half is tests/test_perfetto_browser.py."""

from __future__ import annotations

import gzip
import http.client
import json
import os
import shutil
from pathlib import Path

import pytest
from synthetic import gpu_trace, write_trace

from profile_overlap.analysis.folder import analyze_dir
from profile_overlap.analysis.options import AnalysisOptions
from profile_overlap.cli.main import main as cli_main
from profile_overlap.tools.perfetto import write_perfetto
from profile_overlap.tools.perfetto.source import find_source

from conftest import DATA
from perfetto_check import load_merged, partial_overlaps, raw_tracks
from test_api_jobs import ddp_job  # noqa: F401  (the shared job fixture)

TRACE_SETS = [
    "gloo_2rank",
    pytest.param("hta_trace_filter_2rank", marks=pytest.mark.slow),
    pytest.param("hta_nccl_parser_config_1rank", marks=pytest.mark.slow),
    "kineto_synthetic_2rank",
]
"""CPU (gloo, ours), GPU (NCCL, HTA's sampled A100 traces) and Kineto's own synthetic pair."""


def merged(folder: Path, out: Path, **kwargs):
    result = write_perfetto(find_source(folder, mode=kwargs.pop("mode", None)), out, **kwargs)
    return result, load_merged(out)


@pytest.mark.parametrize("name", TRACE_SETS)
def test_the_real_traces_come_out_whole_nested_and_with_every_rank_and_step(name, tmp_path):
    folder = DATA / name
    result, m = merged(folder, tmp_path / "merged.json.gz")
    analysis = analyze_dir(folder, AnalysisOptions(keep_spans=True))
    # Nothing lost: every slice of every trace is in the file, and on every track they nest.
    assert m.traces_slices() == sum(len(v) for v in raw_tracks(folder).values()) == result.slices
    assert {track: partial_overlaps(events) for track, events in m.slices.items() if partial_overlaps(events)} == {}
    # Every flow has a start and a finish.
    assert m.flows and all({e["ph"] for e in ends} >= {"s", "f"} for ends in m.flows.values())
    # Every rank of the analysis is a process, with each of its steps on its steps track.
    hosts = find_source(folder).hosts
    ranks = sorted(name for name in m.processes.values() if name != "modes")
    assert ranks == sorted(f"rank {r.rank}" + (f" ({hosts[r.rank]})" if r.rank in hosts else "") for r in analysis.ranks)
    for r in analysis.ranks:
        assert [e["name"] for e in sorted(m.track(r.rank, "steps"), key=lambda e: e["ts"])] == [f"step {s.step}" for s in r.steps]
        # The overlap tracks are the analysis's: hidden sums to overlap_us, exposed to exposed_comm_us
        # (each slice's ends in whole ns: at most 1 ns off per slice).
        for track, total in (("comm hidden", r.overlap_us), ("comm exposed", r.exposed_comm_us)):
            drawn = m.track(r.rank, track)
            assert sum(e["dur"] for e in drawn) == pytest.approx(total, abs=0.001 * len(drawn) + 1e-9 * total), track
        assert len(m.track(r.rank, "collectives")) == len(r.instances)
        # The exposed track is cut into wait and transfer (analysis/world/causes.py), which Perfetto
        # colours apart: each name sums to the causes' split of this rank.
        split = analysis.exposed.ranks.get(r.rank) if analysis.exposed is not None else None
        if split is not None and split.wait_us is not None and split.transfer_us is not None:
            for name, total in (("wait", split.wait_us), ("transfer", split.transfer_us)):
                drawn = [e for e in m.track(r.rank, "comm exposed") if e["name"] == name]
                assert sum(e["dur"] for e in drawn) == pytest.approx(total, abs=0.001 * len(drawn) + 1e-6 * total), (r.rank, name)
    assert result.size_bytes <= 1.5 * result.traces_bytes or name == "kineto_synthetic_2rank"  # 2 KB of traces: the metadata dominates


def overlapping_pair(folder: Path) -> Path:
    """Two ranks whose NCCL kernels on stream 20 overlap without nesting, as two communicators
    sharing a stream can show: Perfetto drops the second of each pair as they stand."""
    folder.mkdir()
    for rank in range(2):
        comm = [(20, 1000.0 * k + 100, 1000.0 * k + 300) for k in range(4)] + [(20, 1000.0 * k + 200, 1000.0 * k + 400) for k in range(4)]
        compute = [(7, 1000.0 * k, 1000.0 * k + 250) for k in range(4)]
        write_trace(gpu_trace(comm, compute, steps=[(1, 0.0, 2000.0), (2, 2000.0, 4000.0)], rank=rank), folder / f"rank{rank}.json.gz")
    return folder


def test_slices_that_partly_overlap_on_a_track_move_to_extra_tracks(tmp_path):
    folder = overlapping_pair(tmp_path / "traces")
    raw = raw_tracks(folder)
    assert sum(partial_overlaps(events) for events in raw.values()) == 8
    result, m = merged(folder, tmp_path / "merged.json.gz")
    assert result.moved == 8 and result.slices == sum(len(v) for v in raw.values()) == m.traces_slices()
    # The generator names no thread, so the stream's track is "thread 20" (Kineto's traces say "stream 20").
    stream_20 = sorted(name for name in m.threads.values() if name.startswith("thread 20"))
    assert stream_20 == ["thread 20", "thread 20", "thread 20 (2)", "thread 20 (2)"]
    assert all(partial_overlaps(events) == 0 for events in m.slices.values())


def _shifted_copy(src: Path, dst: Path, prefix: str, shift_us: float) -> None:
    dst.mkdir()
    for path in src.glob("*.json*"):
        doc = json.loads(gzip.decompress(path.read_bytes()))
        if path.name.startswith(prefix):
            for e in doc["traceEvents"]:
                if "ts" in e:
                    e["ts"] += shift_us
        (dst / path.name).write_bytes(gzip.compress(json.dumps(doc).encode()))


def _first_step_us(m, rank: int) -> float:
    return min(e["ts"] for e in m.track(rank, "steps"))


def test_a_rank_whose_clock_is_5_s_ahead_comes_out_aligned(tmp_path):
    _shifted_copy(DATA / "gloo_2rank", tmp_path / "shifted", "host_1", 5.0e6)
    _, base = merged(DATA / "gloo_2rank", tmp_path / "base.json.gz")
    _, moved = merged(tmp_path / "shifted", tmp_path / "moved.json.gz")
    gap_base = _first_step_us(base, 1) - _first_step_us(base, 0)
    gap_moved = _first_step_us(moved, 1) - _first_step_us(moved, 0)
    # Unshifted, rank 1's offset lies within its uncertainty and nothing moves; shifted, it moves
    # back by the estimate (5 s plus the unshifted estimate): the ranks are milliseconds apart, not 5 s.
    (r1_base,) = [r for r in base.doc["profile_overlap"]["modes"][0]["ranks"] if r["rank"] == 1]
    (r1_moved,) = [r for r in moved.doc["profile_overlap"]["modes"][0]["ranks"] if r["rank"] == 1]
    assert not r1_base["moved"] and r1_moved["moved"]
    assert r1_moved["clock_offset_us"] == pytest.approx(5.0e6 + r1_base["clock_offset_us"], abs=0.01)
    assert gap_moved == pytest.approx(gap_base - r1_base["clock_offset_us"], abs=0.01)
    assert abs(gap_moved) < 0.1e6
    # Each call's arrow runs from the last rank to arrive, on the aligned clock, forwards in time.
    for ends in moved.flows.values():
        s, f = (next(e for e in ends if e["ph"] == p) for p in "sf")
        assert s["ts"] <= f["ts"]


@pytest.mark.slow
def test_steps_cut_the_file_down_to_the_steps_asked_for(tmp_path):
    whole, m_whole = merged(DATA / "hta_trace_filter_2rank", tmp_path / "whole.json.gz")
    steps = sorted({int(e["name"].split()[1]) for e in m_whole.track(0, "steps")})
    cut, m_cut = merged(DATA / "hta_trace_filter_2rank", tmp_path / "cut.json.gz", steps=(steps[0], steps[0] + 1))
    assert [e["name"] for e in m_cut.track(0, "steps")] == [f"step {steps[0]}"]
    assert cut.slices < whole.slices and cut.size_bytes < whole.size_bytes
    assert all(partial_overlaps(events) == 0 for events in m_cut.slices.values())
    assert all({e["ph"] for e in ends} >= {"s", "f"} for ends in m_cut.flows.values())


def _cli(args: list[str], capsys) -> tuple[int, str, str]:
    code = cli_main(["perfetto", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_bad_input_gets_one_line_and_exit_2(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    (tmp_path / "file.txt").write_text("x")
    (tmp_path / "not_traces").mkdir()
    (tmp_path / "not_traces" / "rank0.json").write_text('{"a": 1}')
    cases = {
        "does not exist": [str(tmp_path / "nothing")],
        "is not a folder": [str(tmp_path / "file.txt")],
        "holds no job (no trace files": [str(tmp_path / "empty")],
        "traceEvents": [str(tmp_path / "not_traces")],
        "--mode split is not in": [str(DATA / "gloo_2rank"), "--mode", "split"],
        "does not exist; create it": [str(DATA / "gloo_2rank"), "--out", str(tmp_path / "no" / "such" / "x.json.gz")],
        "is a folder": [str(DATA / "gloo_2rank"), "--out", str(tmp_path)],
        "exists and is not a merged trace of ours": [str(DATA / "gloo_2rank"), "--out", str(tmp_path / "file.txt")],
    }
    if os.geteuid() != 0:  # root writes anywhere
        (tmp_path / "ro").mkdir(mode=0o500)
        cases["permission denied"] = [str(DATA / "gloo_2rank"), "--out", str(tmp_path / "ro" / "x.json.gz")]
    for needle, args in cases.items():
        code, out, err = _cli(args, capsys)
        assert code == 2 and needle in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err, (needle, err)
    assert (tmp_path / "file.txt").read_text() == "x"


def test_a_bare_trace_folder_is_written_to_the_current_folder_and_open_without_the_ui_says_how(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("profile_overlap.tools.perfetto.serve.find_ui", lambda: None)
    code, out, err = _cli([str(DATA / "gloo_2rank"), "--open"], capsys)
    assert code == 0, err
    assert (tmp_path / "gloo_2rank.perfetto.json.gz").is_file()
    assert _cli([str(DATA / "gloo_2rank")], capsys)[0] == 0  # its own file it replaces
    assert "wrote" in out and "https://ui.perfetto.dev" in out and "profile-overlap[perfetto]" in out


@pytest.mark.slow
def test_a_run_gives_every_mode_one_after_the_other_within_the_size_bound(compare_run_2, tmp_path):
    out = tmp_path / "run.json.gz"
    code = cli_main(["perfetto", str(compare_run_2), "--out", str(out)])
    assert code == 0
    m = load_merged(out)
    metrics = json.loads((compare_run_2 / "metrics.json").read_text())
    modes = list(metrics["modes"])
    markers = sorted(m.slices[(0, 1)], key=lambda e: e["ts"])
    assert [e["name"] for e in markers] == modes
    assert all(a["ts"] + a["dur"] <= b["ts"] for a, b in zip(markers, markers[1:]))
    for mode, marker in zip(modes, markers):
        for rec in metrics["modes"][mode]["analysis"]["ranks"]:
            steps = [e for e in m.track(rec["rank"], "steps") if marker["ts"] <= e["ts"] <= marker["ts"] + marker["dur"]]
            assert [e["name"] for e in steps] == [f"step {s['step']}" for s in rec["steps"]]
            # The step slices carry the record's numbers.
            assert [e["args"]["overlap_us"] for e in steps] == [s["overlap_us"] for s in rec["steps"]]
    assert all(partial_overlaps(events) == 0 for events in m.slices.values())
    assert any(e["cat"] == "collective" for ends in m.flows.values() for e in ends)
    traces = sum(p.stat().st_size for mode in modes for p in (compare_run_2 / mode).glob("*.pt.trace.json.gz"))
    assert out.stat().st_size <= 1.5 * traces, (out.stat().st_size, traces)
    # One mode, and fewer steps: smaller still.
    one = tmp_path / "split.json.gz"
    assert cli_main(["perfetto", str(compare_run_2), "--mode", "split", "--steps", "1:2", "--out", str(one)]) == 0
    m_one = load_merged(one)
    assert [e["name"] for e in m_one.slices[(0, 1)]] == ["split"]
    assert {e["name"] for r in (0, 1) for e in m_one.track(r, "steps")} == {"step 1"}
    assert one.stat().st_size < out.stat().st_size / 3


@pytest.mark.slow
def test_a_job_from_trace_handler_opens_with_its_hosts_and_every_profiled_step(ddp_job, tmp_path, capsys):  # noqa: F811
    job_dir, _ = ddp_job
    code = cli_main(["perfetto", str(job_dir.parent)])  # the log_dir: its latest job
    out, err = capsys.readouterr()
    assert code == 0, err
    path = job_dir / "perfetto.json.gz"
    assert f"wrote {path}" in out
    m = load_merged(path)
    states = {r: json.loads((job_dir / ".profile_overlap" / f"rank{r}.state").read_text()) for r in (0, 1)}
    assert sorted(m.processes.values()) == ["modes", f"rank 0 ({states[0]['host']})", f"rank 1 ({states[1]['host']})"]
    for r in (0, 1):
        assert [e["name"] for e in sorted(m.track(r, "steps"), key=lambda e: e["ts"])] == [f"step {n}" for n in (2, 3, 6, 7, 10, 11)]
    assert all(partial_overlaps(events) == 0 for events in m.slices.values())
    # The merged file sits among the job's traces and is not read as one of them.
    assert analyze_dir(job_dir).world_size == 2 and len(analyze_dir(job_dir).ranks) == 2


@pytest.mark.slow
def test_report_writes_it_when_asked_and_the_report_and_the_tab_offer_it(compare_run_2, tmp_path, capsys):
    from tensorboard.plugins import base_plugin
    from werkzeug.test import Client

    from profile_overlap.tb_plugin.plugin import OverlapPlugin

    logdir = tmp_path / "logdir"
    shutil.copytree(compare_run_2, logdir / "with")
    shutil.copytree(compare_run_2, logdir / "without")
    assert "Open in Perfetto" not in (logdir / "with" / "report.md").read_text()
    assert cli_main(["report", str(logdir / "with"), "--perfetto", "--format", "md"]) == 0
    assert f"wrote {logdir / 'with' / 'perfetto.json.gz'}" in capsys.readouterr().out
    assert "Open in Perfetto: perfetto.json.gz" in (logdir / "with" / "report.md").read_text()
    assert load_merged(logdir / "with" / "perfetto.json.gz").processes[1].startswith("rank 0")
    # The tab lists it and serves it byte for byte; a run without one gets a one-line 404.
    apps = OverlapPlugin(base_plugin.TBContext(logdir=str(logdir))).get_plugin_apps()
    runs = {r["run"]: r for r in json.loads(Client(apps["/runs"]).get("/runs").data)["runs"]}
    assert runs["with"]["perfetto"] is True and runs["without"]["perfetto"] is False
    reply = Client(apps["/perfetto"]).get("/perfetto?run=with")
    assert reply.status_code == 200 and reply.data == (logdir / "with" / "perfetto.json.gz").read_bytes()
    missing = Client(apps["/perfetto"]).get("/perfetto?run=without")
    assert missing.status_code == 404 and "profile_overlap perfetto RUN writes it" in json.loads(missing.data)["error"]


def test_the_perfetto_server_answers_only_requests_addressed_to_it(tmp_path):
    from profile_overlap.tools.perfetto.serve import start

    trace = tmp_path / "perfetto.json.gz"
    trace.write_bytes(b"the merged trace")
    (tmp_path / "ui").mkdir()
    (tmp_path / "ui" / "index.html").write_text("<title>ui</title>")
    server, url = start(trace, tmp_path / "ui")
    port = server.server_address[1]

    def ask(host: str | None, path: str = "/localtrace", method: str = "GET") -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            conn.putrequest(method, path, skip_host=True)
            if host is not None:
                conn.putheader("Host", host)
            conn.endheaders()
            reply = conn.getresponse()
            return reply.status, reply.read()
        finally:
            conn.close()

    try:
        assert url == f"http://127.0.0.1:{port}/"
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"LocalHost:{port}"):
            assert ask(host) == (200, b"the merged trace"), host
        assert ask(f"127.0.0.1:{port}", "/index.html")[0] == 200
        # DNS rebinding: a page of evil.example that resolves its name to 127.0.0.1 sends its own Host.
        for host in (f"evil.example:{port}", "evil.example", f"127.0.0.1:{port + 1}", "127.0.0.1", None):
            for method, path in (("GET", "/localtrace"), ("GET", "/index.html"), ("HEAD", "/index.html")):
                status, body = ask(host, path, method)
                assert status == 403, (host, method, path)
                assert b"the merged trace" not in body and b"<title>" not in body
        status, body = ask("evil.example:80")
        assert body.decode().count("\n") == 1 and body.startswith(b"refused: Host 'evil.example:80' is not this server")
    finally:
        server.shutdown()
        server.server_close()
