"""The CLI without a process group: help, explain, and flag errors as one line."""

from __future__ import annotations

import pytest

from conftest import cli

pytestmark = pytest.mark.slow  # every test runs `python -m profile_overlap` in a subprocess


def test_explain_prints_the_worked_example():
    proc = cli(["explain"])
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for row in ("[1, 2, 3, 4]", "[5, 6, 7, 8]", "[9, 10, 11, 12]", "[13, 14, 15, 16]"):
        assert row in out
    assert out.count("[28, 32, 36, 40]") >= 8  # all_reduce and all_gather columns, 4 ranks
    for shard in ("[28]", "[32]", "[36]", "[40]"):
        assert shard in out
    assert ": equal" in out
    assert "2(4-1)/4 = 1.5" in out


def test_explain_other_world_size():
    proc = cli(["explain", "--world-size", "2"])
    assert proc.returncode == 0
    assert "[4, 6]" in proc.stdout and "[1, 2]" in proc.stdout and "[3, 4]" in proc.stdout


def test_help_groups_every_flag():
    proc = cli(["run", "--help"])
    assert proc.returncode == 0
    for flag in (
        "--mode",
        "--layers",
        "--dim",
        "--batch",
        "--dtype",
        "--steps",
        "--warmup-steps",
        "--backend",
        "--out",
        "--name",
        "--seed",
        "--no-profile",
        "--gzip",
        "--nproc-per-node",
        "--timeout",
    ):
        assert flag in proc.stdout
    for group in ("pipeline and workload", "steps and profiling", "distributed", "output"):
        assert group in proc.stdout
    top = cli(["--help"])
    assert "analyze" in top.stdout and "explain" in top.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["--mode", "allreduce"], "invalid choice: 'allreduce'"),
        (["--dtype", "int8"], "invalid choice: 'int8'"),
        (["--layers", "0"], "--layers must be a positive integer, got 0"),
        (["--dim", "-4"], "--dim must be a positive integer, got -4"),
        (["--batch", "0"], "--batch must be a positive integer"),
        (["--steps", "0"], "--steps must be a positive integer"),
        (["--name", "a/b"], "--name 'a/b' must be a plain folder name"),
    ],
)
def test_bad_flags_get_one_line(args, message):
    proc = cli(args)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
