"""The integrity checks of a record, typed: each mode's `analysis.integrity` in metrics.json and the
`integrity` of an `analyze --json` record. The checks themselves are computed once, by the analysis
(analysis/integrity/world.py); renderers read these fields."""

from __future__ import annotations

from typing import Any

import msgspec


class IntegrityCheck(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    status: str
    """ok, warning or error."""
    detail: str
    """One line: what was found."""
    meaning: str = ""
    """One line: what it means for the numbers."""
    affects: tuple[str, ...] = ()
    """The numbers that rest on this check."""
    figures: dict[str, Any] = {}
    """The check's own numbers, as JSON has them (string keys)."""


class IntegrityRecord(msgspec.Struct, frozen=True, kw_only=True):
    checks: tuple[IntegrityCheck, ...] = ()
    clock_offsets_us: dict[str, float | None] = {}
    """Per rank (a string key), its clock offset against the reference rank; None where unknown."""
    clock_uncertainty_us: dict[str, float | None] = {}
    clock_moved: tuple[int, ...] = ()
    """The ranks whose times the cross-rank views move by their offset (larger than its uncertainty)."""

    def with_status(self, status: str) -> tuple[IntegrityCheck, ...]:
        return tuple(c for c in self.checks if c.status == status)

    @property
    def failed(self) -> tuple[IntegrityCheck, ...]:
        """The checks that are not ok, errors first."""
        return self.with_status("error") + self.with_status("warning")
