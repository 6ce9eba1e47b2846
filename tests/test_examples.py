"""The examples run under torchrun (2 CPU ranks on gloo) and give a job folder with a report and
TensorBoard scalars: fsdp2_train.py as its docstring says (--standalone), ddp_train.py through the
Slurm script, which starts one torchrun agent per node meeting through c10d rendezvous (two
"nodes" on this machine, with stand-ins for srun and scontrol). tests/test_api_jobs.py runs a DDP
job under --standalone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, clean_env, free_port

pytestmark = pytest.mark.slow  # the examples run under torchrun

EXAMPLES = REPO / "examples"


def _check_job(log_dir: Path, *, kinds: set[str]) -> Path:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (job_dir,) = [p for p in log_dir.iterdir() if p.is_dir()]
    metrics = json.loads((job_dir / "metrics.json").read_text())
    assert metrics["config"]["profiled_ranks"] == [0, 1]
    ranks = metrics["modes"]["job"]["analysis"]["ranks"]
    assert {c["kind"] for r in ranks for c in r["collectives"]} == kinds
    assert {p["phase"] for r in ranks for p in r["phases"]} == {"forward", "backward", "optimizer"}
    assert (job_dir / "report.html").is_file() and (job_dir / "report.md").is_file()
    acc = EventAccumulator(str(job_dir / "rank1"))
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
