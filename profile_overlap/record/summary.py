"""The numbers derived from a run's measurements, computed once, when the record is built.

`with_summary(metrics)` fills `RunMetrics.summary` (per-mode overlap per profiled step, per phase,
collectives over ranks and per phase, their bytes against the model's parameter bytes, memory, the
slowest rank; every mode's speedup over the first; the headline numbers; whether sequential and
split are within run-to-run noise, and the intervals over blocks that decide it (record/noise.py);
the overlap yield and the interference per phase of split against split-blocking) and `speedup`
computes `RunMetrics.speedup`. The harness calls both before writing metrics.json; record/load.py
recomputes the summary of a record of an older schema.
Renderers (console, reports, TensorBoard, the Overlap tab, sweeps) only read the result.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence

import msgspec

from profile_overlap.core.modes import MODES, PHASES, SPEEDUP_BASELINE, SPEEDUP_MODE, YIELD_BASELINE, YIELD_MODE
from profile_overlap.record import noise
from profile_overlap.record.analysis import RankRecord
from profile_overlap.record.metrics import (
    BytesCheck,
    CheckResult,
    CollectiveRow,
    ModeMetrics,
    ModeSummary,
    OverlapYield,
    PhaseCollective,
    PhaseInterference,
    PhaseSummary,
    RankRange,
    RelativeSpeedup,
    RunMetrics,
    RunSummary,
    Speedup,
    StepTimes,
)

MIB = 2**20
OTHER_PHASE = "other"
"""phase_collectives' phase for a collective issued outside every phase."""
BYTES_PADDING = 0.02
"""How far above the expected ratio a row may be: each unit (ours) or parameter (fsdp2) is padded to a
multiple of the world size, a few elements per unit; 0 with this package's models at world sizes that
divide their sizes."""
HEADLINE_NAMES = (
    "speedup",
    "predicted_speedup",
    *(spec.step_headline for spec in MODES.values()),
    "overlap_yield_ms",
    "overlap_yield_pct",
    "overlap_pct",
    "exposed_comm_ms",
    "comm_ms",
    "compute_ms",
    "optimizer_state_mib",
    "max_error",
    "failed_checks",
)


def within_noise(a: StepTimes, b: StepTimes) -> bool:
    """Each median lies inside the other's p10-p90 range (definitions: `within_noise`, rule p10-p90)."""
    a10, a90, b10, b90 = a.p10_ms, a.p90_ms, b.p10_ms, b.p90_ms
    assert a10 is not None and a90 is not None and b10 is not None and b90 is not None, "two timed modes"
    return a10 <= median_ms(b) <= a90 and b10 <= median_ms(a) <= b90


def blocks(st: StepTimes) -> tuple[tuple[float, ...], ...]:
    """A mode's blocks of timed steps (records before --repeats: all their steps as one block)."""
    return st.blocks_ms or ((st.times_ms,) if st.times_ms else ())


def noise_summary(metrics: RunMetrics) -> noise.NoiseSummary:
    """The intervals over blocks (record/noise.py); each None with one block per mode."""
    timed = [n for n, m in metrics.modes.items() if m.step_time.times_ms]
    per_mode = {n: blocks(metrics.modes[n].step_time) for n in timed}
    num_blocks = min((len(b) for b in per_mode.values()), default=0)
    first = next(iter(metrics.modes))
    return noise.NoiseSummary(
        rule=noise.PAIRED_BLOCKS if num_blocks > 1 else noise.P10_P90,
        num_blocks=num_blocks,
        step_time_ms={n: noise.median_interval(b) for n, b in per_mode.items()},
        speedup_vs_first={n: noise.paired_ratio_interval(per_mode[first], per_mode[n]) for n in timed if first in per_mode and n != first},
        speedup=noise.paired_ratio_interval(per_mode[SPEEDUP_BASELINE], per_mode[SPEEDUP_MODE])
        if {SPEEDUP_BASELINE, SPEEDUP_MODE} <= set(timed)
        else None,
        overlap_yield_ms=(
            noise.paired_difference_interval(per_mode[YIELD_BASELINE], per_mode[YIELD_MODE])
            if {YIELD_MODE, YIELD_BASELINE} <= set(timed)
            else None
        ),
    )


def compare_runs(a: RunMetrics, b: RunMetrics) -> dict[str, noise.RunDifference]:
    """Each mode timed in both runs: B's step time against A's, in A's order (definitions: "Comparing two runs")."""
    timed = [n for n in a.modes if n in b.modes and a.modes[n].step_time.times_ms and b.modes[n].step_time.times_ms]
    return {n: noise.compare_runs(blocks(a.modes[n].step_time), blocks(b.modes[n].step_time)) for n in timed}


def _within(a: StepTimes, b: StepTimes, interval: noise.Interval | None, *, null: float = 1.0) -> bool:
    """With repeats, the interval (of a ratio, or of a difference with null=0) contains `null`; else the p10-p90 rule."""
    return interval.contains(null) if interval is not None else within_noise(a, b)


def summary_of(metrics: RunMetrics) -> RunSummary:
    """The record's summary, for its readers: with_summary and load_metrics always fill it (it is None
    only while with_summary builds the record)."""
    assert metrics.summary is not None, "a record is read only once summarized (with_summary, load_metrics)"
    return metrics.summary


def measured_interference(rows: Sequence[PhaseInterference]) -> list[tuple[float, float, PhaseInterference]]:
    """The interference rows with both compute times: (compute_ms − baseline_compute_ms, pct, row)."""
    return [
        (x.compute_ms - x.baseline_compute_ms, x.pct, x)
        for x in rows
        if x.pct is not None and x.compute_ms is not None and x.baseline_compute_ms is not None
    ]


def median_ms(st: StepTimes) -> float:
    """The median step time of a timed mode (one with times_ms)."""
    assert st.median_ms is not None, "a mode without timed steps has no median"
    return st.median_ms


def speedup(modes: dict[str, ModeMetrics]) -> Speedup | None:
    """sequential / split median step time, and the ideal from the sequential mode's comm and
    compute (definitions: `speedup`, `predicted_speedup`). None unless both modes were timed."""
    if not all(name in modes and modes[name].step_time.times_ms for name in (SPEEDUP_BASELINE, SPEEDUP_MODE)):
        return None
    seq, split = modes[SPEEDUP_BASELINE], modes[SPEEDUP_MODE]
    if median_ms(split.step_time) <= 0:
        return None
    measured = median_ms(seq.step_time) / median_ms(split.step_time)
    predicted = None
    if seq.analysis and seq.analysis.ranks:
        ranks = seq.analysis.ranks
        comm = sum(r.comm_us for r in ranks) / len(ranks)
        compute = sum(r.compute_us for r in ranks) / len(ranks)
        if max(comm, compute) > 0:
            predicted = (comm + compute) / max(comm, compute)
    return Speedup(measured=measured, predicted=predicted)


def _spread(values: list[float]) -> RankRange:
    return RankRange(mean=statistics.fmean(values), min=min(values), max=max(values))


def _collectives(ranks: Sequence[RankRecord]) -> tuple[CollectiveRow, ...]:
    rows = []
    for kind in sorted({c.kind for r in ranks for c in r.collectives}):
        per_rank = [c for r in ranks for c in r.collectives if c.kind == kind]
        sized = [c.nbytes / c.count for c in per_rank if c.nbytes]
        alg = [c.algbw_gbps for c in per_rank if c.algbw_gbps is not None]
        bus = [c.busbw_gbps for c in per_rank if c.busbw_gbps is not None]
        rows.append(
            CollectiveRow(
                kind=kind,
                size_per_call=statistics.fmean(sized) if sized else None,
                calls=(min(c.count for c in per_rank), max(c.count for c in per_rank)),
                time_per_call_us=_spread([c.dur_us / c.count for c in per_rank]),
                algbw_gbps=_spread(alg) if alg else None,
                busbw_gbps=_spread(bus) if bus else None,
            )
        )
    return tuple(rows)


def _wait_share_pct(rank: RankRecord) -> float | None:
    """definitions: `wait_share_pct`."""
    if rank.wait_us is None:
        return None
    total = rank.wait_us + (rank.transfer_us or 0.0)
    return 100 * rank.wait_us / total if total else None


PHASE_FIELDS = ("window_us", "comm_us", "compute_us", "overlap_us", "exposed_comm_us")
"""PhaseRecord's numbers, in PhaseSummary's order (each in ms there)."""


def _phases(ranks: Sequence[RankRecord], steps: int) -> tuple[PhaseSummary, ...]:
    """Each phase's numbers per profiled step, mean over ranks (a rank without the phase counts 0),
    and where its windows came from. Empty when no rank's trace has phases (records before
    schema 3, others' traces without labels or torch's ranges)."""
    totals: dict[str, list[float]] = {}
    sources: dict[str, dict[str, None]] = {}
    for r in ranks:
        for p in r.phases:
            acc = totals.setdefault(p.phase, [0.0] * len(PHASE_FIELDS))
            for i, key in enumerate(PHASE_FIELDS):
                acc[i] += getattr(p, key) or 0.0
            sources.setdefault(p.phase, {}).update(dict.fromkeys(p.sources))
    names = [p for p in PHASES if p in totals] + sorted(p for p in totals if p not in PHASES)
    per_step = {name: [x / len(ranks) / steps / 1e3 for x in totals[name]] for name in names}
    return tuple(
        PhaseSummary(phase=name, window_ms=w, comm_ms=c, compute_ms=x, hidden_ms=h, exposed_comm_ms=e, sources=tuple(sources[name]))
        for name, (w, c, x, h, e) in per_step.items()
    )


def _phase_collectives(ranks: Sequence[RankRecord], steps: int) -> tuple[PhaseCollective, ...]:
    """Each (phase, kind) of the ranks' phase_collectives per profiled step, mean over ranks (a rank
    without the row counts 0); bytes None when some rank's size is unknown. In phase order, then kind."""
    calls: dict[tuple[str, str], int] = {}
    nbytes: dict[tuple[str, str], int | None] = {}
    dur_us: dict[tuple[str, str], float] = {}
    for r in ranks:
        for c in r.phase_collectives:
            key = (c.phase, c.kind)
            calls[key] = calls.get(key, 0) + c.count
            before = nbytes.get(key, 0)
            nbytes[key] = None if before is None or c.nbytes is None else before + c.nbytes
            dur_us[key] = dur_us.get(key, 0.0) + c.dur_us
    order = {p: i for i, p in enumerate((*PHASES, OTHER_PHASE))}
    n = len(ranks) * steps
    return tuple(
        PhaseCollective(
            phase=phase,
            kind=kind,
            calls_per_step=calls[phase, kind] / n,
            bytes_per_step=None if (size := nbytes[phase, kind]) is None else size / n,
            ms_per_step=dur_us[phase, kind] / n / 1e3,
        )
        for phase, kind in sorted(calls, key=lambda k: (order.get(k[0], len(order)), k))
    )


def bytes_checks(mode: str, rows: tuple[PhaseCollective, ...], param_bytes: int | None, *, reshard: bool) -> tuple[BytesCheck, ...]:
    """The mode's expected_bytes rows (core/modes.py): bytes per step / parameter bytes, against 1 (0 for
    a resharded_bytes row without resharding). Empty without attribution or parameter bytes."""
    spec = MODES.get(mode)
    if not rows or not param_bytes or spec is None:
        return ()
    found = {(r.phase, r.kind): r for r in rows}
    checks = []
    for phase, kind in spec.expected_bytes:
        expected = 0.0 if (phase, kind) in spec.resharded_bytes and not reshard else 1.0
        row = found.get((phase, kind))
        ratio = 0.0 if row is None else None if row.bytes_per_step is None else row.bytes_per_step / param_bytes
        matches = None if ratio is None else expected <= ratio <= expected + BYTES_PADDING
        checks.append(BytesCheck(phase=phase, kind=kind, ratio=ratio, expected=expected, matches=matches))
    return tuple(checks)


def summarize_mode(mode: ModeMetrics, *, reshard: bool = True) -> ModeSummary:
    """`reshard`: the run's fsdp2 gathers parameters again in backward (config reshard_after_forward)."""
    comm = compute = overlap = exposed = pct = None
    slowest: int | None = None
    shares: tuple[tuple[int, float | None], ...] = ()
    phases: tuple[PhaseSummary, ...] = ()
    attributed: tuple[PhaseCollective, ...] = ()
    ranks = mode.analysis.ranks if mode.analysis else ()
    if mode.analysis and ranks:
        # Per profiled step, averaged over ranks: the analysis record's per-rank totals cover all profiled steps.
        steps = max(len(r.steps) for r in ranks) or 1
        phases = _phases(ranks, steps)
        attributed = _phase_collectives(ranks, steps)

        def per_step_ms(total_us: float) -> float:
            return total_us / len(ranks) / steps / 1e3

        comm = per_step_ms(sum(r.comm_us for r in ranks))
        compute = per_step_ms(sum(r.compute_us for r in ranks))
        overlap = per_step_ms(sum(r.overlap_us for r in ranks))
        exposed = per_step_ms(sum(r.exposed_comm_us for r in ranks))
        pct = 100 * overlap / comm if comm else None
        slowest = mode.analysis.slowest_rank  # decided by the analysis (absent from records before schema 2)
        shares = tuple((r.rank, _wait_share_pct(r)) for r in ranks)
    peaks = [m.peak_allocated_bytes for m in mode.memory if m.peak_allocated_bytes is not None]
    return ModeSummary(
        mode=mode.mode,
        num_ranks=len(mode.memory),
        comm_ms=comm,
        compute_ms=compute,
        overlap_ms=overlap,
        exposed_comm_ms=exposed,
        overlap_pct=pct,
        collectives=_collectives(ranks),
        optimizer_state_bytes=max((m.optimizer_state_bytes for m in mode.memory), default=0),
        param_bytes=max((m.param_bytes for m in mode.memory), default=0),
        grad_bytes=max((m.grad_bytes for m in mode.memory), default=0),
        peak_allocated_bytes=max(peaks) if peaks else None,
        slowest_rank=slowest,
        wait_share_pct=shares,
        phases=phases,
        phase_collectives=attributed,
        bytes_checks=bytes_checks(mode.mode, attributed, mode.model_param_bytes, reshard=reshard),
    )


def overlap_yield(metrics: RunMetrics, modes: dict[str, ModeSummary], spread: noise.NoiseSummary) -> OverlapYield | None:
    """split-blocking's median step time minus split's, also as a share of split-blocking's
    communication per step (definitions: `overlap_yield_ms`, `overlap_yield_pct`). None unless both
    modes were timed."""
    timed = [metrics.modes[n].step_time for n in (YIELD_MODE, YIELD_BASELINE) if n in metrics.modes]
    if len(timed) < 2 or not all(t.times_ms for t in timed):
        return None
    gain_ms = median_ms(timed[1]) - median_ms(timed[0])
    comm = modes[YIELD_BASELINE].comm_ms
    return OverlapYield(
        ms=gain_ms,
        pct_of_comm=100 * gain_ms / comm if comm else None,
        mode=YIELD_MODE,
        baseline=YIELD_BASELINE,
        within_noise=_within(timed[0], timed[1], spread.overlap_yield_ms, null=0.0),
    )


def interference(modes: dict[str, ModeSummary], metrics: RunMetrics) -> tuple[PhaseInterference, ...]:
    """Per phase: how much slower split's compute ran than split-blocking's, the same ops without
    communication beside them (definitions: `interference_pct`). Empty unless both modes have phases."""
    if YIELD_MODE not in modes or YIELD_BASELINE not in modes:
        return ()
    ours = {p.phase: p.compute_ms for p in modes[YIELD_MODE].phases}
    base = {p.phase: p.compute_ms for p in modes[YIELD_BASELINE].phases}
    if not ours or not base:
        return ()
    rows = []
    for name in [p for p in PHASES if p in ours or p in base] + sorted((set(ours) | set(base)) - set(PHASES)):
        x, b = ours.get(name), base.get(name)
        pct = 100 * (x / b - 1) if x and b else None
        low, high = (
            _interference_interval(metrics.modes[YIELD_MODE], metrics.modes[YIELD_BASELINE], name) if pct is not None else (None, None)
        )
        rows.append(PhaseInterference(phase=name, compute_ms=x, baseline_compute_ms=b, pct=pct, low_pct=low, high_pct=high))
    return tuple(rows)


def _interference_interval(mode: ModeMetrics, baseline: ModeMetrics, phase: str) -> tuple[float | None, float | None]:
    """The 95% interval of a phase's interference_pct: a percentile bootstrap of 100 · (mean / mean − 1)
    over each mode's (rank, profiled step) compute times of the phase, drawn independently (seeded)."""

    def samples(m: ModeMetrics) -> list[float]:
        ranks = m.analysis.ranks if m.analysis is not None else ()
        return [p.compute_us for r in ranks for st in r.steps for p in st.phases if p.phase == phase and p.compute_us is not None]

    x, b = samples(mode), samples(baseline)
    if len(x) < 2 or len(b) < 2:
        return None, None
    rng = random.Random(noise.SEED)
    draws = []
    for _ in range(noise.RESAMPLES):
        xs, bs = [x[rng.randrange(len(x))] for _ in x], [b[rng.randrange(len(b))] for _ in b]
        if sum(bs) > 0:
            draws.append(100 * (statistics.fmean(xs) / statistics.fmean(bs) - 1))
    if not draws:
        return None, None
    interval = noise.percentile_interval(sorted(draws))
    return interval.low, interval.high


def speedup_vs_first(metrics: RunMetrics, spread: noise.NoiseSummary) -> tuple[RelativeSpeedup, ...]:
    """Every mode against the run's first: first median step time / this mode's (definitions: `speedup_vs_first`)."""
    names = list(metrics.modes)
    first = metrics.modes[names[0]].step_time
    rows = []
    for name in names:
        this = metrics.modes[name].step_time
        # A step of 0 ms (a trace's step that launched no kernel has an empty device window) has no ratio.
        timed = bool(first.times_ms and this.times_ms) and median_ms(this) > 0
        rows.append(
            RelativeSpeedup(
                mode=name,
                baseline=names[0],
                speedup=median_ms(first) / median_ms(this) if timed else None,
                within_noise=_within(first, this, spread.speedup_vs_first.get(name)) if timed and name != names[0] else None,
            )
        )
    return tuple(rows)


def _headline(metrics: RunMetrics, modes: dict[str, ModeSummary], main: str, gain: OverlapYield | None) -> dict[str, float | None]:
    """None where the run does not have the number (e.g. speedup in a one-mode run)."""
    checks = metrics.all_checks()
    step = {name: m.step_time.median_ms for name, m in metrics.modes.items()}
    x = modes[main]
    return {
        "speedup": metrics.speedup.measured if metrics.speedup else None,
        "predicted_speedup": metrics.speedup.predicted if metrics.speedup else None,
        **{spec.step_headline: step.get(name) for name, spec in MODES.items()},
        "overlap_yield_ms": gain.ms if gain else None,
        "overlap_yield_pct": gain.pct_of_comm if gain else None,
        "overlap_pct": x.overlap_pct,
        "exposed_comm_ms": x.exposed_comm_ms,
        "comm_ms": x.comm_ms,
        "compute_ms": x.compute_ms,
        "optimizer_state_mib": x.optimizer_state_bytes / MIB,
        # None when some compared value was not finite (then failed_checks counts that check).
        "max_error": _max_error(checks),
        "failed_checks": float(sum(not c.passed for c in checks)),
    }


def _max_error(checks: list[CheckResult]) -> float | None:
    """The largest max_abs_err; None without checks or when one is not finite (None)."""
    errors = [c.max_abs_err for c in checks if c.max_abs_err is not None]
    return max(errors) if errors and len(errors) == len(checks) else None


def summarize(metrics: RunMetrics) -> RunSummary:
    names = list(metrics.modes)  # the run's order: the first mode is the reference
    reshard = metrics.config.reshard_after_forward != "false"
    modes = {name: summarize_mode(metrics.modes[name], reshard=reshard) for name in names}
    main = SPEEDUP_MODE if SPEEDUP_MODE in modes else names[0]
    timed = [
        metrics.modes[n].step_time for n in (SPEEDUP_BASELINE, SPEEDUP_MODE) if n in metrics.modes and metrics.modes[n].step_time.times_ms
    ]
    spread = noise_summary(metrics)
    same = _within(timed[0], timed[1], spread.speedup) if len(timed) == 2 else None
    gain = overlap_yield(metrics, modes, spread)
    return RunSummary(
        modes=modes,
        headline_mode=main,
        headline=_headline(metrics, modes, main, gain),
        within_noise=same,
        overlap_yield=gain,
        interference=interference(modes, metrics),
        speedup_vs_first=speedup_vs_first(metrics, spread),
        noise=spread,
    )


def with_summary(metrics: RunMetrics) -> RunMetrics:
    return msgspec.structs.replace(metrics, summary=summarize(metrics))
