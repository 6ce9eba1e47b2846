"""Rank 0's worker at the end of a job shares a node that may still be training: its analysis uses
at most two parser processes, at the worker's low priority, whatever the CPU count."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from profile_overlap.analysis import folder
from profile_overlap.api import layout, worker
from profile_overlap.api.messages import DoneTask, WorkerConfig

GLOO = Path(__file__).parent / "data" / "gloo_2rank"


def test_the_end_of_job_analysis_forks_at_most_two_parsers_on_a_big_node(tmp_path, monkeypatch):
    job = tmp_path / "job"
    job.mkdir()
    for cycle in range(3):  # three profiler cycles per rank: six trace files
        for trace in GLOO.glob("host_*.pt.trace.json.gz"):
            worker_name, time_ns = trace.name.split(".")[:2]
            shutil.copy(trace, job / f"{worker_name}.{int(time_ns) + cycle}.pt.trace.json.gz")
    for rank in (0, 1):
        layout.write_state(job, rank, {"rank": rank, "world_size": 2, "worker": f"host_{rank}"})
        layout.mark_done(job, rank, traces=3, session=1)
    pools: list[int] = []
    real_pool = folder.ProcessPoolExecutor

    def pool(*, max_workers: int, **kwargs):
        pools.append(max_workers)
        return real_pool(max_workers=max_workers, **kwargs)

    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    monkeypatch.setattr(folder, "PARALLEL_MIN_BYTES", 0)  # these traces are small: parse them in processes anyway
    monkeypatch.setattr(folder, "ProcessPoolExecutor", pool)
    w = worker.RankWorker(WorkerConfig(job_dir=str(job), rank=0, world_size=2, worker="host_0"))
    w.done(DoneTask(traces=3, session=1, finalize=True))
    assert pools == [2]
    assert (job / "metrics.json").is_file() and (job / "report.html").is_file()  # the record, made by those two


@pytest.mark.slow  # the handler's real worker process
def test_a_hung_worker_holds_the_exit_only_for_the_stated_limit_and_the_traces_stay(tmp_path, monkeypatch):
    import signal
    import time
    import warnings

    import torch

    import profile_overlap
    from profile_overlap.api import handler as handler_module

    # The stated bound at exit (README): PROFILE_OVERLAP_JOB_WAIT_S (60 s by default) + 30 s.
    monkeypatch.delenv(layout.WAIT_ENV, raising=False)
    assert layout.wait_s() + handler_module.CLOSE_GRACE_S <= 90
    monkeypatch.setenv(layout.WAIT_ENV, "0")
    monkeypatch.setattr(handler_module, "CLOSE_GRACE_S", 2.0)
    handler = profile_overlap.trace_handler(tmp_path / "logs")
    os.kill(handler._worker._proc.pid, signal.SIGSTOP)  # a worker that never answers (a huge analysis, a stuck file system)
    x = torch.randn(32, 32)
    prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], on_trace_ready=handler,
                                  schedule=torch.profiler.schedule(wait=0, warmup=1, active=1, repeat=1))  # fmt: skip
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        prof.start()
        for _ in range(3):
            x = x @ x / 32
            prof.step()
        prof.stop()
        start = time.monotonic()
        handler.close()
        waited_s = time.monotonic() - start
    assert waited_s < 10, waited_s  # 2 s of grace, then the worker is killed (it had been stopped for good)
    ours = [str(w.message) for w in caught if "background worker" in str(w.message)]
    assert len(ours) == 1 and f"python -m profile_overlap report {handler.job_dir}" in ours[0], ours
    assert list(handler.job_dir.glob("*.pt.trace.json.gz")) and not list(handler.job_dir.glob(layout.PARTIAL_PREFIX + "*"))
