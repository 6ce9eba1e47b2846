"""Numbers derived from the metrics record, computed in one place for every renderer: per-mode
summaries (overlap per profiled step, collectives, memory), the headline metrics, the slowest rank,
and whether two step-time samples are within run-to-run noise."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from profile_overlap.record.metrics import ModeMetrics, RunMetrics, StepTimes


@dataclass(frozen=True)
class StepOverlap:
    """One row of the summary table, as numbers: profiled times are per profiled step, rank mean."""

    mode: str
    median_ms: float | None
    p10_ms: float | None
    p90_ms: float | None
    comm_ms: float | None
    compute_ms: float | None
    overlap_ms: float | None
    exposed_comm_ms: float | None
    overlap_pct: float | None
    opt_state_mb: float


def step_overlaps(metrics: RunMetrics) -> list[StepOverlap]:
    out = []
    for name, mode in metrics.modes.items():
        st = mode.step_time
        comm = compute = overlap = exposed = pct = None
        if mode.analysis:
            # Per profiled step, averaged over ranks: the analysis record's per-rank totals cover all profiled steps.
            ranks = mode.analysis["ranks"]
            steps = max(len(r["steps"]) for r in ranks) or 1
            comm, compute, overlap, exposed = (
                sum(r[k] for r in ranks) / len(ranks) / steps / 1e3 for k in ("comm_us", "compute_us", "overlap_us", "exposed_comm_us")
            )
            pct = 100 * overlap / comm if comm else None
        out.append(
            StepOverlap(
                mode=name,
                median_ms=st.median_ms,
                p10_ms=st.p10_ms,
                p90_ms=st.p90_ms,
                comm_ms=comm,
                compute_ms=compute,
                overlap_ms=overlap,
                exposed_comm_ms=exposed,
                overlap_pct=pct,
                opt_state_mb=max(m.optimizer_state_bytes for m in mode.memory) / 2**20,
            )
        )
    return out


MIB = 2**20
MODE_ORDER = ("sequential", "split")


@dataclass(frozen=True)
class Spread:
    mean: float
    min: float
    max: float


@dataclass(frozen=True)
class CollectiveRow:
    kind: str
    size_per_call: float | None
    calls: tuple[int, int]
    """min and max over ranks (equal in a healthy run)."""
    time_per_call_us: Spread
    algbw_gbps: Spread | None
    busbw_gbps: Spread | None


@dataclass(frozen=True)
class ModeSummary:
    """One mode's numbers as the report and console show them (definitions: "Per mode")."""

    mode: str
    step_time: StepTimes
    num_ranks: int
    comm_ms: float | None
    compute_ms: float | None
    overlap_ms: float | None
    exposed_comm_ms: float | None
    overlap_pct: float | None
    collectives: tuple[CollectiveRow, ...]
    optimizer_state_bytes: int
    param_bytes: int
    grad_bytes: int
    peak_allocated_bytes: int | None


def _spread(values: list[float]) -> Spread:
    return Spread(mean=statistics.fmean(values), min=min(values), max=max(values))


def summarize(mode: ModeMetrics, *, overlap: StepOverlap) -> ModeSummary:
    """The report's view of one mode: the console summary's overlap numbers (one computation for
    both), plus the collective and memory columns from the record."""
    rows: list[CollectiveRow] = []
    ranks = mode.analysis["ranks"] if mode.analysis else []
    for kind in sorted({c["kind"] for r in ranks for c in r["collectives"]}):
        per_rank = [c for r in ranks for c in r["collectives"] if c["kind"] == kind]
        sized = [c for c in per_rank if c["nbytes"]]
        alg = [c["algbw_gbps"] for c in per_rank if c["algbw_gbps"] is not None]
        bus = [c["busbw_gbps"] for c in per_rank if c["busbw_gbps"] is not None]
        rows.append(
            CollectiveRow(
                kind=kind,
                size_per_call=statistics.fmean(c["nbytes"] / c["count"] for c in sized) if sized else None,
                calls=(min(c["count"] for c in per_rank), max(c["count"] for c in per_rank)),
                time_per_call_us=_spread([c["dur_us"] / c["count"] for c in per_rank]),
                algbw_gbps=_spread(alg) if alg else None,
                busbw_gbps=_spread(bus) if bus else None,
            )
        )
    peaks = [m.peak_allocated_bytes for m in mode.memory if m.peak_allocated_bytes is not None]
    return ModeSummary(
        mode=mode.mode,
        step_time=mode.step_time,
        num_ranks=len(mode.memory),
        comm_ms=overlap.comm_ms,
        compute_ms=overlap.compute_ms,
        overlap_ms=overlap.overlap_ms,
        exposed_comm_ms=overlap.exposed_comm_ms,
        overlap_pct=overlap.overlap_pct,
        collectives=tuple(rows),
        optimizer_state_bytes=max(m.optimizer_state_bytes for m in mode.memory),
        param_bytes=max(m.param_bytes for m in mode.memory),
        grad_bytes=max(m.grad_bytes for m in mode.memory),
        peak_allocated_bytes=max(peaks) if peaks else None,
    )


def summaries(metrics: RunMetrics) -> dict[str, ModeSummary]:
    names = [m for m in MODE_ORDER if m in metrics.modes] + sorted(m for m in metrics.modes if m not in MODE_ORDER)
    base = {x.mode: x for x in step_overlaps(metrics)}
    return {name: summarize(metrics.modes[name], overlap=base[name]) for name in names}


def headline_mode(metrics: RunMetrics) -> str:
    """The mode whose overlap the headline reports: split, else the only mode."""
    return "split" if "split" in metrics.modes else next(iter(metrics.modes))


def within_noise(a: StepTimes, b: StepTimes) -> bool:
    """Each median lies inside the other's p10-p90 range (definitions: `within_noise`)."""
    return a.p10_ms <= b.median_ms <= a.p90_ms and b.p10_ms <= a.median_ms <= b.p90_ms


HEADLINE_NAMES = (
    "speedup",
    "predicted_speedup",
    "sequential_step_ms",
    "split_step_ms",
    "overlap_pct",
    "exposed_comm_ms",
    "comm_ms",
    "compute_ms",
    "optimizer_state_mib",
    "max_error",
    "failed_checks",
)


def headline(metrics: RunMetrics) -> dict[str, float | None]:
    """The numbers `--fail-if` and `--compare` work on (definitions: "Headline names"). None
    where the run does not have the number (e.g. speedup in a one-mode run)."""
    s = summaries(metrics)
    main = s[headline_mode(metrics)]
    checks = metrics.all_checks()
    return {
        "speedup": metrics.speedup.measured if metrics.speedup else None,
        "predicted_speedup": metrics.speedup.predicted if metrics.speedup else None,
        "sequential_step_ms": s["sequential"].step_time.median_ms if "sequential" in s else None,
        "split_step_ms": s["split"].step_time.median_ms if "split" in s else None,
        "overlap_pct": main.overlap_pct,
        "exposed_comm_ms": main.exposed_comm_ms,
        "comm_ms": main.comm_ms,
        "compute_ms": main.compute_ms,
        "optimizer_state_mib": main.optimizer_state_bytes / MIB,
        # None when some compared value was not finite (then failed_checks counts that check).
        "max_error": None if any(c.max_abs_err is None for c in checks) else max((c.max_abs_err for c in checks), default=None),
        "failed_checks": float(sum(not c.passed for c in checks)),
    }


def slowest_rank(ranks: list[dict]) -> int | None:
    """The rank the others wait for: the least wait_us (definitions: `slowest_rank`). The record
    keeps wait_us per rank but not the analysis's slowest_rank, so it is looked up here."""
    waited = [r for r in ranks if r.get("wait_us") is not None]
    if len(waited) < 2:
        return None
    return min(waited, key=lambda r: r["wait_us"])["rank"]
