"""Interference as text: one figure with its interval and pairs, and the one line `analyze` prints
(definitions: `interference_slowdown_pct`). Reads the record; computes nothing."""

from __future__ import annotations

from profile_overlap.record.interference import MIN_BESIDE_US, MIN_PAIRS, Interference, InterferenceEstimate


def figure(e: InterferenceEstimate) -> str:
    """ "+12.3% [+10.1, +14.0] (48 pairs)", "too few pairs (3 of the 10 needed)", or "too little compute
    beside communication (29 pairs, under the 1 ms needed)"."""
    if e.slowdown_pct is None and e.pairs < MIN_PAIRS:
        return f"too few pairs ({e.pairs} of the {MIN_PAIRS} needed)"
    if e.slowdown_pct is None:
        return f"too little compute beside communication ({e.pairs} pairs, under the {MIN_BESIDE_US / 1e3:g} ms needed)"
    interval = f" [{e.low_pct:+.1f}, {e.high_pct:+.1f}]" if e.low_pct is not None and e.high_pct is not None else ""
    return f"{e.slowdown_pct:+.1f}%{interval} ({e.pairs} pairs)"


def median_rank(x: Interference) -> dict[str, InterferenceEstimate]:
    """Per phase with a figure on some rank: the median rank's estimate (the lower middle one)."""
    phases: dict[str, list[InterferenceEstimate]] = {}
    for r in x.ranks.values():
        for name, e in r.phases.items():
            if e.slowdown_pct is not None:
                phases.setdefault(name, []).append(e)
    return {name: sorted(v, key=lambda e: e.slowdown_pct or 0.0)[(len(v) - 1) // 2] for name, v in phases.items()}


def line(x: Interference | None) -> str | None:
    """One line: the figure over every rank and phase, then each phase's median over the ranks that have one."""
    if x is None:
        return None
    text = f"Interference (compute with communication in flight vs alone, same operators): {figure(x)}"
    phases = median_rank(x)
    if phases:
        text += "; per phase (median rank): " + ", ".join(f"{name} {e.slowdown_pct:+.1f}%" for name, e in phases.items())
    if x.slowdown_pct is None:
        text += "; with split and split-blocking in one run (--mode compare), the run measures it by mode instead"
    return text
