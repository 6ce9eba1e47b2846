"""The numbers derived from a run's measurements, computed once, when the record is built.

`with_summary(metrics)` fills `RunMetrics.summary` (per-mode overlap per profiled step,
collectives over ranks, memory, the slowest rank; the headline numbers; whether sequential and
split are within run-to-run noise) and `speedup` computes `RunMetrics.speedup`. The harness calls
both before writing metrics.json; `load_metrics` completes a record written before summaries
existed. Renderers (console, reports, TensorBoard, the Overlap tab, sweeps) only read the result.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from pathlib import Path

from profile_overlap.record.metrics import (
    CollectiveRow,
    ModeMetrics,
    ModeSummary,
    RunMetrics,
    RunSummary,
    Speedup,
    Spread,
    StepTimes,
)

MIB = 2**20
MODE_ORDER = ("sequential", "split")
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


def within_noise(a: StepTimes, b: StepTimes) -> bool:
    """Each median lies inside the other's p10-p90 range (definitions: `within_noise`)."""
    return a.p10_ms <= b.median_ms <= a.p90_ms and b.p10_ms <= a.median_ms <= b.p90_ms


def speedup(modes: dict[str, ModeMetrics]) -> Speedup | None:
    """sequential / split median step time, and the ideal from the sequential mode's comm and
    compute (definitions: `speedup`, `predicted_speedup`). None unless both modes were timed."""
    if set(modes) != {"sequential", "split"} or not all(m.step_time.times_ms for m in modes.values()):
        return None
    seq, split = modes["sequential"], modes["split"]
    measured = seq.step_time.median_ms / split.step_time.median_ms
    predicted = None
    if seq.analysis:
        ranks = seq.analysis["ranks"]
        comm = sum(r["comm_us"] for r in ranks) / len(ranks)
        compute = sum(r["compute_us"] for r in ranks) / len(ranks)
        if max(comm, compute) > 0:
            predicted = (comm + compute) / max(comm, compute)
    return Speedup(measured=measured, predicted=predicted)


def _spread(values: list[float]) -> Spread:
    return Spread(mean=statistics.fmean(values), min=min(values), max=max(values))


def _collectives(ranks: list[dict]) -> tuple[CollectiveRow, ...]:
    rows = []
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
    return tuple(rows)


def _wait_share_pct(rank: dict) -> float | None:
    """definitions: `wait_share_pct`."""
    if rank.get("wait_us") is None:
        return None
    total = rank["wait_us"] + rank["transfer_us"]
    return 100 * rank["wait_us"] / total if total else None


def summarize_mode(mode: ModeMetrics) -> ModeSummary:
    comm = compute = overlap = exposed = pct = slowest = None
    shares: tuple = ()
    ranks = mode.analysis["ranks"] if mode.analysis else []
    if ranks:
        # Per profiled step, averaged over ranks: the analysis record's per-rank totals cover all profiled steps.
        steps = max(len(r["steps"]) for r in ranks) or 1
        comm, compute, overlap, exposed = (
            sum(r[k] for r in ranks) / len(ranks) / steps / 1e3 for k in ("comm_us", "compute_us", "overlap_us", "exposed_comm_us")
        )
        pct = 100 * overlap / comm if comm else None
        slowest = mode.analysis.get("slowest_rank")  # decided by the analysis (absent from records before schema 2)
        shares = tuple((r["rank"], _wait_share_pct(r)) for r in ranks)
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
    )


def _headline(metrics: RunMetrics, modes: dict[str, ModeSummary], main: str) -> dict[str, float | None]:
    """None where the run does not have the number (e.g. speedup in a one-mode run)."""
    checks = metrics.all_checks()
    step = {name: m.step_time.median_ms for name, m in metrics.modes.items()}
    x = modes[main]
    return {
        "speedup": metrics.speedup.measured if metrics.speedup else None,
        "predicted_speedup": metrics.speedup.predicted if metrics.speedup else None,
        "sequential_step_ms": step.get("sequential"),
        "split_step_ms": step.get("split"),
        "overlap_pct": x.overlap_pct,
        "exposed_comm_ms": x.exposed_comm_ms,
        "comm_ms": x.comm_ms,
        "compute_ms": x.compute_ms,
        "optimizer_state_mib": x.optimizer_state_bytes / MIB,
        # None when some compared value was not finite (then failed_checks counts that check).
        "max_error": None if any(c.max_abs_err is None for c in checks) else max((c.max_abs_err for c in checks), default=None),
        "failed_checks": float(sum(not c.passed for c in checks)),
    }


def summarize(metrics: RunMetrics) -> RunSummary:
    names = [m for m in MODE_ORDER if m in metrics.modes] + sorted(m for m in metrics.modes if m not in MODE_ORDER)
    modes = {name: summarize_mode(metrics.modes[name]) for name in names}
    main = "split" if "split" in modes else names[0]
    timed = [metrics.modes[n].step_time for n in ("sequential", "split") if n in metrics.modes and metrics.modes[n].step_time.times_ms]
    noise = within_noise(*timed) if len(timed) == 2 else None
    return RunSummary(modes=modes, headline_mode=main, headline=_headline(metrics, modes, main), within_noise=noise)


def with_summary(metrics: RunMetrics) -> RunMetrics:
    return dataclasses.replace(metrics, summary=summarize(metrics))


def load_metrics(path: Path) -> RunMetrics:
    """metrics.json read back; a record from before summaries existed gets its summary here."""
    metrics = RunMetrics.from_json(json.loads(Path(path).read_text()))
    return metrics if metrics.summary else with_summary(metrics)
