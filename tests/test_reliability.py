"""Faults and bad input: a one-line answer, a bounded end, and a run folder that never lies.

Each test is one row of the reliability table in the README ("When things go wrong"); ranks are
real processes.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, SMALL, clean_env, only_run_dir, torchrun, torchrun_nodes, with_reader_gone


def _status(run_dir: Path) -> dict:
    return json.loads((run_dir / "status.json").read_text())


def _one_line_error(stderr: str, text: str) -> None:
    lines = [line for line in stderr.splitlines() if line.startswith("profile_overlap")]
    assert any(text in line for line in lines), stderr[-3000:]
    # Our ranks print no traceback (torchrun's own agent may print its failure summary).
    assert "[rank0]: Traceback" not in stderr and "[rank1]: Traceback" not in stderr


@pytest.mark.slow
@pytest.mark.parametrize("kind, timeout_s", [("kill", 60), ("hang", 8)])
def test_dead_or_hung_rank_ends_the_job_and_marks_the_run_failed(tmp_path, kind, timeout_s):
    env = clean_env(PROFILE_OVERLAP_FAULT=f"{kind}:rank=1:step=3")
    started = time.monotonic()
    proc = torchrun(["--mode", "split", "--out", str(tmp_path), "--timeout", str(timeout_s), *SMALL], nproc=2, env=env, timeout=120)
    elapsed = time.monotonic() - started
    assert proc.returncode != 0
    assert elapsed < timeout_s + 60  # start-up plus the process-group timeout, not forever
    run_dir = only_run_dir(tmp_path)
    status = _status(run_dir)
    assert status["state"] == "failed"
    # Whichever reaches rank 0 first: the failed collective, or the launcher's SIGTERM after rank 1 died.
    assert "another rank crashed, hung or timed out" in status["reason"] or "another rank failed" in status["reason"], status
    assert not (run_dir / "metrics.json").exists()  # nothing claims success
    _one_line_error(proc.stderr, "is marked failed")


@pytest.mark.slow
def test_configs_that_differ_across_nodes_are_named(tmp_path):
    nodes = [["--mode", "split", "--no-profile", "--out", str(tmp_path), *SMALL, "--dim", dim] for dim in ("64", "128")]
    procs = torchrun_nodes(nodes, nproc=1, timeout=120)
    assert all(p.returncode != 0 for p in procs)
    for p in procs:
        _one_line_error(p.stderr, "ranks were started with different configs (dim: 64/128)")
    assert not any(tmp_path.iterdir())  # detected before any run folder is made


@pytest.mark.slow
def test_dim_not_divisible_by_world_size(tmp_path):
    proc = torchrun(["--out", str(tmp_path), *SMALL, "--dim", "66"], nproc=4)
    assert proc.returncode != 0  # torchrun exits 1 when any rank fails, whatever the rank's code
    _one_line_error(proc.stderr, "--dim 66 is not divisible by the world size 4")
    ours = [line for line in proc.stderr.splitlines() if line.startswith("profile_overlap run: error")]
    assert len(ours) == 1  # printed once, not once per rank
    # ... and repeated by torchrun's agent as the root cause, at the bottom of its summary.
    assert "--dim 66 is not divisible" in proc.stderr[proc.stderr.rindex("Root Cause") :]


@pytest.mark.slow
@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="needs a machine without CUDA")
def test_nccl_without_cuda_suggests_gloo(tmp_path):
    proc = torchrun(["--backend", "nccl", "--out", str(tmp_path), *SMALL], nproc=2)
    assert proc.returncode != 0  # torchrun exits 1 when any rank fails, whatever the rank's code
    _one_line_error(proc.stderr, "--backend nccl needs CUDA")
    assert "use --backend gloo" in proc.stderr
    assert not any(tmp_path.iterdir())


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_low_precision_runs_on_gloo(tmp_path, dtype):
    """gloo reduces bf16/fp16 on this torch: documented as supported, and verified."""
    proc = torchrun(["--mode", "compare", "--no-profile", "--dtype", dtype, "--out", str(tmp_path), *SMALL], nproc=2)
    assert proc.returncode == 0, proc.stderr[-2000:]
    metrics = json.loads((only_run_dir(tmp_path) / "metrics.json").read_text())
    checks = [c for m in metrics["modes"].values() for c in m["checks"]] + metrics["checks"]
    assert checks and all(c["passed"] for c in checks)
    assert checks[0]["tolerance"] == {"bfloat16": 2e-2, "float16": 2e-3}[dtype]


@pytest.mark.slow
def test_out_that_cannot_be_created(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    proc = torchrun(["--out", str(blocker / "runs"), *SMALL], nproc=2)
    assert proc.returncode != 0  # torchrun exits 1 when any rank fails, whatever the rank's code
    _one_line_error(proc.stderr, f"cannot create --out {blocker / 'runs'}")
    assert blocker.read_text() == "not a folder"


@pytest.mark.slow
def test_full_disk_while_writing_a_trace(tmp_path):
    """RLIMIT_FSIZE makes every write past 100 kB fail, as a full disk would."""
    earlier = tmp_path / "earlier-run"
    earlier.mkdir()
    (earlier / "metrics.json").write_text("{}")

    def small_disk() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # get EFBIG errors instead of being killed
        resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))

    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        "-m",
        "profile_overlap",
        "--out",
        str(tmp_path),
        *SMALL,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=clean_env(), cwd=REPO, preexec_fn=small_disk)
    assert proc.returncode != 0
    _one_line_error(proc.stderr, "free disk space or pick another --out")
    run_dir = next(p for p in tmp_path.iterdir() if p != earlier)
    assert _status(run_dir)["state"] == "failed"
    leftovers = [p.name for p in (run_dir / "sequential").iterdir()]
    assert leftovers == []  # no partial trace left looking whole
    assert (earlier / "metrics.json").read_text() == "{}"


def test_runs_in_the_same_second_get_distinct_folders(tmp_path, monkeypatch):
    from profile_overlap.core.errors import UserError
    from profile_overlap.run import job
    from profile_overlap.run.config import Config

    monkeypatch.setattr(job.time, "strftime", lambda fmt: "20260101-000000")
    config = Config.of(out=str(tmp_path))
    first = job.create_fresh_dir(config, backend="gloo", world=2)
    second = job.create_fresh_dir(config, backend="gloo", world=2)
    assert first != second and first.is_dir() and second.is_dir()
    assert second.name == first.name + "-2"
    with pytest.raises(UserError, match="already exists and is never overwritten"):
        job.create_fresh_dir(Config.of(out=str(tmp_path), name=first.name), backend="gloo", world=2)


@pytest.mark.slow
def test_ctrl_c_stops_every_rank_and_marks_the_run_interrupted(tmp_path):
    """Self-launched (python -m profile_overlap): SIGINT to the whole process group, as a terminal sends."""
    cmd = [sys.executable, "-m", "profile_overlap", "--nproc-per-node", "2", "--out", str(tmp_path), *SMALL, "--steps", "100000"]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env(), cwd=REPO, start_new_session=True
    )
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not list(tmp_path.glob("*/status.json")):
        time.sleep(0.2)
    time.sleep(2)  # into the timed steps
    os.killpg(proc.pid, signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode != 0
    status = _status(only_run_dir(tmp_path))
    assert status["state"] == "interrupted" and "Ctrl-C" in status["reason"]
    assert "Traceback" not in stderr, stderr[-3000:]
    assert "profile_overlap run: interrupted" in stderr


def _sigint_inside_a_collective_that_then_fails() -> None:
    """What a rank sees when Ctrl-C lands while it waits in gloo: the other rank has already stopped,
    so the collective returns failed, and the KeyboardInterrupt it carries is lost on the way."""
    try:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)
    except KeyboardInterrupt:
        pass
    raise RuntimeError("[/gloo/transport/tcp/pair.cc:534] Connection closed by peer")


@pytest.mark.parametrize(
    "body, second_sigint",
    [(_sigint_inside_a_collective_that_then_fails, False), (lambda: os.kill(os.getpid(), signal.SIGINT) or time.sleep(5), True)],
    ids=["collective-fails-after-ctrl-c", "launcher-forwards-a-second-sigint"],
)
def test_ctrl_c_marks_the_run_interrupted_whatever_exception_it_becomes(tmp_path, body, second_sigint):
    """In process: the one rank's bookkeeping, whichever way the Ctrl-C reaches it (under load, the
    subprocess test above saw 'failed')."""
    from profile_overlap.core import status as run_status
    from profile_overlap.run.job import failure_recorded

    run_status.write(tmp_path, "running")
    before = signal.getsignal(signal.SIGINT)
    try:
        with pytest.raises(KeyboardInterrupt):
            with failure_recorded(tmp_path):
                body()
                if second_sigint:
                    raise AssertionError("the first SIGINT did not stop the body")
        if second_sigint:  # after the first: ignored, the status already says why
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
    finally:
        signal.signal(signal.SIGINT, before)
    status = _status(tmp_path)
    assert status["state"] == "interrupted" and "Ctrl-C" in status["reason"], status


def test_a_run_recorded_outside_the_main_thread_is_still_marked_failed(tmp_path):
    """Signal handlers can only be set from the main thread: a run driven from another thread (a
    notebook's worker, a job runner) gets its failure recorded, not a ValueError from signal.signal."""
    import threading

    from profile_overlap.core import status as run_status
    from profile_overlap.core.errors import UserError
    from profile_overlap.run.job import failure_recorded

    run_status.write(tmp_path, "running")
    raised: list[BaseException] = []

    def body() -> None:
        try:
            with failure_recorded(tmp_path):
                raise RuntimeError("out of memory")
        except BaseException as err:  # noqa: BLE001 - what reaches the caller is the test's subject
            raised.append(err)

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert len(raised) == 1 and isinstance(raised[0], UserError), raised
    status = _status(tmp_path)
    assert status["state"] == "failed" and "out of memory" in status["reason"], status


def test_the_launchers_sigterm_during_the_failure_write_still_marks_the_run_failed(tmp_path, monkeypatch):
    """In process: rank 1 dies, rank 0's collective fails, and while rank 0 records that, the launcher's
    SIGTERM (sent the moment rank 1 died) lands inside the status write (under load, the subprocess
    test above saw the run left 'running')."""
    from profile_overlap.core import status as run_status
    from profile_overlap.core.errors import UserError
    from profile_overlap.run.job import _raise_terminated, failure_recorded

    run_status.write(tmp_path, "running")
    real_read = run_status.read

    def read_as_sigterm_lands(run_dir):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)  # the handler runs at the next bytecode of the main thread: here
        return real_read(run_dir)

    monkeypatch.setattr(run_status, "read", read_as_sigterm_lands)
    before = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        with pytest.raises(UserError, match="is marked failed"):
            with failure_recorded(tmp_path):
                raise RuntimeError("[/gloo/transport/tcp/pair.cc:534] Connection closed by peer")
    finally:
        signal.signal(signal.SIGTERM, before)
    monkeypatch.undo()
    status = _status(tmp_path)
    assert status["state"] == "failed" and "another rank crashed, hung or timed out" in status["reason"], status


@pytest.mark.slow
def test_a_run_whose_output_reader_has_gone_still_succeeds(tmp_path):
    """`torchrun ... -m profile_overlap --mode split | head -1`: once head has its line the terminal
    has no reader, and the run goes on to the same end as without the pipe (it used to stop at the
    next line it printed, `[Errno 32] Broken pipe`, and mark the run failed)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "-m", "profile_overlap"]
    proc = with_reader_gone([*cmd, "--mode", "split", "--out", str(tmp_path), *SMALL], env=clean_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = only_run_dir(tmp_path)
    assert _status(run_dir)["state"] == "succeeded"
    assert (run_dir / "metrics.json").exists() and (run_dir / "report.html").exists()
    assert "Broken pipe" not in (run_dir / "logs" / "rank0.log").read_text()
