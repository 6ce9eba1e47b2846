"""One rank's classified events -> its metrics (stage 2: `finish_rank`, or `analyze_rank` from files).

overlap_us = |∪comm ∩ ∪compute| and overlap_pct = 100 · overlap_us / comm_us, over the whole
trace and per ProfilerStep window (the README's "Metrics" section). The result, RankAnalysis, is
small and picklable so a run can gather it across ranks (`cross_rank.combine`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from profile_overlap.analysis.collectives import CollectiveCall, CollectiveInstance, CollectiveStats, collective_stats, number_calls
from profile_overlap.analysis.events import EventIntervals, FileEvents, extract
from profile_overlap.analysis.facts import RankFacts, rank_facts
from profile_overlap.analysis.hta_compat import hta_filter
from profile_overlap.analysis.overlap_spans import OverlapSpans, overlap_spans
from profile_overlap.analysis.rank_input import rank_of, selected_steps
from profile_overlap.analysis.rank_times import RankTimes, rank_times
from profile_overlap.analysis.replay import ReplayStep, replay_steps
from profile_overlap.analysis.spans import MAX_TIMELINE_STEPS, TimelineSpan, timeline_spans
from profile_overlap.analysis.trace import load_trace
from profile_overlap.core import intervals as iv
from profile_overlap.core.modes import PHASES


@dataclass(frozen=True)
class PhaseMetrics:
    """One phase (forward, backward, optimizer) of one step, or summed over a rank's steps: the
    communication hidden behind the phase's compute and the communication exposed in its window."""

    phase: str
    window_us: float
    """Length of the union of the phase's windows (clipped to the step)."""
    comm_us: float
    """|∪comm ∩ window|."""
    compute_us: float
    """|∪compute ∩ window|."""
    overlap_us: float
    """|∪comm ∩ ∪compute ∩ window|: communication hidden behind this phase's compute."""
    exposed_comm_us: float
    """comm_us − overlap_us: communication exposed inside this phase's window."""
    sources: tuple[str, ...] = ()
    """Where the window came from (analysis/phases.py): "labels", an engine whose own ranges
    placed it (classify.ENGINE_RANGES: "FSDP2", "DDP", "torch.optim", "profile_overlap"),
    "autograd" (backward from autograd's frames) or "step" (forward: the step before the
    backward); over a rank's steps, each source once, in the order first met."""


@dataclass(frozen=True)
class PhaseCollectives:
    """The collectives of one kind issued in one phase, over a rank's steps ("other": outside
    every phase window)."""

    phase: str
    kind: str
    count: int
    nbytes: int | None
    """Sum of the calls' sizes; None when some call's size is unknown."""
    dur_us: float


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
    phases: tuple[PhaseMetrics, ...] = ()
    """Per phase present in the step, in PHASES order; empty without phase labels."""


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
    instances: tuple[CollectiveInstance, ...]
    timeline: tuple[TimelineSpan, ...]
    facts: RankFacts
    """What the integrity checks rest on (analysis/facts.py)."""
    times: RankTimes
    """What the causes of exposed communication rest on (analysis/rank_times.py)."""
    phases: tuple[PhaseMetrics, ...] = ()
    """Per phase, summed over the steps (empty without phase labels or steps)."""
    phase_collectives: tuple[PhaseCollectives, ...] = ()
    """Per (phase, kind): the collectives issued in that phase (CPU: by their c10d op's start on
    the calling thread; GPU: by their kernel's start, in the labels' device-side ranges)."""
    phase_windows: tuple[tuple[int, str, float, float], ...] = ()
    """(step, phase, start_us, end_us) of each phase range, clipped to the timeline's steps (for the figures)."""
    replay: tuple[ReplayStep, ...] = ()
    """Per profiled step, what whatif replays (analysis/replay.py)."""
    spans: OverlapSpans | None = None
    """The intervals behind the totals (analysis/overlap_spans.py); only with finish_rank(keep_spans=True)."""


def _step_metrics(
    comm_u: iv.Union,
    compute_u: iv.Union,
    by_phase: tuple[np.ndarray, ...],
    step_num: np.ndarray,
    step_start: np.ndarray,
    step_end: np.ndarray,
) -> list[StepMetrics]:
    """Each ProfilerStep window's metrics: the rank's unions clipped to it, and its phases."""
    out = []
    for n, s, e in zip(step_num.tolist(), step_start.tolist(), step_end.tolist()):
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
    *,
    hta_compat: bool = False,
    steps: tuple[int | None, int | None] | None = None,
    keep_spans: bool = False,
) -> RankAnalysis:
    """Measure one rank from its file(s). Several files of one rank must be successive profiler
    spans of the same worker (disjoint in time); their events are pooled."""
    assert files
    files = sorted(files, key=lambda f: f.t_min)
    rank, notes = rank_of(files)
    device = files[0].device
    labels, remap = _pool_labels(files)
    comm = _cat([f.comm for f in files], remap)
    compute = _cat([f.compute for f in files], remap)
    step_num = np.concatenate([f.step_num for f in files])
    step_start = np.concatenate([f.step_start for f in files])
    step_end = np.concatenate([f.step_end for f in files])
    calls = [c for f in files for c in f.calls]

    if hta_compat:
        comm, compute, calls, step_num, step_start, step_end, note = hta_filter(comm, compute, calls, step_num, step_start, step_end)
        if note:
            notes.append(note)

    # Number the calls over the whole trace, before any window: the k-th call of a kind and group
    # is then the same call on every rank even where a step window cuts through the calls
    # differently on each rank (gloo starts the split's all_gathers across the step boundary).
    instances = every_call = number_calls(calls)
    all_calls = calls
    if steps is not None:
        sel = selected_steps(step_num, steps, rank=rank)
        step_num, step_start, step_end = step_num[sel], step_start[sel], step_end[sel]
        windows = iv.union(step_start, step_end)
        in_window = iv.covers(windows, np.array([c.start_us for c in calls]))
        calls = [c for c, ok in zip(calls, in_window) if ok]
        instances = tuple(i for i, ok in zip(instances, iv.covers(windows, np.array([i.start_us for i in instances]))) if ok)
    else:
        windows = None

    comm_u = iv.union(comm.start, comm.end)
    # No c10d time counts as compute, even of an operator that only partly overlaps a c10d op.
    exclude = iv.union(np.concatenate([f.exclude[0] for f in files]), np.concatenate([f.exclude[1] for f in files]))
    compute_u = iv.difference(iv.union(compute.start, compute.end), exclude)
    facts = rank_facts(
        [f.facts for f in files],
        comm_u=comm_u,
        compute_u=compute_u,
        windows=windows if windows is not None else iv.union(step_start, step_end),
        in_steps=windows is not None,
        calls=every_call,
    )
    if windows is not None:
        comm_u, compute_u = iv.intersect(comm_u, windows), iv.intersect(compute_u, windows)
    by_phase = tuple(np.concatenate([getattr(f.phases, k) for f in files]) for k in ("phase", "start", "end", "source"))
    phase, phase_start, phase_end, _ = by_phase
    step_windows = windows if windows is not None else iv.union(step_start, step_end)
    times = rank_times(
        all_calls,
        every_call,
        device=device,
        comm=iv.intersect(comm_u, step_windows) if windows is None and step_num.size else comm_u,
        compute=iv.intersect(compute_u, step_windows) if windows is None and step_num.size else compute_u,
        windows=step_windows,
        step_num=step_num,
        step_start=step_start,
        step_end=step_end,
        phase=phase,
        phase_start=phase_start,
        phase_end=phase_end,
    )
    step_metrics = _step_metrics(comm_u, compute_u, by_phase, step_num, step_start, step_end)
    whole = _measure(comm_u, compute_u)

    world = max((f.world_size for f in files if f.world_size), default=None)
    kept = set(step_num.tolist())
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
        timeline=timeline_spans(
            {kind: (x.start, x.end, x.label) for kind, x in (("comm", comm), ("compute", compute))}, labels, step_num, step_start, step_end
        ),
        phases=_sum_phases(step_metrics),
        phase_collectives=_phase_collectives(calls, phase, phase_start, phase_end),
        phase_windows=_phase_spans(phase, phase_start, phase_end, step_num, step_start, step_end),
        facts=facts,
        replay=tuple(s for f in files for s in replay_steps(f) if s.step in kept),
        times=times,
        spans=overlap_spans(comm_u, compute_u) if keep_spans else None,
    )


def _phases(comm_u: iv.Union, compute_u: iv.Union, by_phase: tuple[np.ndarray, ...], lo: float, hi: float) -> tuple[PhaseMetrics, ...]:
    """Each phase's window in the step [lo, hi) and the comm and compute inside it. by_phase:
    (phase, start, end, source) columns of the windows (analysis/phases.py)."""
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
            PhaseMetrics(
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


def _phase_collectives(
    calls: list[CollectiveCall], phase: np.ndarray, phase_start: np.ndarray, phase_end: np.ndarray
) -> tuple[PhaseCollectives, ...]:
    """Per (phase, kind): the calls issued inside the phase's windows; a call outside every window
    goes by the engine labels around it (CollectiveCall.phase_hint), else to "other". Empty when the
    trace has neither phase labels nor engine labels."""
    if not calls or (not phase.size and not any(c.phase_hint for c in calls)):
        return ()
    t = np.array([c.issued_us if c.issued_us is not None else c.start_us for c in calls])
    where = np.array([PHASES.index(c.phase_hint) if c.phase_hint else len(PHASES) for c in calls])
    covered = np.zeros(t.size, dtype=bool)
    for index in range(len(PHASES)):
        sel = phase == index
        if sel.any():
            inside = iv.covers(iv.union(phase_start[sel], phase_end[sel]), t) & ~covered
            where[inside] = index
            covered |= inside
    names = (*PHASES, "other")
    groups: dict[tuple[int, str], list[CollectiveCall]] = {}
    for call, p in zip(calls, where.tolist()):
        groups.setdefault((p, call.kind), []).append(call)
    return tuple(
        PhaseCollectives(
            phase=names[p],
            kind=kind,
            count=len(group),
            nbytes=_total_bytes(group),
            dur_us=sum(c.dur_us for c in group),
        )
        for (p, kind), group in sorted(groups.items())
    )


def _total_bytes(calls: list[CollectiveCall]) -> int | None:
    """Their bytes together; None when the trace does not size one of them."""
    sizes = [c.nbytes for c in calls if c.nbytes is not None]
    return sum(sizes) if len(sizes) == len(calls) else None


def _sum_phases(steps: list[StepMetrics]) -> tuple[PhaseMetrics, ...]:
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
        out.append(PhaseMetrics(name, window, comm, compute, overlap, exposed, sources=tuple(sources[name])))
    return tuple(out)


def _phase_spans(
    phase: np.ndarray, phase_start: np.ndarray, phase_end: np.ndarray, step_num: np.ndarray, step_start: np.ndarray, step_end: np.ndarray
) -> tuple[tuple[int, str, float, float], ...]:
    spans = []
    for n, lo, hi in list(zip(step_num.tolist(), step_start.tolist(), step_end.tolist()))[:MAX_TIMELINE_STEPS]:
        for p, a, b in zip(phase.tolist(), phase_start.tolist(), phase_end.tolist()):
            a, b = max(a, lo), min(b, hi)
            if b > a:
                spans.append((n, PHASES[p], a, b))
    return tuple(sorted(spans, key=lambda x: x[2]))


def _pool_labels(files: Sequence[FileEvents]) -> tuple[tuple[str, ...], list[np.ndarray]]:
    labels: dict[str, int] = {}
    remap = []
    for f in files:
        remap.append(np.array([labels.setdefault(lab, len(labels)) for lab in f.labels] or [0], dtype=np.int32))
    return tuple(labels), remap


def _cat(parts: list[EventIntervals], remap: list[np.ndarray]) -> EventIntervals:
    return EventIntervals(
        np.concatenate([p.start for p in parts]),
        np.concatenate([p.end for p in parts]),
        np.concatenate([p.launch for p in parts]),
        np.concatenate([m[p.label] if p.label.size else p.label for p, m in zip(parts, remap)]),
    )


def analyze_rank(paths: Sequence[Path], *, hta_compat: bool = False, steps: tuple[int | None, int | None] | None = None) -> RankAnalysis:
    """One rank's trace file(s) -> its metrics."""
    return finish_rank([extract(load_trace(Path(p))) for p in paths], hta_compat=hta_compat, steps=steps)
