"""End-to-end runs under torchrun on gloo: outputs, traces, verification, faults, multi-node."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, SMALL, clean_env, load_trace, only_run_dir, torchrun, torchrun_nodes

pytestmark = pytest.mark.slow  # torchrun jobs

PHASES = {
    "sequential": {"forward", "backward", "optimizer", "sequential/all_reduce"},
    "split": {
        "forward",
        "backward",
        "optimizer",
        "split/reduce_scatter",
        "split/wait_reduce_scatter",
        "split/shard_update",
        "split/all_gather",
    },
    "split-blocking": {"forward", "backward", "optimizer", "split/reduce_scatter", "split/wait_reduce_scatter", "split/all_gather"},
}


def _thread_names(trace: dict) -> dict:
    return {e["tid"]: e["args"]["name"] for e in trace["traceEvents"] if e.get("ph") == "M" and e.get("name") == "thread_name"}


def check_mode_traces(run_dir: Path, mode: str, nproc: int) -> None:
    traces = sorted((run_dir / mode).glob("*.pt.trace.json.gz"))
    assert len(traces) == nproc, traces
    ranks = set()
    for path in traces:
        # torch-tb-profiler's pattern <worker>[.<span>].pt.trace.json[.gz], worker = <host>_<rank>
        assert re.fullmatch(r".+_\d+\.\d+\.pt\.trace\.json\.gz", path.name), path.name
        trace = load_trace(path)
        ranks.add(trace["distributedInfo"]["rank"])
        assert trace["distributedInfo"]["backend"] == "gloo"
        events = trace["traceEvents"]
        names = {e.get("name") for e in events}
        assert PHASES[mode] <= names, PHASES[mode] - names
        threads = _thread_names(trace)
        main_tid = next(e["tid"] for e in events if str(e.get("name", "")).startswith("ProfilerStep#"))
        gloo = [e for e in events if str(e.get("name", "")).startswith("gloo:")]
        assert gloo, "no gloo:* communication events"
        # On gloo's worker threads, never the main thread. (Kineto sometimes records a worker
        # under its pre-rename name "python" instead of "pt_gloo_runloop", so names alone won't do.)
        assert all(e["tid"] != main_tid for e in gloo)
        assert any("pt_gloo_runloop" in threads.get(e["tid"], "") for e in gloo)
        main_ops = {e["name"] for e in events if e.get("cat") == "cpu_op" and e["tid"] == main_tid}
        # A real forward and autograd backward (mlp: tanh layers, an MSE loss).
        assert {"aten::mm", "aten::tanh", "autograd::engine::evaluate_function: TanhBackward0", "aten::mse_loss"} <= main_ops
    assert ranks == set(range(nproc))


def test_compare_run_writes_everything(compare_run_4):
    run_dir = compare_run_4
    assert re.fullmatch(r"\d{8}-\d{6}-compare-gloo-w4", run_dir.name)
    config = json.loads((run_dir / "config.json").read_text())
    assert config["mode"] == "compare" and config["dim"] == 256 and config["layers"] == 4
    env = json.loads((run_dir / "env.json").read_text())
    assert env["world_size"] == 4 and env["backend"] == "gloo" and env["torch"]
    assert [r["rank"] for r in env["ranks"]] == [0, 1, 2, 3]
    assert json.loads((run_dir / "status.json").read_text())["state"] == "succeeded"
    metrics = json.loads((run_dir / "metrics.json").read_text())
    for mode in ("sequential", "split"):
        m = metrics["modes"][mode]
        assert len(m["step_time"]["times_ms"]) == 3
        assert 0 < m["step_time"]["p10_ms"] <= m["step_time"]["median_ms"] <= m["step_time"]["p90_ms"]
        assert all(c["passed"] for c in m["checks"])
        check_mode_traces(run_dir, mode, 4)
    assert [c["passed"] for c in metrics["checks"]] == [True, True]  # split and split-blocking against sequential
    # ZeRO's memory claim, measured on the tensors each rank holds: 1/N of the optimizer state.
    seq_state = metrics["modes"]["sequential"]["memory"][0]["optimizer_state_bytes"]
    split_state = metrics["modes"]["split"]["memory"][0]["optimizer_state_bytes"]
    assert seq_state == 2 * 4 * 256 * 256 * 4  # exp_avg + exp_avg_sq, K*d*d, float32 moments
    assert split_state * 4 == seq_state
    assert metrics["speedup"]["measured"] > 0


def test_compare_run_summary_on_rank0_only(compare_run_4):
    out = (compare_run_4 / "_stdout.txt").read_text()
    assert out.count("step time and overlap per mode") == 1
    assert "AllReduce == AllGather(ReduceScatter): OK" in out
    assert "sequential == split: final parameters: OK" in out
    assert str(compare_run_4) in out.replace("\n", "")
    assert f"report: {compare_run_4 / 'report.html'}" in out
    assert f"TensorBoard: python -m profile_overlap tensorboard {compare_run_4.parent}" in out


def test_single_mode_two_ranks(split_run_2):
    """One mode alone (split; sequential runs alone the same way, through the same harness)."""
    mode = "split"
    run_dir, _ = split_run_2
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert list(metrics["modes"]) == [mode]
    assert metrics["speedup"] is None
    check_mode_traces(run_dir, mode, 2)
    assert [p.name for p in run_dir.iterdir() if p.is_dir() and p.name != "logs"] == [mode]


def test_compare_two_ranks(compare_run_2):
    metrics = json.loads((compare_run_2 / "metrics.json").read_text())
    assert list(metrics["modes"]) == ["sequential", "split", "split-blocking"]
    for mode in metrics["modes"]:
        check_mode_traces(compare_run_2, mode, 2)


def test_injected_fault_fails_verification(tmp_path):
    env = clean_env(PROFILE_OVERLAP_FAULT="corrupt:rank=1:step=0:layer=2")
    proc = torchrun(["--mode", "split", "--out", str(tmp_path), *SMALL], nproc=2, env=env)
    assert proc.returncode != 0
    assert "AllReduce == AllGather(ReduceScatter): FAILED" in proc.stdout
    assert "at rank 1, step 0, layer 2" in proc.stdout
    run_dir = only_run_dir(tmp_path)
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "failed" and "verification failed" in status["reason"]
    check = json.loads((run_dir / "metrics.json").read_text())["modes"]["split"]["checks"][0]
    assert (
        not check["passed"]
        and check["max_abs_err"] >= 1.0
        and (check["worst_rank"], check["worst_step"], check["worst_layer"]) == (1, 0, 2)
    )


def test_no_profile_times_steps_only(no_profile_run_2):
    run_dir = no_profile_run_2
    assert not list(run_dir.glob("**/*.pt.trace.json*"))
    assert list((run_dir / "split").glob("events.out.tfevents.*"))  # step times still go to TensorBoard
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert len(metrics["modes"]["split"]["step_time"]["times_ms"]) == 3 and metrics["modes"]["split"]["analysis"] is None


def test_self_launch_without_torchrun(tmp_path):
    """Without torchrun it starts its own ranks through torch's elastic launcher."""
    cmd = [
        sys.executable,
        "-m",
        "profile_overlap",
        "--nproc-per-node",
        "2",
        "--mode",
        "split",
        "--no-profile",
        "--out",
        str(tmp_path),
        *SMALL,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=clean_env(), cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    env = json.loads((only_run_dir(tmp_path) / "env.json").read_text())
    assert env["world_size"] == 2


@pytest.mark.parametrize("chosen", [None, "2"])
def test_self_launched_ranks_get_one_intra_op_thread_as_under_torchrun_unless_chosen(tmp_path, chosen):
    """Two threads per CPU rank made a rank's numbers depend on timing (README, "Console")."""
    code = (
        "import types, threads_probe; from profile_overlap.run.launch import launch_or_run; "
        f"job = types.SimpleNamespace(nproc_per_node=2, out={str(tmp_path)!r}); "
        "launch_or_run(types.SimpleNamespace(job=job), entry=threads_probe.report)"
    )
    env = {k: v for k, v in clean_env().items() if k != "OMP_NUM_THREADS"} | ({"OMP_NUM_THREADS": chosen} if chosen else {})
    env["PYTHONPATH"] = str(REPO / "tests" / "helpers")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240, env=env, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [(tmp_path / f"rank{r}").read_text() for r in (0, 1)] == [chosen or "1"] * 2


def test_two_nodes_through_c10d_rendezvous(tmp_path):
    """Two torchrun agents on this machine form one 4-rank job (2 ranks each)."""
    args = ["--mode", "split", "--no-profile", "--out", str(tmp_path), "--name", "twonodes", *SMALL]
    procs = torchrun_nodes([args, args], nproc=2)
    assert [p.returncode for p in procs] == [0, 0], [p.stderr[-2000:] for p in procs]
    env = json.loads((tmp_path / "twonodes" / "env.json").read_text())
    assert env["world_size"] == 4 and env["num_nodes"] == 2
    assert sorted(r["node_rank"] for r in env["ranks"]) == [0, 0, 1, 1]


def _gloo_busy_us(trace: dict) -> float:
    """Union length of the gloo:* events inside the ProfilerStep ranges (where a run measures),
    computed here independently of the analysis code."""
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in trace["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")]
    spans = []
    for e in trace["traceEvents"]:
        if str(e.get("name", "")).startswith("gloo:"):
            for lo, hi in steps:
                start, end = max(e["ts"], lo), min(e["ts"] + e["dur"], hi)
                if end > start:
                    spans.append((start, end))
    spans.sort()
    total, cur_start, cur_end = 0.0, None, None
    for start, end in spans:
        if cur_end is None or start > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    return total + (cur_end - cur_start if cur_end is not None else 0.0)


def test_in_run_analysis_is_consistent_with_the_traces(compare_run_4):
    """split hides communication behind compute on every rank; sequential hides nothing; comm_us is
    the union of the gloo events inside the ProfilerStep ranges of each rank's own trace."""
    metrics = json.loads((compare_run_4 / "metrics.json").read_text())
    for mode in ("sequential", "split"):
        ranks = metrics["modes"][mode]["analysis"]["ranks"]
        assert [r["rank"] for r in ranks] == [0, 1, 2, 3]
        for r in ranks:
            path = next(p for p in (compare_run_4 / mode).glob(f"*_{r['rank']}.*.pt.trace.json.gz"))
            assert r["comm_us"] == pytest.approx(_gloo_busy_us(load_trace(path)), rel=1e-6)
            assert r["device"] == "cpu" and len(r["steps"]) == 2
            if mode == "split":
                assert r["overlap_us"] > 0 and r["overlap_pct"] > 0
                assert {c["kind"] for c in r["collectives"]} == {"reduce_scatter", "all_gather"}
            else:
                assert r["overlap_us"] == 0
                assert {c["kind"] for c in r["collectives"]} == {"all_reduce"}
    timeline = json.loads((compare_run_4 / "timeline.json").read_text())
    assert list(timeline["modes"]) == ["sequential", "split", "split-blocking"]
    labels = {span[4] for r in timeline["modes"]["split"]["ranks"] for span in r["spans"]}
    assert {"forward", "backward", "split/reduce_scatter", "split/all_gather"} <= labels
    out = (compare_run_4 / "_stdout.txt").read_text()
    assert "ideal from the sequential mode's comm and compute" in out
    assert re.search(r"busbw GB/s \(mean over ranks\): sequential all_reduce [\d.e-]+; split all_gather [\d.e-]+, reduce_scatter", out)


def test_analyze_of_a_run_folder_equals_the_in_run_analysis(compare_run_2, tmp_path):
    """One code path: `analyze` on a mode folder (next to our own metrics.json, timeline.json, ...)
    gives the numbers the run computed rank by rank."""
    from conftest import cli

    out = tmp_path / "split.json"
    # A run measures inside its ProfilerStep ranges: `--steps :` asks analyze for the same.
    proc = cli(["analyze", str(compare_run_2 / "split"), "--steps", ":", "--json", str(out)])
    assert proc.returncode == 0, proc.stderr
    ours = json.loads(out.read_text())
    in_run = json.loads((compare_run_2 / "metrics.json").read_text())["modes"]["split"]["analysis"]
    assert ours["world_size"] == in_run["world_size"] == 2
    for a, b in zip(ours["ranks"], in_run["ranks"]):
        for key in ("rank", "comm_us", "compute_us", "overlap_us", "exposed_comm_us", "overlap_pct", "wait_us", "transfer_us"):
            assert a[key] == b[key], key
    assert cli(["analyze", str(compare_run_2 / "sequential")]).returncode == 0


def test_analyze_of_a_whole_run_folder_skips_our_records(compare_run_2, tmp_path):
    """config.json, metrics.json, ... beside the traces are ours, not traces: analyze reads the
    two modes' traces (one span file per mode and rank, pooled per rank)."""
    from conftest import cli

    out = tmp_path / "all.json"
    proc = cli(["analyze", str(compare_run_2), "--json", str(out)])
    assert proc.returncode == 0, proc.stderr
    assert [r["rank"] for r in json.loads(out.read_text())["ranks"]] == [0, 1]


def test_env_records_a_command_that_recreates_the_config(compare_run_2):
    """The reproduce command spells out every flag (defaults included) and parses back to the
    same config; --name is left out, since that folder exists."""
    import shlex

    from profile_overlap.cli.main import build_parser
    from profile_overlap.run.config import from_args

    env = json.loads((compare_run_2 / "env.json").read_text())
    words = shlex.split(env["command"])
    assert words[:4] == ["torchrun", "--standalone", "--nproc-per-node=2", "-m"]
    args = words[words.index("profile_overlap") + 1 :]
    assert args[0] == "run" and "--name" not in args
    rebuilt = from_args(build_parser("run").parse_args(args[1:]))
    recorded = json.loads((compare_run_2 / "config.json").read_text())
    assert {k: v for k, v in rebuilt.to_dict().items() if k != "nproc_per_node"} == {
        k: v for k, v in recorded.items() if k != "nproc_per_node"
    }
