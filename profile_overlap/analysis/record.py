"""TraceAnalysis -> JSON: the `analyze --json` record (`to_json`, also each mode's `analysis` in
metrics.json) and timeline.json (`timeline_record`). Keys only ever get added (other tools read them)."""

from __future__ import annotations

import math

from profile_overlap.analysis.cross_rank import TraceAnalysis
from profile_overlap.analysis.exposed_timeline import rank_exposure
from profile_overlap.record.exposed import to_builtins

TIMELINE_SCHEMA = (
    "spans are [step, start_us, end_us, kind (comm|compute), label]; phases are [step, phase, start_us, end_us]; "
    "wait and transfer are [start_us, end_us] of exposed communication; critical is [start_us, end_us, piece] of the "
    "critical path on that rank; calls are [kind, phase, call, step, start_us, end_us] of the top calls; "
    "times are on the reference rank's clock where a rank is aligned (its own time - clock_offset_us), else on its own"
)


def timeline_record(analyses: dict[str, TraceAnalysis | None]) -> dict:
    """timeline.json: per mode and rank, the profiled steps' windows and their compute and
    communication spans (merged at display resolution by the analysis), for the figures. Each
    aligned rank's times are on the reference rank's clock (clocks.py), so ranks compare in time."""
    record = {}
    for mode, result in analyses.items():
        if result is None:
            continue
        clocks = result.clocks
        exposure = rank_exposure(result)
        ranks = []
        for r in result.ranks:
            off = clocks.offset(r.rank)
            unc = clocks.uncertainty_us.get(r.rank)
            ranks.append(
                {
                    "rank": r.rank,
                    "aligned": r.rank in clocks.offsets_us,
                    "clock_offset_us": round(off, 3),
                    "clock_uncertainty_us": None if unc is None or math.isinf(unc) else round(unc, 3),
                    "steps": [{"step": s.step, "start_us": round(s.start_us - off, 3), "step_us": s.step_us} for s in r.steps],
                    "spans": [[sp.step, round(sp.start_us - off, 3), round(sp.end_us - off, 3), sp.kind, sp.label] for sp in r.timeline],
                    "phases": [[step, phase, round(a - off, 3), round(b - off, 3)] for step, phase, a, b in r.phase_windows],
                    **exposure.get(r.rank, {}),
                }
            )
        record[mode] = {"reference_rank": clocks.reference_rank, "ranks": ranks}
    return {"schema": TIMELINE_SCHEMA, "modes": record}


def _num(x: float | None, digits: int = 3) -> float | None:
    return None if x is None else round(float(x), digits)


def _phases_json(phases) -> list[dict]:
    return [
        {
            "phase": p.phase,
            "window_us": _num(p.window_us),
            "comm_us": _num(p.comm_us),
            "compute_us": _num(p.compute_us),
            "overlap_us": _num(p.overlap_us),
            "exposed_comm_us": _num(p.exposed_comm_us),
            "sources": list(p.sources),
        }
        for p in phases
    ]


def _plain(x):
    """Figures as JSON has them: string keys (ranks), lists for tuples."""
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x


def _finite(x: float | None) -> float | None:
    """A clock figure for strict JSON: None where it is unknown (an infinite uncertainty)."""
    return None if x is None or not math.isfinite(x) else _num(x)


def integrity_json(analysis: TraceAnalysis) -> dict:
    """The record's `integrity`: every check, and each rank's clock offset (µs) against the
    reference rank with its uncertainty (ranks whose offset is unknown are absent)."""
    clocks = analysis.clocks
    return {
        "checks": [
            {
                "name": c.name,
                "status": c.status,
                "detail": c.detail,
                "meaning": c.meaning,
                "affects": list(c.affects),
                "figures": _plain(c.figures),
            }
            for c in analysis.integrity.checks
        ],
        "clock_offsets_us": {str(rank): _finite(v) for rank, v in sorted(clocks.offsets_us.items())},
        "clock_uncertainty_us": {str(rank): _finite(v) for rank, v in sorted(clocks.uncertainty_us.items())},
        "clock_moved": [rank for rank in sorted(clocks.offsets_us) if clocks.applies(rank)],
    }


def to_json(analysis: TraceAnalysis) -> dict:
    """The `analyze --json` record (schema in the README, "Output")."""
    waits = {w.rank: w for w in analysis.waits}
    ranks = []
    for r in analysis.ranks:
        w = waits.get(r.rank)
        ranks.append(
            {
                "rank": r.rank,
                "device": r.device,
                "comm_us": _num(r.comm_us),
                "compute_us": _num(r.compute_us),
                "overlap_us": _num(r.overlap_us),
                "exposed_comm_us": _num(r.exposed_comm_us),
                "overlap_pct": _num(r.overlap_pct),
                "steps": [
                    {
                        "step": s.step,
                        "step_us": _num(s.step_us),
                        "comm_us": _num(s.comm_us),
                        "compute_us": _num(s.compute_us),
                        "overlap_us": _num(s.overlap_us),
                        "exposed_comm_us": _num(s.exposed_comm_us),
                        "overlap_pct": _num(s.overlap_pct),
                        "phases": _phases_json(s.phases),
                    }
                    for s in r.steps
                ],
                "phases": _phases_json(r.phases),
                "phase_collectives": [
                    {"phase": c.phase, "kind": c.kind, "count": c.count, "nbytes": c.nbytes, "dur_us": _num(c.dur_us)}
                    for c in r.phase_collectives
                ],
                "collectives": [
                    {
                        "kind": c.kind,
                        "count": c.count,
                        "nbytes": c.nbytes,
                        "dur_us": _num(c.dur_us),
                        "algbw_gbps": _num(c.algbw_gbps, 4),
                        "busbw_gbps": _num(c.busbw_gbps, 4),
                    }
                    for c in r.collectives
                ],
                "wait_us": _num(w.wait_us) if w else None,
                "transfer_us": _num(w.transfer_us) if w else None,
                "last_arrivals": w.last_arrivals if w else None,
                "last_arrival_pct": _num(w.last_arrival_pct) if w else None,
            }
        )
    return {
        "ranks": ranks,
        "world_size": analysis.world_size,
        "slowest_rank": analysis.slowest_rank,
        "source": analysis.source,
        "integrity": integrity_json(analysis),
        "exposed": to_builtins(analysis.exposed) if analysis.exposed is not None else None,
    }
