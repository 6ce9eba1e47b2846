"""Interference, typed: how much longer compute runs while communication is in flight than alone
(definitions: `interference_slowdown_pct`, docs/metrics.md "Interference"). The analysis measures it per rank
and phase from the same operators seen both ways (analysis/rank/interference.py); `analyze --json` has it
at the top level, each mode's analysis in metrics.json beside its ranks.
"""

from __future__ import annotations

import msgspec

MIN_PAIRS = 10
"""Fewer pairs than this give no figure (slowdown_pct None): say so, and fall back."""
MIN_BESIDE_US = 1000.0
"""Nor does less compute beside communication than this (µs, at its alone time: Σ n_k · mean(alone_k), so a
call stalled beside communication adds nothing to it): a DDP bucket's finalize views 29 calls of 1 µs
each, and one call descheduled for a microsecond decides such a figure."""


class InterferenceEstimate(msgspec.Struct, frozen=True, kw_only=True):
    """One interference figure and its 95% interval, % (definitions: `interference_slowdown_pct`)."""

    slowdown_pct: float | None
    """None with fewer than MIN_PAIRS pairs, or under MIN_BESIDE_US of compute beside communication."""
    low_pct: float | None
    high_pct: float | None
    pairs: int
    """Operator calls seen with communication in flight whose operator was also seen alone."""


class RankInterference(InterferenceEstimate, frozen=True, kw_only=True):
    """One rank over its profiled steps, and per phase ("other": outside every phase window)."""

    phases: dict[str, InterferenceEstimate] = {}


class Interference(InterferenceEstimate, frozen=True, kw_only=True):
    """Over every rank and phase, weighted by the compute that ran beside communication; and per rank."""

    ranks: dict[str, RankInterference] = {}
