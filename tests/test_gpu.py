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
            "1024",
            "--batch",
            "1024",
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
    assert proc.stdout.rstrip().endswith("GPU check: FAILED")
