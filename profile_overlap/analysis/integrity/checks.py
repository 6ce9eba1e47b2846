"""The integrity checks' building blocks: a check (the record's IntegrityCheck, new_check) and the set of them, their
statuses, the numbers a check can affect, and the thresholds (defined in docs/metrics.md "Integrity checks").
The checks themselves: integrity.py and integrity_events.py."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

import msgspec

from profile_overlap.record.integrity import IntegrityCheck

OK, WARNING, ERROR = "ok", "warning", "error"
STATUSES = (OK, WARNING, ERROR)

OVERLAP = "overlap numbers"
"""comm, compute, overlap and exposed communication, overlap %, per rank and per phase."""
STEPS = "per-step numbers"
PHASE = "per-phase numbers and communication by phase"
WAIT = "wait/transfer and the slowest rank"
BANDWIDTH = "collective bytes and bandwidth"

OUTSIDE_WARNING_PCT = 5.0
"""Share of a rank's counted communication or compute outside every step: a warning above it..."""
OUTSIDE_ERROR_PCT = 50.0
"""...an error from here (the totals then describe mostly something else than the steps)."""
UNCLASSIFIED_WARNING_PCT = 1.0
"""Unclassified time as a share of the rank's compute time above which it is a warning."""
CUT_SHORT_RATIO = 0.5
"""A last step shorter than this fraction of every other step of its rank looks cut short."""
LISTED = 5
"""Items named in a check's one-line detail (the figures hold them all)."""
MAX_WORLD_SIZE = 1 << 20
"""The largest world size a trace's distributedInfo is believed to declare (1,048,576 ranks, several
times the largest jobs run); above it (or below 1) ranks.world_size is an error and the world is the ranks found."""


def credible_world_size(declared: int | None) -> TypeGuard[int]:
    return declared is not None and 1 <= declared <= MAX_WORLD_SIZE


def missing_ranges(found: Sequence[int], world: int) -> list[tuple[int, int]]:
    """The ranks of range(world) not in `found`, as (first, last) runs: memory grows with the ranks
    found, not with the world size."""
    runs, start = [], 0
    for r in sorted({r for r in found if 0 <= r < world}):
        if r > start:
            runs.append((start, r - 1))
        start = r + 1
    if start < world:
        runs.append((start, world - 1))
    return runs


def new_check(
    name: str, status: str, detail: str, figures: Mapping[str, Any] | None = None, meaning: str = "", affects: tuple[str, ...] = ()
) -> IntegrityCheck:
    """One integrity check, as the record holds it: its status, a one-line detail, the figures it
    rests on (as JSON has them: string keys, lists), what it means for the numbers and which
    numbers rest on it."""
    return IntegrityCheck(name=name, status=status, detail=detail, meaning=meaning, affects=affects, figures=_plain(dict(figures or {})))


def _plain(x: Any) -> Any:
    """Figures as JSON has them: string keys (ranks), lists for tuples."""
    # (a call only for what is a container: figures hold long lists of numbers, per rank)
    if isinstance(x, dict):
        return {str(k): _plain(v) if isinstance(v, _NESTED) else v for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) if isinstance(v, _NESTED) else v for v in x]
    return x


_NESTED = (dict, list, tuple)


@dataclass(frozen=True)
class Integrity:
    checks: tuple[IntegrityCheck, ...]

    def with_status(self, status: str) -> tuple[IntegrityCheck, ...]:
        return tuple(c for c in self.checks if c.status == status)

    @property
    def errors(self) -> tuple[IntegrityCheck, ...]:
        return self.with_status(ERROR)


def listed(items: Sequence[object], n: int = LISTED) -> str:
    texts = [str(x) for x in items]
    return ", ".join(texts[:n]) + (f" and {len(texts) - n} more" if len(texts) > n else "")


def rank_list(ranks: Sequence[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + listed(ranks, 8)


def status_of(error: bool, warning: bool) -> str:
    return ERROR if error else WARNING if warning else OK


def with_meaning(check: IntegrityCheck, meaning: str, *affects: str) -> IntegrityCheck:
    return msgspec.structs.replace(check, meaning=meaning, affects=affects)
