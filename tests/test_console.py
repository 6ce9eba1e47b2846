"""The console of a run holds our lines only (progress, the summary, where the outputs are, errors);
everything else every rank printed goes to <run>/logs/rank<r>.log; --verbose shows everything."""

from __future__ import annotations

import pytest

from conftest import SMALL, only_run_dir, torchrun

pytestmark = pytest.mark.slow  # torchrun jobs

PROFILER_LOGGING = ("USDT:", "SyncActivityProfilerHandler", "profiler_start", "profiler_stop")


def test_console_holds_our_lines_and_the_logs_hold_everything(compare_run_2):
    """A default run: no line of the profiler's C++ logging on the console, every rank's log has them."""
    console = (compare_run_2 / "_stdout.txt").read_text() + (compare_run_2 / "_stderr.txt").read_text()
    assert "run folder" in console and "profile_overlap: step time and overlap per mode" in console
    assert not [line for line in console.splitlines() if any(p in line for p in PROFILER_LOGGING)]
    for rank in (0, 1):
        log = (compare_run_2 / "logs" / f"rank{rank}.log").read_text()
        assert "profiler_start" in log and "profiler_stop" in log  # nothing is lost


def test_verbose_shows_everything_and_writes_no_logs(tmp_path):
    proc = torchrun(["--mode", "split", "--verbose", "--out", str(tmp_path), *SMALL], nproc=2)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "profiler_start" in proc.stdout + proc.stderr
    assert not (only_run_dir(tmp_path) / "logs").exists()
