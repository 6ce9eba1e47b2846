"""`torchrun ... -m profile_overlap analyze DIR`: the analysis spread over a torchrun job's ranks
(analysis/cluster.py) gives what a single-process `analyze` gives, byte for byte."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from profile_overlap.analysis.cluster import share

from conftest import REPO, clean_env, free_port, torchrun, torchrun_nodes

DATA = Path(__file__).parent / "data"


def single(*args, columns: str = "200") -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "profile_overlap", "analyze", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=clean_env(COLUMNS=columns),
    )


def tables(stdout: str) -> list[str]:
    """The console output without the `wrote PATH` line, and the steps line without its CSV's path (the paths differ)."""
    return [line.split("; per-step rows: in ")[0] for line in stdout.splitlines() if not line.startswith("wrote ")]


def test_files_are_shared_out_largest_first_to_the_least_loaded_rank():
    # 50 -> 0, 30 -> 1, 20 -> 1 (30 < 50), 10 -> 0 (a tie at 50: the lower rank)
    assert share([10, 50, 30, 20], 2) == [0, 0, 1, 1]
    assert share([5, 5, 5], 4) == [0, 1, 2]
    assert share([], 3) == []


@pytest.mark.slow
@pytest.mark.parametrize("folder", ["hta_trace_filter_2rank", "gloo_2rank"])
def test_standalone_two_ranks_write_the_same_json_as_one_process(tmp_path, folder):
    one = single(DATA / folder, "--json", tmp_path / "one.json")
    assert one.returncode == 0, one.stderr
    p = torchrun(["analyze", str(DATA / folder), "--json", str(tmp_path / "two.json")], nproc=2, env=clean_env(COLUMNS="200"))
    assert p.returncode == 0, p.stderr[-3000:]
    assert (tmp_path / "two.json").read_bytes() == (tmp_path / "one.json").read_bytes()
    # Rank 0 prints the tables once; rank 1 prints nothing.
    assert tables(p.stdout) == tables(one.stdout)


@pytest.mark.slow
def test_two_agents_as_two_nodes_write_the_same_json_as_one_process(tmp_path):
    folder = DATA / "hta_trace_filter_2rank"
    one = single(folder, "--json", tmp_path / "one.json", columns="140")  # torchrun_nodes' console: the default width
    assert one.returncode == 0, one.stderr
    out = tmp_path / "nodes.json"
    agents = torchrun_nodes([["analyze", str(folder), "--json", str(out)]] * 2, nproc=1)
    assert [a.returncode for a in agents] == [0, 0], [a.stderr[-2000:] for a in agents]
    assert out.read_bytes() == (tmp_path / "one.json").read_bytes()
    # Exactly one agent's worker is rank 0 and prints; the other prints nothing.
    printed = [a for a in agents if a.stdout.strip()]
    assert len(printed) == 1 and tables(printed[0].stdout) == tables(one.stdout)


@pytest.mark.slow
def test_bad_files_on_any_rank_give_the_single_process_answers(tmp_path):
    d = tmp_path / "mixed"
    shutil.copytree(DATA / "hta_trace_filter_2rank", d)
    (d / "zero.json").touch()
    (d / "notes.json").write_text('{"a": 1}')
    data = (DATA / "hta_trace_filter_2rank" / "sampled_rank-1.json.gz").read_bytes()
    (d / "cut.json.gz").write_bytes(data[:1000])

    one = single(d)
    assert one.returncode == 2 and len(one.stderr.strip().splitlines()) == 1, one.stderr
    p = torchrun(["analyze", str(d)], nproc=2)
    assert p.returncode != 0
    # Our line is rank 0's, once, on a line of its own; torchrun then reports the failed worker.
    assert p.stderr.splitlines().count(one.stderr.strip()) == 1, p.stderr[-3000:]

    one = single(d, "--skip-bad", "--json", tmp_path / "one.json")
    assert one.returncode == 0, one.stderr
    p = torchrun(["analyze", str(d), "--skip-bad", "--json", str(tmp_path / "two.json")], nproc=2)
    assert p.returncode == 0, p.stderr[-3000:]
    warnings = [line for line in p.stderr.splitlines() if line.startswith("warning:")]
    assert warnings == [line for line in one.stderr.splitlines() if line.startswith("warning:")] and len(warnings) == 3
    assert (tmp_path / "two.json").read_bytes() == (tmp_path / "one.json").read_bytes()


@pytest.mark.slow
def test_the_slurm_analyze_script_writes_the_single_process_json(tmp_path):
    folder = DATA / "gloo_2rank"
    one = single(folder, "--json", tmp_path / "one.json")
    assert one.returncode == 0, one.stderr
    script = REPO / "examples" / "slurm_analyze.sbatch"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # srun runs its command once per node (here: two local torchrun agents); scontrol names the nodes.
    (bin_dir / "srun").write_text('#!/bin/bash\nwhile [[ $1 == --* ]]; do shift; done\n"$@" & "$@" & wait -n && wait -n\n')
    (bin_dir / "scontrol").write_text("#!/bin/bash\necho 127.0.0.1\necho 127.0.0.1\n")
    for tool in ("srun", "scontrol"):
        (bin_dir / tool).chmod(0o755)
    env = clean_env(
        PATH=f"{bin_dir}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        SLURM_JOB_ID="4243",
        SLURM_JOB_NODELIST="node[1-2]",
        SLURM_NNODES="2",
        NPROC_PER_NODE="1",
        MASTER_PORT=str(free_port()),
        TRACE_DIR=str(folder),
        OUT=str(tmp_path / "slurm.json"),
    )
    p = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=240, env=env, cwd=REPO)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert (tmp_path / "slurm.json").read_bytes() == (tmp_path / "one.json").read_bytes()
