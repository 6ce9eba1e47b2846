"""The examples run under torchrun (2 CPU ranks on gloo) and give a job folder with a report and
TensorBoard scalars: fsdp2_train.py as its docstring says (--standalone), ddp_train.py through the
Slurm script, which starts one torchrun agent per node meeting through c10d rendezvous (two
"nodes" on this machine, with stand-ins for srun and scontrol). tests/test_api_jobs.py runs a DDP
job under --standalone. fsdp_tp_train.py runs on 4 ranks (a 2 x 2 mesh) and pipeline_train.py on
2 (both schedules): what they write today; their dimensions and bubbles are issue 35's analysis."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, clean_env, free_port, shared_example

pytestmark = pytest.mark.slow  # the examples run under torchrun

EXAMPLES = REPO / "examples"


def _check_job(log_dir: Path, *, kinds: set[str] | None, world: int = 2) -> Path:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (job_dir,) = [p for p in log_dir.iterdir() if p.is_dir()]
    metrics = json.loads((job_dir / "metrics.json").read_text())
    assert metrics["config"]["profiled_ranks"] == list(range(world))
    ranks = metrics["modes"]["job"]["analysis"]["ranks"]
    if kinds is not None:
        assert {c["kind"] for r in ranks for c in r["collectives"]} == kinds
    assert {p["phase"] for r in ranks for p in r["phases"]} == {"forward", "backward", "optimizer"}
    assert (job_dir / "report.html").is_file() and (job_dir / "report.md").is_file()
    acc = EventAccumulator(str(job_dir / f"rank{world - 1}"))
    acc.Reload()
    assert [e.step for e in acc.Scalars("overlap/exposed_comm_ms")] == [2, 3, 6, 7]
    return job_dir


def test_fsdp2_example_runs_under_torchrun(tmp_path):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    proc = subprocess.run(
        [*cmd, str(EXAMPLES / "fsdp2_train.py"), "--out", str(tmp_path / "runs"), "--steps", "8"],
        capture_output=True, text=True, timeout=180, env=clean_env(), cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    job_dir = _check_job(tmp_path / "runs", kinds={"all_gather", "reduce_scatter"})
    assert f"profile in {job_dir}" in proc.stdout


def test_ddp_example_runs_on_two_nodes_through_the_slurm_script(tmp_path):
    script = (EXAMPLES / "slurm_multinode.sbatch").read_text()
    assert script.startswith("#!/bin/bash") and "#SBATCH --nodes=" in script
    assert subprocess.run(["bash", "-n", str(EXAMPLES / "slurm_multinode.sbatch")]).returncode == 0
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # srun runs its command once per node (here: two local processes, each a torchrun agent); scontrol names the nodes.
    (bin_dir / "srun").write_text('#!/bin/bash\nwhile [[ $1 == --* ]]; do shift; done\n"$@" & "$@" & wait -n && wait -n\n')
    # Many nodes' worth of lines: a script that reads only the first must not die of scontrol's SIGPIPE.
    (bin_dir / "scontrol").write_text("#!/bin/bash\nfor i in $(seq 5000); do echo 127.0.0.1; done\n")
    for tool in ("srun", "scontrol"):
        (bin_dir / tool).chmod(0o755)
    env = clean_env(
        PATH=f"{bin_dir}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        SLURM_JOB_ID="4242",
        SLURM_JOB_NODELIST="node[1-2]",
        SLURM_NNODES="2",
        NPROC_PER_NODE="1",
        MASTER_PORT=str(free_port()),
        LOG_DIR=str(tmp_path / "runs"),
        STEPS="8",
    )
    proc = subprocess.run(
        ["bash", str(EXAMPLES / "slurm_multinode.sbatch")], capture_output=True, text=True, timeout=180, env=env, cwd=REPO
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    job_dir = _check_job(tmp_path / "runs", kinds={"all_reduce"})
    assert json.loads((job_dir / "metrics.json").read_text())["env"]["num_nodes"] == 2


def _traces(job_dir: Path) -> dict[int, list[dict]]:
    """Each rank's trace documents (one per profiler cycle), by `distributedInfo.rank`."""
    out: dict[int, list[dict]] = {}
    for path in sorted(job_dir.glob("*.pt.trace.json.gz")):
        with gzip.open(path, "rt") as f:
            doc = json.load(f)
        out.setdefault(doc["distributedInfo"]["rank"], []).append(doc)
    return out


def test_fsdp_tp_example_runs_on_a_2x2_mesh_of_four_gloo_ranks_and_declares_its_dp_and_tp_groups(tmp_path_factory):
    job_dir, proc = shared_example(tmp_path_factory, "fsdp_tp_train.py", 4, "--steps", "8")  # tests/test_dimensions.py reads it too
    assert _check_job(job_dir.parent, kinds=None, world=4) == job_dir
    assert f"profile in {job_dir}" in proc.stdout and "returned a view tensor" not in proc.stderr
    traces = _traces(job_dir)
    assert sorted(traces) == [0, 1, 2, 3] and all(len(docs) == 2 for docs in traces.values())
    mesh = {"mesh_dp": [[0, 2], [1, 3]], "mesh_tp": [[0, 1], [2, 3]]}  # rank = dp_index * 2 + tp_index
    for rank, docs in traces.items():
        groups = {g["pg_desc"]: g for g in docs[0]["distributedInfo"]["pg_config"]}
        assert set(groups) == {"default_pg", "mesh_dp", "mesh_tp"}
        for desc, options in mesh.items():
            assert groups[desc]["pg_size"] == 2 and groups[desc]["ranks"] in options and rank in groups[desc]["ranks"]
    # Today's record counts every gloo work item of every rank's traces as a call.
    metrics = json.loads((job_dir / "metrics.json").read_text())
    calls = sum(c["count"] for r in metrics["modes"]["job"]["analysis"]["ranks"] for c in r["collectives"])
    gloo = sum(e["name"].startswith("gloo:") for docs in traces.values() for d in docs for e in d["traceEvents"])
    assert calls == gloo > 0


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_pipeline_example_runs_two_gloo_stages_with_the_schedule_and_microbatches_it_was_given(tmp_path_factory, schedule):
    m = 4
    # The same job as tests/test_dimensions.py's bubble test.
    job_dir, proc = shared_example(
        tmp_path_factory, "pipeline_train.py", 2, "--steps", "6", "--schedule", schedule, "--microbatches", str(m)
    )
    assert f"stage 1: trained 6 steps ({schedule}, {m} microbatches" in proc.stdout
    assert f"profile in {job_dir}" in proc.stdout
    traces = _traces(job_dir)
    assert sorted(traces) == [0, 1]
    for rank, docs in traces.items():
        ev = docs[0]["traceEvents"]
        steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if e["name"] in ("ProfilerStep#2", "ProfilerStep#3"))
        assert len(steps) == 2
        p2p = sorted((e["ts"], e["name"]) for e in ev if e["name"] in ("gloo:send", "gloo:recv"))
        assert all(e["tid"] == e["pid"] for e in ev if e["name"] in ("gloo:send", "gloo:recv")), "on the main thread"
        for lo, hi in steps:
            order = [name.removeprefix("gloo:") for t, name in p2p if lo <= t < hi]
            # Stage 0 sends activations and receives gradients, stage 1 the other way round, one of each per microbatch.
            assert sorted(order) == ["recv"] * m + ["send"] * m
            if rank == 0:  # GPipe: every forward first; 1F1B: the first backward's gradients before the third forward's send
                expected = (
                    ["send"] * m + ["recv"] * m if schedule == "gpipe" else ["send", "send", "recv", "send", "recv", "send", "recv", "recv"]
                )
                assert order == expected


@pytest.mark.parametrize(
    ("script", "world", "args", "line"),
    [
        ("fsdp_tp_train.py", "4", ["--tp", "3"], "fsdp_tp_train.py: --tp 3 must divide the world size (4)"),
        ("pipeline_train.py", "1", [], "pipeline_train.py: one stage per rank needs 2 or more ranks (1 here)"),
        ("pipeline_train.py", "2", ["--layers", "3"], "pipeline_train.py: --layers 3 is not a multiple of the 2 stages"),
        ("pipeline_train.py", "2", ["--microbatches", "3"], "pipeline_train.py: --microbatches 3 does not divide --batch 16"),
    ],
)
def test_the_multi_dimension_examples_refuse_a_shape_that_does_not_fit_in_one_line_before_any_rank_waits(script, world, args, line):
    env = clean_env(WORLD_SIZE=world, RANK="0")  # as torchrun sets them; no rendezvous is reached
    proc = subprocess.run([sys.executable, str(EXAMPLES / script), *args], capture_output=True, text=True, timeout=120, env=env, cwd=REPO)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    (out,) = proc.stdout.splitlines()
    assert out.startswith(line) and ": " in out.removeprefix(line)
