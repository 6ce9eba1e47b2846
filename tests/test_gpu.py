"""GPU tests (marked gpu): skipped without CUDA. On a CUDA machine: both modes on NCCL with one
rank per GPU, then the same expectations as tests/gpu/check.sh."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from conftest import REPO, clean_env, only_run_dir, torchrun

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.mark.slow
@pytest.mark.gpu
@needs_cuda
def test_compare_on_nccl(tmp_path):
    n = torch.cuda.device_count()
    proc = torchrun(
        [
            "--mode",
            "compare",
            "--backend",
            "nccl",
            "--layers",
            "4",
            "--dim",
            "8192",  # big enough that a step is the GPU's work (the checker requires it), not the host's
            "--batch",
            "8192",
            "--dtype",
            "bfloat16",
            "--steps",
            "5",
            "--out",
            str(tmp_path),
        ],
        nproc=n,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    check = subprocess.run(
        [sys.executable, str(REPO / "tests" / "gpu" / "check_traces.py"), str(only_run_dir(tmp_path)), str(n)],
        capture_output=True,
        text=True,
        env=clean_env(PYTHONPATH=str(REPO)),
    )
    assert check.returncode == 0, check.stdout


def test_gpu_checker_rejects_a_cpu_run(compare_run_2):
    """Runs everywhere: the checker used on GPU machines names what a CPU run lacks."""
    proc = subprocess.run(
        [sys.executable, str(REPO / "tests" / "gpu" / "check_traces.py"), str(compare_run_2), "2"],
        capture_output=True,
        text=True,
        env=clean_env(PYTHONPATH=str(REPO)),
    )
    assert proc.returncode == 1
    assert "steps not timed with CUDA events" in proc.stdout and "no NCCL kernels with 2 ranks" in proc.stdout
    assert "no peak memory recorded" in proc.stdout and "backend gloo, not nccl" in proc.stdout
    assert proc.stdout.rstrip().endswith(f"GPU check of {compare_run_2.name}: FAILED")


class _Parsed(Exception):
    """Raised by the stand-in parse_args once the real one has parsed: the command stops there."""

    def __init__(self, args) -> None:
        super().__init__("parsed")
        self.parsed = args


def _parse_with_its_own_parser(monkeypatch, run, argv: list[str]):
    """Run `run()` (a script's or our CLI's entry point) until its real argparse parser has parsed argv."""
    import argparse

    real = argparse.ArgumentParser.parse_args

    def parse_args(self, args=None, namespace=None):
        raise _Parsed(real(self, args, namespace))

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_args)
    monkeypatch.setattr(sys, "argv", ["prog", *argv])
    try:
        run(argv)
    except _Parsed as parsed:
        return parsed.parsed
    finally:
        monkeypatch.setattr(argparse.ArgumentParser, "parse_args", real)
    raise AssertionError(f"{argv} was never parsed")


@pytest.mark.slow  # runs bash
def test_the_gpu_check_fits_one_device_call_and_every_command_and_flag_it_runs_exists(monkeypatch, tmp_path):
    """One device call runs at most 10 minutes, the check must take under 8: its timeout budgets add
    up to less, and each command it runs parses with the real parser of the program it runs (ours,
    the examples', the checker's), so no flag is missing on the one GPU run there is."""
    import runpy
    import shlex

    from profile_overlap.cli.main import main
    from profile_overlap.run.config import from_args

    check = REPO / "tests" / "gpu" / "check.sh"
    assert subprocess.run(["bash", "-n", str(check)], capture_output=True).returncode == 0
    proc = subprocess.run(["bash", str(check), "--print-commands"], capture_output=True, text=True, env=clean_env(OUT=str(tmp_path)))
    assert proc.returncode == 0, proc.stderr
    commands = [shlex.split(line) for line in proc.stdout.splitlines()]
    assert [c[1] for c in commands] == [
        "mlp", "check-mlp", "transformer", "check-transformer", "job-ddp", "check-job-ddp", "job-fsdp2", "check-job-fsdp2",
        "analyze", "report", "perfetto", "advise",
    ]  # fmt: skip
    assert sum(int(c[2]) for c in commands) + 3 * len(commands) < 480  # each budget plus timeout's 3 s of grace
    for _, name, _, *cmd in commands:
        if cmd[:3] == ["python3", "-m", "torch.distributed.run"]:
            cmd = cmd[cmd.index("--nproc-per-node") + 2 :]
            program, argv = (cmd[1], cmd[2:]) if cmd[0] == "-m" else (cmd[0], cmd[1:])
        else:
            program, argv = (cmd[2], cmd[3:]) if cmd[1] == "-m" else (cmd[1], cmd[2:])
        if program == "profile_overlap":
            args = _parse_with_its_own_parser(monkeypatch, main, argv)
            if "--mode" in argv:
                config = from_args(args)  # the run's own checks of the values, as on the device
                assert config.job.backend == "nccl" and config.workload.dtype == "bfloat16", name
        else:
            script = runpy.run_path(str(REPO / program), run_name="checked")
            entry = script["main"]
            _parse_with_its_own_parser(
                monkeypatch, lambda argv, entry=entry: entry() if entry.__code__.co_argcount == 0 else entry(argv), argv
            )
