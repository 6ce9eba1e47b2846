"""Shared fixtures: real torchrun jobs on gloo, small enough for 2 CPU cores.

The session-scoped runs are made once and read by many tests (traces, analysis, reports,
TensorBoard); tests must not modify them.

The fast subset (`-m "not slow"`) starts no process: a test that does (torchrun, the package's
commands, tensorboard, chromium), or that uses a fixture that does, is `slow`. Users of the
fixtures in PROCESS_FIXTURES are marked here; a test outside the subset that starts a process
anyway fails with a line that says to mark it.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

PROCESS_FIXTURES = frozenset(
    {
        "compare_run_2", "compare_run_4", "engine_run_2", "split_run_2", "ddp_run_2", "no_profile_run_2",  # here
        "ddp_job", "bench_run", "engine_runs", "nan_run", "tb_logdir", "tensorboard", "server", "browser",  # in their test files
    }
)  # fmt: skip
"""Fixtures that start processes (directly or through another fixture): their users are slow."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if PROCESS_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    with _no_processes_unless_slow(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    with _no_processes_unless_slow(item):
        return (yield)


# platform.processor() runs `uname -p` once and caches it (run/environment.py asks for it): ask now,
# before the guard below is in place.
platform.processor()


@contextlib.contextmanager
def _no_processes_unless_slow(item: pytest.Item):
    if item.get_closest_marker("slow"):
        yield
        return

    def refuse(self, args, *rest, **kwargs):
        raise AssertionError(f"{item.nodeid} starts a process ({args!r:.120}) outside the fast subset: mark it @pytest.mark.slow")

    original = subprocess.Popen._execute_child
    subprocess.Popen._execute_child = refuse
    try:
        yield
    finally:
        subprocess.Popen._execute_child = original


REPO = Path(__file__).resolve().parent.parent
# pytest-xdist's workers (`-n 2`) start with COLUMNS=80 and LINES=24 in their environment, which a
# serial run does not have: every console a test starts would be 80 columns wide there only.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.pop("COLUMNS", None)
    os.environ.pop("LINES", None)
# The synthetic trace generator serves the tests and the benchmarks; it is not part of the package.
sys.path.insert(0, str(REPO / "benchmarks"))
DATA = Path(__file__).resolve().parent / "data"

# Small and quick: each run is dominated by process start-up and torch import.
SMALL = ["--layers", "4", "--dim", "64", "--batch", "16", "--steps", "3", "--warmup-steps", "1", "--profile-steps", "2"]
# The shared compare runs do enough forward work (B x d @ d x d, 4 layers) that the split mode's
# async all_gathers overlap it on every rank even on 2 oversubscribed cores; at SMALL sizes the
# gathers can finish before the forward pass starts.
COMPARE = ["--layers", "4", "--dim", "256", "--batch", "512", "--steps", "3", "--warmup-steps", "1", "--profile-steps", "2"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "PROFILE_OVERLAP_FAULT")
    }
    env.update(extra)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def torchrun(
    args: list[str], *, nproc: int, env: dict | None = None, timeout: float = 240, cwd: Path | None = None
) -> subprocess.CompletedProcess:
    """`torchrun --standalone --nproc-per-node N -m profile_overlap ARGS` in a real subprocess."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", "-m", "profile_overlap", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env or clean_env(), cwd=cwd or REPO)


def torchrun_nodes(args_per_node: list[list[str]], *, nproc: int, timeout: float = 240) -> list[subprocess.CompletedProcess]:
    """One torchrun agent per node on this machine, meeting through c10d rendezvous on a free
    loopback port, each running `-m profile_overlap` with its own ARGS; waits for all of them."""
    port = free_port()
    agents = []
    for args in args_per_node:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(len(args_per_node)), "--nproc-per-node", str(nproc),
               "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"job{port}",
               "-m", "profile_overlap", *args]  # fmt: skip
        agents.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env(), cwd=REPO))
    outputs = [a.communicate(timeout=timeout) for a in agents]  # first: returncode is set once an agent is waited for
    return [subprocess.CompletedProcess(a.args, a.returncode, out, err) for a, (out, err) in zip(agents, outputs)]


def cli(args: list[str], *, env: dict | None = None, timeout: float = 240, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """`python -m profile_overlap ARGS` in a real subprocess."""
    return subprocess.run(
        [sys.executable, "-m", "profile_overlap", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env or clean_env(),
        cwd=cwd or REPO,
    )


def only_run_dir(out: Path) -> Path:
    dirs = [p for p in out.iterdir() if p.is_dir()]
    assert len(dirs) == 1, dirs
    return dirs[0]


def load_trace(path: Path) -> dict:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return json.load(f)


def shared_process(
    tmp_path_factory, name: str, make: Callable[[Path], subprocess.CompletedProcess]
) -> tuple[Path, subprocess.CompletedProcess]:
    """A folder OUT and the process `make(OUT)` that wrote into it, made once per test run (read-only
    for tests). Under pytest-xdist (`-n 2`) each worker is its own session, so the first worker to ask
    makes it in the workers' common base folder while holding a file lock; the others wait on the lock
    and read the same folder and the saved output."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None:
        out = tmp_path_factory.mktemp(name)
        return out, make(out)
    from filelock import FileLock  # torch's own dependency

    root = tmp_path_factory.getbasetemp().parent
    out, done = root / f"shared-{name}", root / f"shared-{name}.json"
    with FileLock(str(root / f"shared-{name}.lock")):
        if not done.is_file():
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir()
            proc = make(out)
            done.write_text(json.dumps({"args": proc.args, "returncode": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}))
        saved = json.loads(done.read_text())
    return out, subprocess.CompletedProcess(saved["args"], saved["returncode"], saved["stdout"], saved["stderr"])


def shared_run(
    tmp_path_factory, name: str, args: list[str], *, nproc: int, keep_output: bool = False
) -> tuple[Path, subprocess.CompletedProcess]:
    """The run folder of `torchrun ... -m profile_overlap ARGS --out OUT` made once per test run
    (`shared_process`), and its process. `keep_output`: the output also lands in the run folder, as
    _stdout.txt and _stderr.txt."""
    out, proc = shared_process(tmp_path_factory, name, lambda out: _made(out, args, nproc=nproc, keep_output=keep_output))
    return only_run_dir(out), proc


def shared_example(tmp_path_factory, script: str, nproc: int, *args: str) -> tuple[Path, subprocess.CompletedProcess]:
    """The job folder of `torchrun --standalone --nproc-per-node NPROC examples/SCRIPT --out OUT ARGS`
    (the example profiles itself into one folder under OUT), made once per test run (`shared_process`),
    and its process: tests of what an example writes and of how it reads share one job."""

    def make(out: Path) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
               str(REPO / "examples" / script), "--out", str(out), *args]  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=clean_env(PYTHONPATH=str(REPO)), cwd=REPO)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        return proc

    out, proc = shared_process(tmp_path_factory, "-".join([Path(script).stem, str(nproc), *(a.strip("-") for a in args)]), make)
    (job,) = [p for p in out.iterdir() if p.is_dir()]
    return job, proc


def _made(out: Path, args: list[str], *, nproc: int, keep_output: bool) -> subprocess.CompletedProcess:
    proc = torchrun([*args, "--out", str(out)], nproc=nproc)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    if keep_output:
        (only_run_dir(out) / "_stdout.txt").write_text(proc.stdout)
        (only_run_dir(out) / "_stderr.txt").write_text(proc.stderr)
    return proc


def _compare_run(tmp_path_factory, nproc: int) -> Path:
    return shared_run(tmp_path_factory, f"compare{nproc}", ["--mode", "compare", *COMPARE], nproc=nproc, keep_output=True)[0]


TINY_TRANSFORMER = ["--model", "transformer", "--dim", "64", "--layers", "2", "--heads", "4", "--seq-len", "16", "--batch", "4"]
FEW_STEPS = ["--steps", "2", "--warmup-steps", "1", "--profile-steps", "2"]
ENGINE_MODES = ("sequential", "split", "ddp", "fsdp2")


@pytest.fixture(scope="session")
def engine_run_2(tmp_path_factory) -> tuple[Path, str]:
    """A finished 2-rank run of sequential, split, ddp and fsdp2 on the tiny transformer, and its
    stdout (read-only for tests): the engines issue's command at test sizes."""
    run_dir, proc = shared_run(
        tmp_path_factory, "engines2", ["--mode", "compare", "--modes", ",".join(ENGINE_MODES), *TINY_TRANSFORMER, *FEW_STEPS], nproc=2
    )
    return run_dir, proc.stdout


@pytest.fixture(scope="session")
def compare_run_2(tmp_path_factory) -> Path:
    """A finished 2-rank compare run folder (read-only for tests)."""
    return _compare_run(tmp_path_factory, 2)


@pytest.fixture(scope="session")
def compare_run_4(tmp_path_factory) -> Path:
    """A finished 4-rank compare run folder (read-only for tests)."""
    return _compare_run(tmp_path_factory, 4)


@pytest.fixture(scope="session")
def split_run_2(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """A finished 2-rank split-only run at SMALL sizes, and its torchrun process (read-only for tests)."""
    return shared_run(tmp_path_factory, "split2", ["--mode", "split", *SMALL], nproc=2)


@pytest.fixture(scope="session")
def no_profile_run_2(tmp_path_factory) -> Path:
    """A finished 2-rank split run at SMALL sizes with --no-profile: step times, no traces (read-only for tests)."""
    return shared_run(tmp_path_factory, "noprofile2", ["--mode", "split", "--no-profile", *SMALL], nproc=2)[0]


@pytest.fixture(scope="session")
def ddp_run_2(tmp_path_factory) -> tuple[Path, str]:
    """A finished 2-rank ddp-only run of the tiny transformer, and its stdout (read-only for tests:
    copy it to write into it)."""
    run_dir, proc = shared_run(tmp_path_factory, "ddp2", ["--mode", "ddp", *TINY_TRANSFORMER, *FEW_STEPS], nproc=2)
    return run_dir, proc.stdout


def with_reader_gone(cmd: list[str], *, env: dict, timeout: float = 240, stderr_too: bool = False) -> subprocess.CompletedProcess:
    """`cmd` with its standard output a pipe whose reader has already gone, as under `... | head`
    once head has its lines (or `less` quit early); stderr captured, or (stderr_too) into the same
    pipe, as under `... 2>&1 | head`."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    stderr = write_end if stderr_too else subprocess.PIPE
    try:
        return subprocess.run(cmd, stdout=write_end, stderr=stderr, text=True, timeout=timeout, env=env, cwd=REPO)
    finally:
        os.close(write_end)
