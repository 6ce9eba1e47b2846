"""Rank 0's worker at the end of a job shares a node that may still be training: its analysis uses
at most two parser processes, at the worker's low priority, whatever the CPU count."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from profile_overlap.analysis import folder
from profile_overlap.api import layout, worker

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
    w = worker.RankWorker({"job_dir": str(job), "rank": 0, "world_size": 2, "worker": "host_0", "analyze": True})
    w.done({"traces": 3, "session": 1, "finalize": True})
    assert pools == [2]
    assert (job / "metrics.json").is_file() and (job / "report.html").is_file()  # the record, made by those two
