"""What one collective call costs, as `advise` charges it when a change alters the number of calls
(definitions: `advice_call_cost`): a latency per call and a time per byte, fitted to the run's own
calls of that kind, or, when they all have one size, the two readings that size cannot tell apart."""

from __future__ import annotations

import msgspec

FIT = "fit"
"""The run's calls have sizes at least 10% apart: the robust line through them."""
BANDWIDTH = "one size: all bandwidth"
LATENCY = "one size: all latency"
"""One size: the call's time read as all per-byte (latency 0) or all per-call (no per-byte time)."""


class CallCost(msgspec.Struct, frozen=True, kw_only=True):
    """µs of one call of `kind` of S bytes: latency_us + us_per_mib · S / 2^20."""

    kind: str
    calls: int
    """The run's calls the fit rests on."""
    latency_us: float
    us_per_mib: float
    source: str
    """FIT, BANDWIDTH or LATENCY."""

    def us(self, nbytes: int) -> float:
        return self.latency_us + self.us_per_mib * nbytes / 2**20
