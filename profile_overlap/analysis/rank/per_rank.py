"""One rank's classified events -> its metrics (stage 2: `finish_rank`, or `analyze_rank` from files).

overlap_us = |∪comm ∩ ∪compute| and overlap_pct = 100 · overlap_us / comm_us, over the whole
trace and per ProfilerStep window (docs/metrics.md). The result, RankAnalysis, is
small and picklable so a run can gather it across ranks (`cross_rank.combine`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from profile_overlap.analysis.file.call_columns import Calls, Instances, collective_stats, number_calls
from profile_overlap.analysis.file.collectives import CollectiveStats
from profile_overlap.analysis.file.events import FileEvents, extract
from profile_overlap.analysis.file.facts import RankFacts, rank_facts
from profile_overlap.analysis.file.fsdp_units import rank_busy
from profile_overlap.analysis.file.phases import unions_of_phases
from profile_overlap.analysis.file.replay import ReplayStep, replay_steps
from profile_overlap.analysis.file.steps import StepTable
from profile_overlap.analysis.options import DEFAULT, AnalysisOptions
from profile_overlap.analysis.rank.dimensions import RankDimensions, rank_dimensions
from profile_overlap.analysis.rank.interference import RankSample, measure
from profile_overlap.analysis.rank.overlap_spans import OverlapSpans, overlap_spans
from profile_overlap.analysis.rank.pipeline import RankPipeline, rank_pipeline
from profile_overlap.analysis.rank.rank_input import rank_of
from profile_overlap.analysis.rank.rank_pool import busy, pool, step_window
from profile_overlap.analysis.rank.rank_times import RankTimes, rank_times
from profile_overlap.analysis.rank.spans import MAX_TIMELINE_STEPS, TimelineColumns, timeline_columns
from profile_overlap.analysis.read.trace import load_trace
from profile_overlap.core import intervals as iv
from profile_overlap.core.modes import PHASES
from profile_overlap.record.analysis import FsdpRecord, PhaseCollectiveRecord, PhaseRecord


@dataclass(frozen=True)
class StepMetrics:
    """One `ProfilerStep#N` window: the rank metrics clipped to it."""

    step: int
    start_us: float
    step_us: float
    comm_us: float
    compute_us: float
    overlap_us: float
    exposed_comm_us: float
    overlap_pct: float | None
    phases: tuple[PhaseRecord, ...] = ()
    """Per phase present in the step, in PHASES order, as measured (the record rounds them); empty without phase labels."""


@dataclass(frozen=True)
class RankAnalysis:
    """One rank's metrics; small enough to gather across ranks."""

    rank: int
    device: str  # "cuda" or "cpu"
    backend: str | None
    files: tuple[str, ...]
    notes: tuple[str, ...]
    """Things the user should know, e.g. that the rank came from the file name."""
    world_size: int | None
    comm_us: float
    compute_us: float
    overlap_us: float
    exposed_comm_us: float
    overlap_pct: float | None
    steps: tuple[StepMetrics, ...]
    collectives: tuple[CollectiveStats, ...]
    instances: Instances
    """Its collective calls in time order, numbered for cross-rank matching (columns; iterates as CollectiveInstance)."""
    timeline: TimelineColumns | None
    """Its timeline spans (analysis/rank/spans.py; columns, iterates as TimelineSpan); None when
    analysed without them (AnalysisOptions.timeline)."""
    facts: RankFacts
    """What the integrity checks rest on (analysis/file/facts.py)."""
    times: RankTimes
    """What the causes of exposed communication rest on (analysis/rank/rank_times.py)."""
    phases: tuple[PhaseRecord, ...] = ()
    """Per phase, summed over the steps, as measured (empty without phase labels or steps)."""
    phase_collectives: tuple[PhaseCollectiveRecord, ...] = ()
    """Per (phase, kind): the collectives issued in that phase (CPU: by their c10d op's start on
    the calling thread; GPU: by their kernel's start, in the phases' device windows)."""
    phase_windows: tuple[tuple[int, str, float, float], ...] = ()
    """(step, phase, start_us, end_us) of each phase range, clipped to the timeline's steps (for the figures)."""
    replay: tuple[ReplayStep, ...] = ()
    """Per profiled step, what whatif replays (analysis/file/replay.py)."""
    spans: OverlapSpans | None = None
    """The intervals behind the totals (analysis/rank/overlap_spans.py); only with finish_rank(options.keep_spans)."""
    interference: RankSample | None = None
    """How much longer compute ran with communication in flight than alone, per phase (rank/interference.py); None without steps."""
    dimensions: RankDimensions | None = None
    """Its calls by dimension (analysis/rank/dimensions.py); None only in analyses built by hand."""
    pipeline: RankPipeline | None = None
    """Its point-to-point view and bubble per step (analysis/rank/pipeline.py); None without send/recv."""
    fsdp: FsdpRecord | None = None
    """FSDP2's work on its training thread (analysis/file/fsdp_units.py); None on GPU and without FSDP:: ranges."""


def _step_metrics(
    comm_u: iv.Union,
    compute_u: iv.Union,
    by_phase: tuple[np.ndarray, ...],
    steps: StepTable,
) -> list[StepMetrics]:
    """Each ProfilerStep window's metrics: the rank's unions clipped to it, and its phases."""
    out = []
    for n, s, e in steps.rows():
        m = _measure(iv.clip(comm_u, s, e), iv.clip(compute_u, s, e))
        out.append(
            StepMetrics(
                step=int(n),
                start_us=float(s),
                step_us=float(e - s),
                comm_us=m.comm_us,
                compute_us=m.compute_us,
                overlap_us=m.overlap_us,
                exposed_comm_us=m.exposed_comm_us,
                overlap_pct=m.overlap_pct,
                phases=_phases(comm_u, compute_u, by_phase, s, e),
            )
        )
    return out


@dataclass(frozen=True)
class _Overlap:
    """The overlap metrics of a comm and a compute union, by their field names in StepMetrics and RankAnalysis."""

    comm_us: float
    compute_us: float
    overlap_us: float
    exposed_comm_us: float
    overlap_pct: float | None


def _measure(comm: iv.Union, compute: iv.Union) -> _Overlap:
    comm_us = iv.length(comm)
    overlap_us = iv.intersection_length(comm, compute)
    return _Overlap(
        comm_us=comm_us,
        compute_us=iv.length(compute),
        overlap_us=overlap_us,
        exposed_comm_us=comm_us - overlap_us,
        overlap_pct=100 * overlap_us / comm_us if comm_us > 0 else None,
    )


def finish_rank(
    files: Sequence[FileEvents],
    options: AnalysisOptions = DEFAULT,
    *,
    release: bool = False,
) -> RankAnalysis:
    """Measure one rank from its file(s). Several files of one rank must be successive profiler
    spans of the same worker (disjoint in time); their events are pooled. release: the caller is
    done with the files; their intervals are freed once read (`FileEvents.release_intervals`)."""
    assert files
    files = sorted(files, key=lambda f: f.t_min)
    rank, notes = rank_of(files)
    device = files[0].device
    pooled = pool(files, hta_compat=options.hta_compat, notes=notes)
    comm, compute, all_calls = pooled.comm, pooled.compute, pooled.calls
    # Number the calls over the whole trace, before any window: the k-th call of a kind and group
    # is then the same call on every rank even where a step window cuts through the calls
    # differently on each rank (gloo starts the split's all_gathers across the step boundary).
    every_call = number_calls(all_calls, rank=rank)
    window = step_window(pooled, every_call, steps=options.steps, rank=rank)
    windows, calls, instances = window.windows, window.calls, window.instances
    table = StepTable(window.step_num, window.step_start, window.step_end)
    comm_u, compute_u = busy(files, pooled)
    # One file whose own columns are the rank's: its replay's unions are these (not built again).
    own = len(files) == 1 and pooled.comm is files[0].comm and pooled.compute is files[0].compute
    file_busy = (comm_u, compute_u) if own else None
    facts = rank_facts(
        [f.facts for f in files],
        comm_u=comm_u,
        compute_u=compute_u,
        windows=windows if windows is not None else table.union(),
        in_steps=windows is not None,
        calls=every_call,
    )
    if windows is not None:
        comm_u, compute_u = iv.intersect(comm_u, windows), iv.intersect(compute_u, windows)
    by_phase = tuple(np.concatenate([getattr(f.phases, k) for f in files]) for k in ("phase", "start", "end", "source"))
    phase, phase_start, phase_end, _ = by_phase
    unions = unions_of_phases(phase, phase_start, phase_end)  # each phase's windows, shared by the measures below
    step_windows = windows if windows is not None else table.union()
    world = max((f.world_size for f in files if f.world_size), default=None)
    # The dimensions, the interference and the replay before rank_times, while the least is alive beside their
    # temporaries (peak memory).
    dims = rank_dimensions(
        calls,
        compute_u,
        groups=files[0].groups,
        method="; ".join(dict.fromkeys(f.group_method for f in files if f.group_method)),
        world=world,
        step_table=table,
        phase=phase,
        phase_unions=unions,
    )
    interference = (
        measure(
            [f.operators for f in files],
            comm=comm_u,
            steps=step_windows,
            phase=phase,
            phase_unions=unions,
            rank=rank,
            calls=all_calls,
        )
        if table.size
        else None
    )
    kept = set(table.num.tolist())
    # One file: its phase windows are the rank's (several files: each replays its own).
    per_file = [unions] if len(files) == 1 else [unions_of_phases(f.phases.phase, f.phases.start, f.phases.end) for f in files]
    replay = tuple(s for f, u in zip(files, per_file) for s in replay_steps(f, u, file_busy) if s.step in kept)
    del file_busy
    timeline = (
        timeline_columns(
            {kind: (x.start, x.end, x.label) for kind, x in (("comm", comm), ("compute", compute))},
            pooled.labels,
            table,
        )
        if options.timeline
        else None
    )
    # Past their last reader: the intervals are not alive beside the per-call columns below (peak memory).
    del comm, compute, pooled
    if release:
        for f in files:
            f.release_intervals()
    times = rank_times(
        all_calls,
        every_call,
        device=device,
        comm=iv.intersect(comm_u, step_windows) if windows is None and table.size else comm_u,
        compute=iv.intersect(compute_u, step_windows) if windows is None and table.size else compute_u,
        windows=step_windows,
        steps=table,
        phase_unions=unions,
    )
    step_metrics = _step_metrics(comm_u, compute_u, by_phase, table)
    whole = _measure(comm_u, compute_u)

    return RankAnalysis(
        rank=rank,
        device=device,
        backend=files[0].backend,
        files=tuple(f.path for f in files),
        notes=tuple(notes),
        world_size=world,
        comm_us=whole.comm_us,
        compute_us=whole.compute_us,
        overlap_us=whole.overlap_us,
        exposed_comm_us=whole.exposed_comm_us,
        overlap_pct=whole.overlap_pct,
        steps=tuple(step_metrics),
        collectives=collective_stats(instances),
        instances=instances,
        timeline=timeline,
        phases=_sum_phases(step_metrics),
        phase_collectives=_phase_collectives(calls, phase, unions),
        phase_windows=_phase_spans(phase, phase_start, phase_end, table),
        facts=facts,
        replay=replay,
        times=times,
        spans=overlap_spans(comm_u, compute_u) if options.keep_spans else None,
        interference=interference,
        dimensions=dims,
        pipeline=rank_pipeline(calls, compute_u, step_table=table),
        fsdp=rank_busy([(f.fsdp, f.step_num.size) for f in files if f.fsdp is not None]),
    )


def _phases(comm_u: iv.Union, compute_u: iv.Union, by_phase: tuple[np.ndarray, ...], lo: float, hi: float) -> tuple[PhaseRecord, ...]:
    """Each phase's window in the step [lo, hi) and the comm and compute inside it. by_phase:
    (phase, start, end, source) columns of the windows (analysis/file/phases.py)."""
    phase, phase_start, phase_end, source = by_phase
    out = []
    for index, name in enumerate(PHASES):
        sel = (phase == index) & (phase_start < hi) & (phase_end > lo)
        if not sel.any():
            continue
        window = iv.clip(iv.union(phase_start[sel], phase_end[sel]), lo, hi)
        if window[0].size == 0:
            continue
        m = _measure(iv.intersect(comm_u, window), iv.intersect(compute_u, window))
        out.append(
            PhaseRecord(
                phase=name,
                window_us=iv.length(window),
                comm_us=m.comm_us,
                compute_us=m.compute_us,
                overlap_us=m.overlap_us,
                exposed_comm_us=m.exposed_comm_us,
                sources=tuple(dict.fromkeys(source[sel].tolist())),
            )
        )
    return tuple(out)


def _phase_collectives(calls: Calls, phase: np.ndarray, phase_unions: tuple[iv.Union, ...]) -> tuple[PhaseCollectiveRecord, ...]:
    """Per (phase, kind): the calls issued inside the phase's windows; a call outside every window
    goes by the engine labels around it (CollectiveCall.phase_hint), else to "other". Empty when the
    trace has neither phase labels nor engine labels."""
    hint_phase = np.array([PHASES.index(h) if h else len(PHASES) for h in calls.hints] + [len(PHASES)])
    where = hint_phase[calls.hint]  # code -1 (no hint) -> "other"
    if not len(calls) or (not phase.size and not (where < len(PHASES)).any()):
        return ()
    t = calls.issue_or_start()
    covered = np.zeros(t.size, dtype=bool)
    for index in range(len(PHASES)):
        if (phase == index).any():
            inside = iv.covers(phase_unions[index], t) & ~covered
            where[inside] = index
            covered |= inside
    names = (*PHASES, "other")
    out = []
    for p, code in sorted({(p, k) for p, k in zip(where.tolist(), calls.kind.tolist())}, key=lambda x: (x[0], calls.kinds[x[1]])):
        group = np.flatnonzero((where == p) & (calls.kind == code))  # in the calls' order
        nb = calls.nbytes[group]
        out.append(
            PhaseCollectiveRecord(
                phase=names[p],
                kind=calls.kinds[code],
                count=int(group.size),
                nbytes=sum(nb.tolist()) if (nb >= 0).all() else None,
                dur_us=float(sum(calls.dur_us[group].tolist())),
            )
        )
    return tuple(out)


def _sum_phases(steps: list[StepMetrics]) -> tuple[PhaseRecord, ...]:
    totals: dict[str, list[float]] = {}
    sources: dict[str, dict[str, None]] = {}
    for step in steps:
        for p in step.phases:
            acc = totals.setdefault(p.phase, [0.0] * 5)
            for i, value in enumerate((p.window_us, p.comm_us, p.compute_us, p.overlap_us, p.exposed_comm_us)):
                acc[i] += value
            sources.setdefault(p.phase, {}).update(dict.fromkeys(p.sources))
    out = []
    for name in (p for p in PHASES if p in totals):
        window, comm, compute, overlap, exposed = totals[name]
        out.append(
            PhaseRecord(
                phase=name,
                window_us=window,
                comm_us=comm,
                compute_us=compute,
                overlap_us=overlap,
                exposed_comm_us=exposed,
                sources=tuple(sources[name]),
            )
        )
    return tuple(out)


def _phase_spans(
    phase: np.ndarray, phase_start: np.ndarray, phase_end: np.ndarray, steps: StepTable
) -> tuple[tuple[int, str, float, float], ...]:
    spans = []
    for n, lo, hi in steps.rows()[:MAX_TIMELINE_STEPS]:
        for p, a, b in zip(phase.tolist(), phase_start.tolist(), phase_end.tolist()):
            a, b = max(a, lo), min(b, hi)
            if b > a:
                spans.append((n, PHASES[p], a, b))
    return tuple(sorted(spans, key=lambda x: x[2]))


def analyze_rank(paths: Sequence[Path], options: AnalysisOptions = DEFAULT) -> RankAnalysis:
    """One rank's trace file(s) -> its metrics."""
    return finish_rank([extract(load_trace(Path(p)), release=True) for p in paths], options, release=True)
