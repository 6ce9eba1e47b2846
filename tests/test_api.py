"""The public API for users' own jobs, in one process: imports that start nothing, a log_dir that
cannot be written, job folders and their names, the record, report and scalars of a folder of
real gloo traces. The jobs themselves (torchrun, 2 ranks) are in test_api_jobs.py."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys

import pytest

from profile_overlap.api import events, job, layout
from profile_overlap.api.messages import DoneTask, TraceTask, WorkerConfig

from conftest import DATA, REPO, clean_env

GLOO = DATA / "gloo_2rank"


@pytest.mark.slow
def test_import_starts_nothing_and_imports_no_torch():
    code = (
        "import sys, threading, profile_overlap as po\n"
        "assert 'torch' not in sys.modules and 'profile_overlap.api' not in sys.modules\n"
        "assert threading.active_count() == 1\n"
        "assert {'trace_handler', 'profile', 'build_job_record'} <= set(dir(po))\n"
        "po.build_job_record\n"
        "assert 'torch' not in sys.modules  # the record needs no torch\n"
        "try:\n    po.nope\nexcept AttributeError as err:\n    print(err)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=clean_env(), cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert "has no attribute 'nope'" in proc.stdout


def test_a_log_dir_that_cannot_be_written_fails_before_training(tmp_path):
    from profile_overlap.api.handler import LogDirError, trace_handler

    (tmp_path / "file").write_text("in the way")
    with pytest.raises(ValueError, match=r"cannot write to log_dir .*file/runs .*pick a folder this job can create and write to") as err:
        trace_handler(tmp_path / "file" / "runs")
    assert isinstance(err.value, LogDirError)
    assert not (tmp_path / "file" / "runs").exists()


def test_profile_keeps_its_schedule_and_handler(tmp_path):
    import profile_overlap

    for key in ("schedule", "on_trace_ready"):
        with pytest.raises(ValueError, match=f"profile_overlap.profile sets {key} itself"):
            profile_overlap.profile(tmp_path, **{key: None})


class _Store:
    """A c10d store's compare_set: the first value set for a key wins."""

    def __init__(self) -> None:
        self.values: dict[str, bytes] = {}

    def compare_set(self, key: str, expected: str, desired: str) -> bytes:
        if key not in self.values and expected == "":
            self.values[key] = desired.encode()
        return self.values[key]


def test_ranks_agree_on_the_job_folder_and_two_jobs_get_two(tmp_path, monkeypatch):
    for name in ("PROFILE_OVERLAP_JOB", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT"):
        monkeypatch.delenv(name, raising=False)
    store = _Store()
    first = layout.job_name(tmp_path, store=store, world_size=2)
    monkeypatch.setattr(layout.os, "getpid", lambda: 12345)  # another rank, later
    monkeypatch.setattr(layout.time, "strftime", lambda fmt: "20990101-000000")
    assert layout.job_name(tmp_path, store=store, world_size=2) == first
    assert layout.job_name(tmp_path, store=_Store(), world_size=2) == "20990101-000000-p12345"  # the next job
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "3f2a9c1d-aaaa")  # no process group yet: the launcher's id
    assert layout.job_name(tmp_path, world_size=2) == "job-3f2a9c1d-aaaa"
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    assert layout.job_name(tmp_path, world_size=2) == "job-3f2a9c1d-aaaa-r1"
    monkeypatch.setenv("PROFILE_OVERLAP_JOB", "nightly/run 7")
    assert layout.job_name(tmp_path, store=store, world_size=2) == "nightly_run_7"


def test_find_job_dir_takes_the_latest_job_of_a_log_dir(tmp_path):
    for name, started in (("b-job", "2026-01-02T00:00:00"), ("a-job", "2026-01-03T00:00:00")):
        layout.write_state(tmp_path / name, 0, {"rank": 0, "started": started})
    assert layout.find_job_dir(tmp_path) == tmp_path / "a-job"
    assert layout.find_job_dir(tmp_path / "b-job") == tmp_path / "b-job"
    (tmp_path / "empty").mkdir()
    with pytest.raises(Exception, match="holds no job"):
        layout.find_job_dir(tmp_path / "empty")


@pytest.fixture(scope="module")
def foreign_job(tmp_path_factory):
    """Torch's own tensorboard_trace_handler output (2 gloo ranks): a job folder without our state files."""
    folder = tmp_path_factory.mktemp("foreign") / "traces"
    shutil.copytree(GLOO, folder, ignore=shutil.ignore_patterns("*.py", "NOTICE"))
    return folder


def test_job_record_of_a_trace_folder(foreign_job):
    metrics = job.build_job_record(foreign_job)
    (mode,) = metrics.modes.values()
    assert mode.mode == "job" and mode.memory == () and mode.checks == ()
    ranks = mode.analysis.ranks
    assert [r.rank for r in ranks] == [0, 1]
    # Step times: each profiled step's ProfilerStep window, the slowest rank's.
    by_step: dict[int, float] = {}
    for r in ranks:
        for s in r.steps:
            by_step[s.step] = max(by_step.get(s.step, 0), s.step_us / 1e3)
    assert list(mode.step_time.times_ms) == pytest.approx([by_step[k] for k in sorted(by_step)])
    assert metrics.job.missing_ranks == () and metrics.job.profiled_ranks == (0, 1)
    assert metrics.config.missing_ranks == () and metrics.config.profiled_ranks == (0, 1)  # also there, as before
    summary = metrics.summary.modes["job"]
    assert summary.comm_ms > 0 and summary.overlap_pct == pytest.approx(100 * summary.overlap_ms / summary.comm_ms)
    assert metrics.summary.headline["overlap_pct"] == summary.overlap_pct


def test_report_of_a_trace_folder_builds_the_record_first(foreign_job, tmp_path):
    folder = tmp_path / "traces"
    shutil.copytree(foreign_job, folder)
    run_dir, written = job.write_report(folder)
    assert run_dir == folder
    assert {p.name for p in written} == {"report.html", "timeline.png", "heatmap.png", "report.md", "report.json"}
    for name in ("metrics.json", "timeline.json", "status.json"):
        assert (folder / name).is_file(), name
    assert json.loads((folder / "status.json").read_text())["state"] == "succeeded"
    md = (folder / "report.md").read_text()
    assert "communication took" in md and "Stragglers" in md and "all_gather" in md
    built = (folder / "metrics.json").stat().st_mtime_ns
    assert job.ensure_record(folder) == folder and (folder / "metrics.json").stat().st_mtime_ns == built  # read back, not rebuilt
    # A run folder of ours is left to the run report.
    (tmp_path / "ours").mkdir()
    (tmp_path / "ours" / "status.json").write_text('{"state": "running"}')
    assert job.ensure_record(tmp_path / "ours") == tmp_path / "ours"
    assert job.write_report(tmp_path / "ours") is None


def test_scalars_of_a_cycle_are_per_global_step():
    from profile_overlap.analysis.options import IN_STEPS
    from profile_overlap.analysis.rank.per_rank import analyze_rank

    (path,) = sorted(GLOO.glob("host_0*"))
    result = analyze_rank([path], IN_STEPS)
    points = events.scalars(result)
    steps = sorted({s.step for s in result.steps})
    for tag in ("overlap/exposed_comm_ms", "overlap/comm_ms", "overlap/compute_ms", "overlap/step_ms"):
        assert sorted(step for t, _, step in points if t == tag) == steps
    first = result.steps[0]
    assert (("overlap/comm_ms", first.comm_us / 1e3, first.step)) in points
    assert [step for t, _, step in points if t.startswith("busbw_gbps/")] == [steps[-1]] * len(result.collectives)


class _Profiler:
    """What the handler uses of torch.profiler.profile: step_num, export_chrome_trace (and stop)."""

    def __init__(self, text: str, step: int) -> None:
        self.text, self.step_num = text, step

    def export_chrome_trace(self, path: str) -> None:
        with open(path, "w") as f:
            f.write(self.text)

    def stop(self) -> None:
        pass


@pytest.mark.slow
def test_the_handler_checks_each_trace_and_drops_an_incomplete_one(tmp_path, monkeypatch):
    from profile_overlap.api.handler import trace_handler

    monkeypatch.setenv("PROFILE_OVERLAP_JOB", "job1")
    handler = trace_handler(tmp_path, worker_name="host_0", analyze=False)
    try:
        handler(_Profiler('{"traceEvents": []}', step=3))
        with pytest.warns(RuntimeWarning, match=r"dropped the trace of rank 0 at step 7: .*most likely the disk is full.*Training goes on"):
            handler(_Profiler('{"traceEvents": [{"name": "cut short', step=7))  # as Kineto leaves it on a full disk
    finally:
        handler.close()
    job_dir = tmp_path / "job1"
    (final,) = job_dir.glob("host_0.*.pt.trace.json.gz")
    assert json.loads(gzip.decompress(final.read_bytes())) == {"traceEvents": []}
    assert not list(job_dir.glob(".partial-*")) and layout.num_dropped(job_dir) == 1
    assert layout.done_ranks(job_dir) == {0}
    assert trace_handler(tmp_path, worker_name="host_0", analyze=False) is not handler  # a closed handler is not reused


def test_the_worker_drops_a_trace_it_cannot_write(tmp_path, capsys):
    from profile_overlap.api.worker import RankWorker

    partial = tmp_path / ".partial-host_0.1.pt.trace.json.part"
    partial.write_text('{"traceEvents": []}')
    worker = RankWorker(WorkerConfig(job_dir=str(tmp_path), rank=0, world_size=1, worker="host_0"))
    worker.trace(TraceTask(partial=str(partial), final=str(tmp_path / "gone" / "host_0.1.pt.trace.json.gz"), step=9))
    assert "dropped the trace of rank 0 at step 9" in capsys.readouterr().err
    assert not partial.exists() and layout.num_dropped(tmp_path) == 1


@pytest.mark.slow
def test_the_worker_writes_a_record_whose_analysis_forks(tmp_path, monkeypatch):
    """Over 2 MB of traces, the record's analysis reads them in forked processes
    (analysis.folder.PARALLEL_MIN_BYTES): the worker process must not deadlock them."""
    from synthetic import write_large_trace

    from profile_overlap.analysis.folder import PARALLEL_MIN_BYTES
    from profile_overlap.api.background import Worker

    for rank in (0, 1):
        write_large_trace(
            tmp_path / f"host_{rank}.{rank + 1}.pt.trace.json",
            target_bytes=PARALLEL_MIN_BYTES // 2 + 100_000,
            rank=rank,
            layers_per_step=20,
        )
    monkeypatch.setenv("PROFILE_OVERLAP_JOB_WAIT_S", "0")  # rank 1 has no done marker: do not wait for it
    worker = Worker(WorkerConfig(job_dir=str(tmp_path), rank=0, world_size=2, worker="host_0"))
    try:
        assert worker.send(DoneTask(traces=1, session=1, finalize=True))
        assert worker.flush(timeout_s=90), "the worker did not finish the record"
    finally:
        assert worker.close(timeout_s=30)
    record = json.loads((tmp_path / "metrics.json").read_text())
    assert [r["rank"] for r in record["modes"]["job"]["analysis"]["ranks"]] == [0, 1]
    assert (tmp_path / "report.html").is_file()


def test_rank_0_keeps_a_live_record_of_the_latest_cycle(foreign_job, tmp_path):
    """While the job runs: metrics.json and timeline.json of each rank's trace of rank 0's latest cycle."""
    from profile_overlap.analysis.options import IN_STEPS
    from profile_overlap.analysis.rank.per_rank import analyze_rank
    from profile_overlap.api.worker import RankWorker

    job_dir = tmp_path / "job"
    shutil.copytree(foreign_job, job_dir)
    for rank in (0, 1):
        layout.write_state(job_dir, rank, {"rank": rank, "world_size": 2, "worker": f"host_{rank}"})
    (mine,) = layout.traces_of(job_dir, "host_0")
    worker = RankWorker(WorkerConfig(job_dir=str(job_dir), rank=0, world_size=2, worker="host_0"))
    worker._live_record(analyze_rank([mine], IN_STEPS))
    record = json.loads((job_dir / "metrics.json").read_text())
    assert record["config"]["cycles"] == "cycle 1 only (the job is running)"
    assert [r["rank"] for r in record["modes"]["job"]["analysis"]["ranks"]] == [0, 1]
    assert record["modes"]["job"]["analysis"]["slowest_rank"] is not None  # calls matched across the ranks
    assert json.loads((job_dir / "status.json").read_text())["state"] == "running"
    assert (job_dir / "timeline.json").is_file() and not (job_dir / "report.html").exists()


def test_a_rank_that_has_not_called_set_device_is_recorded_on_its_local_ranks_gpu(monkeypatch):
    """torchrun's rank 1 runs on GPU 1 (LOCAL_RANK), but torch's current device is GPU 0 until the
    job calls set_device: the record must name the GPU the rank uses. This machine has no GPU, so
    torch.cuda's answers are stood in for: two GPUs of different names, current device 0."""
    import types

    import torch

    from profile_overlap.api import handler

    names = ["H200 at index 0", "H100 at index 1"]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: names[torch.cuda.current_device() if device is None else device])
    monkeypatch.setenv("LOCAL_RANK", "1")
    state = handler._state(types.SimpleNamespace(rank=1, world_size=2, worker_name="host_1"))
    assert (state["device"], state["device_type"]) == ("H100 at index 1", "cuda")
    monkeypatch.delenv("LOCAL_RANK")  # a job not started by torchrun: its current device
    assert handler._state(types.SimpleNamespace(rank=0, world_size=1, worker_name="host_0"))["device"] == "H200 at index 0"
