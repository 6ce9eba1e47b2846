"""torch's engines (DDP, FSDP2) beside our schedules: the same model, data and initial weights, real
gloo ranks under torchrun."""

from __future__ import annotations

import json

import pytest

from conftest import FEW_STEPS, TINY_TRANSFORMER, cli, only_run_dir, torchrun

pytestmark = pytest.mark.slow  # torchrun jobs of the engine modes


def _calls(rank: dict) -> dict[tuple[str, str], dict]:
    return {(c["phase"], c["kind"]): c for c in rank["phase_collectives"]}


def _param_bytes(metrics: dict, mode: str) -> int:
    """The model's parameter bytes: what sequential (full replicas, unpadded here) holds."""
    return metrics["modes"][mode]["memory"][0]["param_bytes"]


def test_four_modes_train_the_same_and_each_engine_is_attributed(engine_run_2):
    """The issue's command, at test sizes: sequential, split, ddp and fsdp2 on one model and data."""
    run_dir, _ = engine_run_2
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert tuple(metrics["modes"]) == ("sequential", "split", "ddp", "fsdp2")

    # Every mode against the first, and every mode across ranks; on 2 gloo ranks in float32, our
    # Adam is torch.optim.Adam's arithmetic and the sums match, so they end bit-identical.
    assert [c["name"] for c in metrics["checks"]] == [f"sequential == {m}: final parameters" for m in ("split", "ddp", "fsdp2")]
    assert all(c["passed"] and c["max_abs_err"] == 0 for c in metrics["checks"])
    for mode in ("ddp", "fsdp2"):
        (agree,) = metrics["modes"][mode]["checks"]
        assert agree["name"] == f"{mode}: parameters equal on every rank" and agree["passed"]

    full = _param_bytes(metrics, "ddp")
    steps = 2
    for rank in metrics["modes"]["ddp"]["analysis"]["ranks"]:
        calls = _calls(rank)
        # DDP: bucketed all_reduce in backward, every parameter byte once per step.
        assert set(calls) == {("backward", "all_reduce")}
        assert calls[("backward", "all_reduce")]["nbytes"] == steps * full
    for rank in metrics["modes"]["fsdp2"]["analysis"]["ranks"]:
        calls = _calls(rank)
        # FSDP2: all_gather in forward and again in backward (resharded after forward), reduce_scatter in backward.
        assert set(calls) == {("forward", "all_gather"), ("backward", "all_gather"), ("backward", "reduce_scatter")}
        assert calls[("forward", "all_gather")]["nbytes"] == steps * full
        assert calls[("backward", "reduce_scatter")]["nbytes"] == steps * full

    # Memory as each engine holds it: FSDP2 keeps 1/N shards, DDP full replicas.
    ddp, fsdp2 = (metrics["modes"][m]["memory"][0] for m in ("ddp", "fsdp2"))
    assert fsdp2["param_bytes"] * 2 == ddp["param_bytes"]
    assert fsdp2["optimizer_state_bytes"] * 2 == ddp["optimizer_state_bytes"] == 2 * full


def test_fsdp2_without_reshard_gathers_only_in_forward(tmp_path):
    args = ["--mode", "fsdp2", "--reshard-after-forward", "false", "--out", str(tmp_path), *TINY_TRANSFORMER, *FEW_STEPS]
    proc = torchrun(args, nproc=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = json.loads((only_run_dir(tmp_path) / "metrics.json").read_text())
    for rank in metrics["modes"]["fsdp2"]["analysis"]["ranks"]:
        assert ("backward", "all_gather") not in _calls(rank)
        assert ("forward", "all_gather") in _calls(rank)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--modes", "sequential,zero3"], "--modes: unknown mode 'zero3'; choose from sequential, split, split-blocking, ddp, fsdp2"),
        (["--mode", "ddp", "--modes", "ddp,split"], "--modes goes with --mode compare"),
        (["--modes", "split,split"], "give two or more different modes"),
        (["--mode", "ddp", "--bucket-cap-mb", "0"], "--bucket-cap-mb must be positive, got 0"),
        (["--mode", "fsdp2", "--dtype", "float16"], "--dtype float16 with ddp or fsdp2"),
        (["--mode", "fsdp2", "--reshard-after-forward", "maybe"], "--reshard-after-forward"),
    ],
)
def test_bad_engine_flags_get_one_line_before_any_rank_starts(tmp_path, args, message):
    proc = cli(["--nproc-per-node", "2", "--out", str(tmp_path), *args])
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not list(tmp_path.iterdir())  # no run folder: nothing started


def test_fsdp2_that_cannot_shard_the_positions_fails_on_every_rank(tmp_path):
    proc = torchrun(["--mode", "fsdp2", "--out", str(tmp_path), *TINY_TRANSFORMER, "--seq-len", "15", *FEW_STEPS], nproc=2)
    assert proc.returncode != 0
    assert "--seq-len 15 is not divisible by the world size 2" in proc.stderr


ENGINE_COLLECTIVES = {
    "ddp": {("backward", "all_reduce")},
    "fsdp2": {("forward", "all_gather"), ("backward", "all_gather"), ("backward", "reduce_scatter")},
}
FOUND_FROM = {
    "ddp": {"forward": ["DDP"], "backward": ["autograd"], "optimizer": ["torch.optim"]},
    "fsdp2": {"forward": ["FSDP2"], "backward": ["autograd"], "optimizer": ["torch.optim"]},
}


def _unlabelled_job(engine: str, out, *extra: str) -> None:
    import subprocess
    import sys

    from conftest import REPO, clean_env

    script = REPO / "tests" / "helpers" / "unlabelled_engines.py"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", str(script), engine, str(out), *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=clean_env(), cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["ddp", "fsdp2"])
def test_a_users_unlabelled_job_gets_its_phases_from_the_engines_ranges(tmp_path, engine):
    """A job with no forward/backward/optimizer labels, profiled with torch's own trace handler:
    FSDP2's `FSDP::*` and DDP's ranges, autograd's frames and torch.optim's ranges give each step's
    phases, and each collective lands in the phase that issued it."""
    _unlabelled_job(engine, tmp_path / "tb")
    out = tmp_path / "overlap.json"
    proc = cli(["analyze", str(tmp_path / "tb"), "--json", str(out)])
    assert proc.returncode == 0, proc.stderr
    record = json.loads(out.read_text())
    for rank in record["ranks"]:
        assert {p["phase"]: p["sources"] for p in rank["phases"]} == FOUND_FROM[engine]
        assert all([p["phase"] for p in s["phases"]] == ["forward", "backward", "optimizer"] for s in rank["steps"])
        found = {(c["phase"], c["kind"]) for c in rank["phase_collectives"]}
        # DDP rebuilds its buckets in the second iteration's forward: a broadcast of the new order.
        assert found - {("forward", "broadcast")} == ENGINE_COLLECTIVES[engine] if engine == "ddp" else found == ENGINE_COLLECTIVES[engine]
        phases = {p["phase"]: p for p in rank["phases"]}
        assert phases["backward"]["comm_us"] > 0 and (phases["forward"]["comm_us"] > 0) == (
            engine == "fsdp2" or ("forward", "broadcast") in found
        )
    (check,) = [c for c in record["integrity"]["checks"] if c["name"] == "steps.phases"]
    assert check["status"] == "ok"


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["ddp", "fsdp2"])
def test_a_users_unlabelled_job_through_the_trace_handler_reports_its_phases(tmp_path, engine):
    """The same job with profile_overlap.trace_handler: the job's record and report carry the phases,
    their communication, and one sentence on where they were found."""
    from profile_overlap.record.load import load_metrics

    _unlabelled_job(engine, tmp_path / "tb", "ours")
    (job_dir,) = [p for p in (tmp_path / "tb").iterdir() if p.is_dir()]
    job = load_metrics(job_dir / "metrics.json").summary.modes["job"]
    assert {p.phase: list(p.sources) for p in job.phases} == FOUND_FROM[engine]
    comm = {p.phase: p.comm_ms for p in job.phases}
    assert comm["backward"] > 0 and (comm["forward"] > 0 if engine == "fsdp2" else True)
    assert {(c.phase, c.kind) for c in job.phase_collectives} - {("forward", "broadcast")} == ENGINE_COLLECTIVES[engine]
    report = (job_dir / "report.md").read_text()
    engine_words = "DDP's ranges" if engine == "ddp" else "FSDP2's ranges"
    assert (
        "job's phases were [found from what torch records](#phases) (its steps have no forward/backward/optimizer labels): "
        f"forward from {engine_words}; backward from autograd's frames; optimizer from torch.optim's ranges." in report
    )
    assert "communicates in none of its phases" not in report
    # The timeline's phase band (figures, the Overlap tab) draws the found windows.
    timeline = json.loads((job_dir / "timeline.json").read_text())
    for rank in timeline["modes"]["job"]["ranks"]:
        assert {name for _, name, _, _ in rank["phases"]} == {"forward", "backward", "optimizer"}
