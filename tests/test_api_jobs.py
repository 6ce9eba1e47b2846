"""A user's own job, changed only by swapping torch's tensorboard_trace_handler for
profile_overlap.trace_handler (tests/helpers/own_ddp_job.py): real torchrun jobs on gloo, 2 ranks.

It must draw overlap scalars over training in TensorBoard, get a record, a report and the Overlap
tab's files, and survive the bad cases: a rank that never profiles, a full disk, no
torch.distributed, and two jobs writing into one log_dir.
"""

from __future__ import annotations

import gzip
import json
import resource
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from profile_overlap.api import layout

from conftest import REPO, clean_env, cli

pytestmark = pytest.mark.slow  # every test runs a user's job under torchrun (or uses one that did)

OWN_JOB = REPO / "tests" / "helpers" / "own_ddp_job.py"


def own_job(out: Path, *extra: str, nproc: int = 2, env: dict | None = None, preexec_fn=None) -> subprocess.CompletedProcess:
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"] if nproc else [sys.executable]
    proc = subprocess.run(
        [*launch, str(OWN_JOB), str(out), *extra],
        capture_output=True,
        text=True,
        timeout=180,
        env=env or clean_env(),
        cwd=REPO,
        preexec_fn=preexec_fn,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def only_job(log_dir: Path) -> Path:
    (job_dir,) = [p for p in log_dir.iterdir() if p.is_dir()]
    return job_dir


def scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


@pytest.fixture(scope="module")
def ddp_job(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """12 steps, cycles of wait 1, warmup 1, active 2: three traces per rank, profiled steps 2, 3, 6, 7, 10, 11."""
    log_dir = tmp_path_factory.mktemp("own") / "runs"
    proc = own_job(log_dir)
    return only_job(log_dir), proc


def test_drop_in_handler_writes_checked_gzipped_traces_named_as_our_runs(ddp_job):
    job_dir, _ = ddp_job
    traces = sorted(p.name for p in job_dir.glob("*.pt.trace.json.gz"))
    for rank in (0, 1):
        mine = [n for n in traces if n.split(".")[0].endswith(f"_{rank}")]
        assert len(mine) == 3, traces
    for path in job_dir.glob("*.pt.trace.json.gz"):
        assert json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    assert not list(job_dir.glob(".partial-*")), "no partial trace is left"


def test_tensorboard_draws_overlap_over_training_steps(ddp_job):
    job_dir, _ = ddp_job
    for rank in (0, 1):
        points = scalars(job_dir / f"rank{rank}")
        assert [step for step, _ in points["overlap/overlap_pct"]] == [2, 3, 6, 7, 10, 11]  # the global step on x
        for tag in ("overlap/exposed_comm_ms", "overlap/comm_ms", "overlap/compute_ms", "phase/backward/hidden_ms"):
            assert len(points[tag]) == 6, tag
        assert [step for step, _ in points["phase/backward/exposed_comm_ms"]] == [2, 3, 6, 7, 10, 11]
        assert [step for step, _ in points["busbw_gbps/all_reduce"]] == [3, 7, 11]  # one per cycle
        assert all(0 <= v <= 100 for _, v in points["overlap/overlap_pct"])


def test_the_job_gets_its_record_report_and_overlap_tab(ddp_job):
    from profile_overlap.api.job import build_job_record
    from profile_overlap.record.load import load_metrics
    from profile_overlap.tb_plugin.plugin import find_runs

    job_dir, proc = ddp_job
    for name in ("metrics.json", "timeline.json", "report.html", "report.md", "report.json", "timeline.png"):
        assert (job_dir / name).is_file(), name
    assert json.loads((job_dir / "status.json").read_text())["state"] == "succeeded"
    assert find_runs(job_dir.parent) == [job_dir]  # the Overlap tab lists the job
    metrics = load_metrics(job_dir / "metrics.json")
    assert metrics.job.profiled_ranks == (0, 1) and metrics.job.profiled_steps == 6
    assert metrics.env.world_size == 2 and metrics.env.backend == "gloo" and "own_ddp_job.py" in metrics.env.command
    job_summary = metrics.summary.modes["job"]
    assert [p.phase for p in job_summary.phases] == ["forward", "backward", "optimizer"]
    assert {(c.phase, c.kind) for c in job_summary.phase_collectives} == {("backward", "all_reduce")}
    assert build_job_record(job_dir.parent).modes["job"].analysis == metrics.modes["job"].analysis  # the same record
    timeline = json.loads((job_dir / "timeline.json").read_text())
    assert [r["rank"] for r in timeline["modes"]["job"]["ranks"]] == [0, 1]
    report = (job_dir / "report.md").read_text()
    assert "Over 6 profiled steps on 2 ranks" in report and "backward" in report
    assert f"report {job_dir / 'report.html'}" in proc.stderr  # rank 0 says where it is
    assert proc.stdout.count("trained 12 steps") == 2


def test_report_builds_a_missing_record_and_compares_two_jobs(ddp_job, tmp_path):
    job_dir, _ = ddp_job
    other = tmp_path / "traces"
    other.mkdir()
    for path in job_dir.glob("*.pt.trace.json.gz"):  # the same traces as a bare folder, as torch's own handler leaves them
        (other / path.name).write_bytes(path.read_bytes())
    proc = cli(["report", str(other)])
    assert proc.returncode == 0, proc.stderr
    assert f"wrote {other / 'report.html'}" in proc.stdout and (other / "metrics.json").is_file()
    # Two log_dirs: each stands for its latest job.
    proc = cli(["report", "--compare", str(job_dir.parent), str(other), "--out", str(tmp_path), "--format", "md"])
    assert proc.returncode == 0, proc.stderr
    (md,) = tmp_path.glob("compare-*.md")
    assert job_dir.name in md.read_text()


def test_a_rank_that_never_profiles_is_named_in_the_report(tmp_path):
    log_dir = tmp_path / "runs"
    proc = own_job(log_dir, "--skip-rank", "1", "--steps", "4", env=clean_env(PROFILE_OVERLAP_JOB_WAIT_S="0.5"))
    job_dir = only_job(log_dir)
    metrics = json.loads((job_dir / "metrics.json").read_text())
    assert metrics["config"]["missing_ranks"] == [1] and metrics["config"]["profiled_ranks"] == [0]
    assert "Rank 1 of 2 wrote no trace" in (job_dir / "report.md").read_text()
    assert "ranks missing: 1" in proc.stderr


def test_without_torch_distributed_a_second_job_in_the_same_log_dir(ddp_job, tmp_path):
    """One process, no process group: a one-rank job. Started in a log_dir that holds the DDP job, it
    gets a folder of its own, and the log_dir's latest job is it."""
    log_dir = tmp_path / "runs"
    shutil.copytree(ddp_job[0], log_dir / ddp_job[0].name)
    own_job(log_dir, "--no-dist", "--steps", "4", nproc=0)
    (second,) = [p for p in log_dir.iterdir() if p.name != ddp_job[0].name]
    assert len(list(second.glob("*_0.*.pt.trace.json.gz"))) == 1  # its own cycle, nothing of the other job
    assert len(list((log_dir / ddp_job[0].name).glob("*.pt.trace.json.gz"))) == 6
    assert layout.read_states(second)[0].world_size == 1 and layout.read_states(second)[0].backend is None
    assert (second / layout.STATE_DIR / "rank0.done").is_file()
    assert layout.find_job_dir(log_dir) == second
    # A one-rank job communicates nothing; it still gets its record and a report that says so.
    record = json.loads((second / "metrics.json").read_text())
    (rank,) = record["modes"]["job"]["analysis"]["ranks"]
    assert rank["comm_us"] == 0 and rank["compute_us"] > 0 and rank["overlap_pct"] is None
    report = (second / "report.md").read_text()
    assert "_job " in report and ": 1 rank, no process group on cpu_" in report
    assert "the job ran no collective: there is no communication to hide" in report


def test_a_full_disk_drops_the_trace_and_training_goes_on(tmp_path):
    """RLIMIT_FSIZE makes every write past 100 kB fail, as a full disk would."""

    def small_disk() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG errors instead of being killed
        resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))

    log_dir = tmp_path / "runs"
    proc = own_job(log_dir, "--no-dist", "--steps", "4", nproc=0, preexec_fn=small_disk)
    assert "rank 0: trained 4 steps" in proc.stdout  # after the profiled cycle's trace failed
    (dropped,) = [line for line in proc.stderr.splitlines() if "dropped the trace of rank 0 at step 4" in line]
    assert "most likely the disk is full" in dropped and "Training goes on" in dropped
    job_dir = only_job(log_dir)
    assert layout.num_dropped(job_dir) == 1
    assert not list(job_dir.glob("*.pt.trace.json*")) and not list(job_dir.glob(".partial-*"))  # nothing that looks like a trace
