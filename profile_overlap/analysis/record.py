"""TraceAnalysis -> JSON: the `analyze --json` record (`to_json`, also each mode's `analysis` in
metrics.json) and timeline.json (`timeline_record`). Keys only ever get added (other tools read them)."""

from __future__ import annotations

from profile_overlap.analysis.cross_rank import TraceAnalysis

TIMELINE_SCHEMA = "spans are [step, start_us, end_us, kind (comm|compute), label]; phases are [step, phase, start_us, end_us]"


def timeline_record(analyses: dict[str, TraceAnalysis | None]) -> dict:
    """timeline.json: per mode and rank, the profiled steps' windows and their compute and
    communication spans (merged at display resolution by the analysis), for the figures."""
    record = {}
    for mode, result in analyses.items():
        if result is None:
            continue
        record[mode] = {
            "ranks": [
                {
                    "rank": r.rank,
                    "steps": [{"step": s.step, "start_us": s.start_us, "step_us": s.step_us} for s in r.steps],
                    "spans": [[sp.step, round(sp.start_us, 3), round(sp.end_us, 3), sp.kind, sp.label] for sp in r.timeline],
                    "phases": [[step, phase, round(a, 3), round(b, 3)] for step, phase, a, b in r.phase_windows],
                }
                for r in result.ranks
            ],
        }
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
        }
        for p in phases
    ]


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
            }
        )
    return {"ranks": ranks, "world_size": analysis.world_size, "slowest_rank": analysis.slowest_rank, "source": analysis.source}
