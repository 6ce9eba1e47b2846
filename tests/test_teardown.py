"""A good run must end as a success: nothing of the process group may outlive our code.

The teardown abort (issue 11): the default gloo process group was kept alive past
destroy_process_group by torch.distributed.nn's default arguments (imported by the profiler after
init), so its worker threads were still running during interpreter finalization, where one of them
could abort the process after a successful run. run.job.init_process_group imports that module first;
this test checks the outcome on real ranks: once `main` returns, no gloo thread is left.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, SMALL, clean_env

pytestmark = pytest.mark.slow  # torchrun jobs

HELPER = Path(__file__).resolve().parent / "helpers" / "threads_after_main.py"


@pytest.mark.parametrize(
    "command", [["run", "--mode", "compare"], ["bench-collectives", "--sizes", "1K:4K", "--iters", "2", "--warmup", "1"]]
)
def test_no_gloo_thread_outlives_the_job(tmp_path, command):
    threads_out = tmp_path / "threads"
    threads_out.mkdir()
    args = [*command, "--out", str(tmp_path / "runs")]
    if command[0] == "run":
        args += SMALL  # profiled: the profiler's first trace is what imported torch.distributed.nn late
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", str(HELPER), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=REPO, env=clean_env(THREADS_OUT=str(threads_out)))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    for rank in (0, 1):
        record = json.loads((threads_out / f"rank{rank}.json").read_text())
        assert record["exit_code"] == 0
        left = [name for name in record["threads"] if "gloo" in name]
        assert not left, f"rank {rank}: gloo threads still running after the job returned: {left}"


USER_JOB = Path(__file__).resolve().parent / "helpers" / "user_job.py"
FAILURE_WORDS = ("terminate called", "Traceback", "core dumped", "SIGABRT", "SIGSEGV")


@pytest.mark.slow
@pytest.mark.parametrize("api, destroy", [("profile", True), ("handler", True), ("profile", False)])
def test_a_users_plain_ddp_script_ends_with_no_gloo_thread_left_for_finalization(tmp_path, api, destroy):
    """A user's script as written (torch first, init_process_group, then our profiler; nothing added
    for our sake) must leave no gloo thread for interpreter finalization to meet: there, a worker
    can abort the process (issue 11), and the profiler's first trace alone used to keep the group
    alive until then. Also without destroy_process_group, the job ends cleanly with exit 0."""
    threads_out = tmp_path / "threads"
    threads_out.mkdir()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", str(USER_JOB), str(tmp_path / "log")]
    cmd += ["--api", api, *([] if destroy else ["--no-destroy"])]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=REPO, env=clean_env(THREADS_OUT=str(threads_out)))
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-3000:]
    assert not [word for word in FAILURE_WORDS if word in output], output[-3000:]
    assert "report" in output  # the job's record and report were written: the profiler really ran
    for rank in (0, 1):
        record = json.loads((threads_out / f"rank{rank}.json").read_text())
        left = [name for name in record["at_exit"] if "gloo" in name]
        assert not left, f"rank {rank}: gloo threads still running when the interpreter finalizes: {left}"
