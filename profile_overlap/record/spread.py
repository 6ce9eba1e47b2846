"""How the per-rank numbers spread over the ranks (`analyze --json`'s "spread"; analysis/world/spread.py
builds it). Definitions: docs/metrics.md "Over ranks"."""

from __future__ import annotations

import msgspec

SHOWN = 3
"""Worst and best ranks named per number."""


class Spread(msgspec.Struct, frozen=True, kw_only=True):
    """One per-rank number over the ranks that have it."""

    metric: str
    """The RankRecord field (step_us: the rank's mean profiled step)."""
    worse: str
    """"high" or "low": which end is worse (e.g. more exposed time, less overlap)."""
    ranks: int
    """Ranks with a value."""
    min: float
    p10: float
    median: float
    p90: float
    max: float
    worst: tuple[int, ...]
    """The SHOWN ranks at the worse end, worst first (the lower rank on a tie); empty when all ranks are equal."""
    best: tuple[int, ...]
    outliers: tuple[int, ...]
    """Ranks with |x − median| > max(3 · 1.4826 · MAD, 5% of |median|), in rank order."""
