"""A job's record: every rank's traces in the job folder -> one RunMetrics (one mode, "job"), its
files (metrics.json, timeline.json, status.json), its report and its TensorBoard files.

`build_job_record(log_dir)` reads the folder as `analyze` does (analysis.folder.analyze_dir), so
rank 0 needs every rank's traces on a file system it can read: the job folder must be shared by
the nodes (or copied together before `report`). Step times are the profiled steps' ProfilerStep
windows, the slowest rank per step; there is no memory or verification for a job we only traced.

    python -m profile_overlap report runs/myjob      # calls ensure_record when metrics.json is missing
"""

from __future__ import annotations

from pathlib import Path

from profile_overlap.analysis.folder import analyze_dir
from profile_overlap.analysis.integrity.checks import credible_world_size, missing_ranges
from profile_overlap.analysis.options import AnalysisOptions
from profile_overlap.analysis.record import timeline_of, traced_record
from profile_overlap.analysis.world.cross_rank import TraceAnalysis
from profile_overlap.api import layout
from profile_overlap.core import status
from profile_overlap.core.errors import UserError
from profile_overlap.core.files import METRICS_JSON, STATUS_JSON, TIMELINE_JSON
from profile_overlap.record.folder import Run, load_run
from profile_overlap.record.load import load_metrics
from profile_overlap.record.metrics import JOB, Env, JobFacts, RankEnv, RunMetrics, StepTimes

STEP_METHOD = "ProfilerStep windows of the profiled steps (slowest rank per step)"
LAUNCHER = "own job"
"""env.json's launcher of a job record: its command is the user's, rerun as it is."""


def build_job_record(log_dir: Path | str, *, warn=None) -> RunMetrics:
    """The record of the job in `log_dir` (a job folder, the latest job of a log_dir, or any folder of
    torch.profiler traces). `warn(message)` hears of each trace left out as bad."""
    return analyze_job(layout.find_job_dir(Path(log_dir)), warn=warn)[0]


def analyze_job(job_dir: Path, *, warn=None, max_workers: int | None = None) -> tuple[RunMetrics, TraceAnalysis]:
    """The record and the analysis it came from (timeline.json is drawn from the analysis)."""
    result = analyze_dir(job_dir, AnalysisOptions(steps=(None, None), skip_bad=True), warn=warn, max_workers=max_workers)
    return job_record(job_dir, result), result


def job_record(job_dir: Path, result: TraceAnalysis, *, cycle: int | None = None) -> RunMetrics:
    """`cycle`: the record is of that profiler cycle only (the live record, while the job runs)."""
    states = layout.read_states(job_dir)
    slowest: dict[int, float] = {}
    for r in result.ranks:
        for s in r.steps:
            slowest[s.step] = max(slowest.get(s.step, 0.0), s.step_us / 1e3)
    # result.world_size is a believable one (analysis.cross_rank); so must the state files' be.
    world = max([result.world_size, *(s.world_size for s in states.values() if credible_world_size(s.world_size))])
    found = sorted(r.rank for r in result.ranks)
    facts = JobFacts(
        kind=JOB,
        source=str(job_dir),
        trace_files=sum(len(r.files) for r in result.ranks),
        profiled_steps=len(slowest),
        profiled_ranks=tuple(found),
        missing_ranks=tuple(r for first, last in missing_ranges(found, world) for r in range(first, last + 1)),
        dropped_traces=layout.num_dropped(job_dir),
        cycles="all" if cycle is None else f"cycle {cycle} only (the job is running)",
    )
    # The same facts in the config, as records before RunMetrics.job had them (other tools read them there).
    config = {
        "mode": layout.JOB_MODE,
        "job": Path(job_dir).name,
        "log_dir": str(Path(job_dir).parent),
        "trace_files": facts.trace_files,
        "profiled_steps": facts.profiled_steps,
        "profiled_ranks": list(facts.profiled_ranks),
        "missing_ranks": list(facts.missing_ranks),
        "dropped_traces": facts.dropped_traces,
        "cycles": facts.cycles,
    }
    step_time = StepTimes.from_times([slowest[k] for k in sorted(slowest)], method=STEP_METHOD)
    return traced_record(
        result, mode=layout.JOB_MODE, step_time=step_time, trace_dir=".", facts=facts, config=config, env=_env(states, result, world)
    )


def _env(states: dict[int, layout.RankState], result: TraceAnalysis, world: int) -> Env:
    """What the ranks recorded about themselves (state files); from the traces alone for a folder of
    others' traces."""
    first = states[min(states)] if states else layout.RankState(rank=0)
    ranks = tuple(
        RankEnv(rank=s.rank, host=s.host, pid=s.pid, local_rank=s.local_rank, node_rank=s.node_rank, device=s.device)
        for _, s in sorted(states.items())
    )
    if not ranks:
        ranks = tuple(RankEnv(rank=r.rank, host="?", device=r.device) for r in result.ranks)
    backend = first.backend or next((r.backend for r in result.ranks if r.backend), None)
    return Env(
        date=min((s.started for s in states.values() if s.started), default=None),
        command=first.command,
        launcher=LAUNCHER,
        python=first.python,
        torch=first.torch,
        cuda=first.cuda,
        nccl=first.nccl,
        gloo=first.gloo,
        backend=backend,
        device_type=first.device_type or result.ranks[0].device,
        world_size=world,
        num_nodes=len({r.node_rank for r in ranks}) if states else None,
        hosts=tuple(sorted({r.host for r in ranks if r.host is not None and r.host != "?"})),
        ranks=ranks,
    )


def write_record(job_dir: Path, metrics: RunMetrics, result: TraceAnalysis, *, final: bool) -> None:
    """metrics.json and timeline.json (what the Overlap tab reads); at the end also the report, the
    record's TensorBoard files and status.json succeeded. During the job, status.json says running."""
    metrics.write(job_dir / METRICS_JSON)
    timeline = timeline_of({layout.JOB_MODE: result})
    timeline.write(job_dir / TIMELINE_JSON)
    if not final:
        status.write(job_dir, "running")
        return
    from profile_overlap.render import tensorboard, write

    tensorboard.write_run(job_dir, metrics, timeline)
    write.write(job_dir, metrics, timeline=timeline)
    status.write(job_dir, "succeeded")


def finish_job(job_dir: Path, *, warn=None, max_workers: int | None = None) -> RunMetrics:
    """Build and write everything from the traces in `job_dir`."""
    metrics, result = analyze_job(job_dir, warn=warn, max_workers=max_workers)
    write_record(job_dir, metrics, result, final=True)
    return metrics


def is_job_record(run_dir: Path) -> bool:
    """Whether run_dir's metrics.json is a job's record (not a run of ours)."""
    path = Path(run_dir) / METRICS_JSON
    try:
        return path.is_file() and load_metrics(path).job is not None
    except UserError:
        return False


def ensure_record(path: Path) -> Path:
    """The folder `report` should read: a run folder of ours as it is; for a job (a log_dir, a job
    folder, or a folder of traces) its job folder, with its record built first when it has none."""
    path = Path(path)
    if (path / STATUS_JSON).is_file() and not (path / layout.STATE_DIR).is_dir():
        return path  # a run of ours (finished or failed): record.folder.load_run says what it lacks
    job_dir = layout.find_job_dir(path)
    if not (job_dir / METRICS_JSON).is_file():
        finish_job(job_dir)
    return job_dir


def write_report(
    path: Path, *, out: Path | None = None, formats: tuple[str, ...] = ("html", "md", "json")
) -> tuple[Path, list[Path]] | None:
    """`report PATH` for a job: (its job folder, the files written); None for a run of ours."""
    run = _job_run(ensure_record(Path(path)))
    if run is None:
        return None
    from profile_overlap.render import write

    return run.dir, write.write_run(run, out=out, formats=formats)


def report_run(path: Path) -> Run:
    """The run `report PATH` reports on, read once: a job's folder (its record built first when it
    has none, ensure_record), else PATH itself as a run of ours (load_run says what it lacks)."""
    run_dir = ensure_record(path)
    run = _read(run_dir)
    return run if run is not None and (run.metrics.job is not None or run_dir == path) else load_run(path)


def _job_run(run_dir: Path) -> Run | None:
    """run_dir read when its metrics.json is a job's record (not a run of ours)."""
    run = _read(run_dir)
    return run if run is not None and run.metrics.job is not None else None


def _read(run_dir: Path) -> Run | None:
    try:
        return load_run(run_dir)
    except UserError:
        return None
