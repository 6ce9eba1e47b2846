"""The integrity checks of a record, typed: read back from an `analyze --json` record's
`integrity` key (each mode's `analysis` in metrics.json). Renderers read these, never the raw
dicts; the checks themselves are computed once, by the analysis (analysis/integrity.py)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class IntegrityCheck:
    name: str
    status: str
    """ok, warning or error."""
    detail: str
    """One line: what was found."""
    meaning: str = ""
    """One line: what it means for the numbers."""
    affects: tuple[str, ...] = ()
    """The numbers that rest on this check."""
    figures: dict = field(default_factory=dict)


@dataclass(frozen=True)
class IntegrityRecord:
    checks: tuple[IntegrityCheck, ...]
    clock_offsets_us: dict[str, float | None]
    clock_uncertainty_us: dict[str, float | None]
    clock_moved: tuple[int, ...] = ()
    """The ranks whose times the cross-rank views move by their offset (larger than its uncertainty)."""

    def with_status(self, status: str) -> tuple[IntegrityCheck, ...]:
        return tuple(c for c in self.checks if c.status == status)

    @property
    def failed(self) -> tuple[IntegrityCheck, ...]:
        """The checks that are not ok, errors first."""
        return self.with_status("error") + self.with_status("warning")


def integrity_of(analysis: dict | None) -> IntegrityRecord | None:
    """The integrity of an `analyze --json` record; None for records written before it existed."""
    data = (analysis or {}).get("integrity")
    if not data:
        return None
    return IntegrityRecord(
        checks=tuple(
            IntegrityCheck(
                name=c["name"],
                status=c["status"],
                detail=c["detail"],
                meaning=c.get("meaning", ""),
                affects=tuple(c.get("affects", ())),
                figures=c.get("figures", {}),
            )
            for c in data.get("checks", ())
        ),
        clock_offsets_us=dict(data.get("clock_offsets_us", {})),
        clock_uncertainty_us=dict(data.get("clock_uncertainty_us", {})),
        clock_moved=tuple(data.get("clock_moved", ())),
    )
