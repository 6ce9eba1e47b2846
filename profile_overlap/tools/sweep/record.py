"""sweep.json, typed: what tools/sweep/ writes and tools/sweep/report.py reads by attribute.

The file keeps its layout: each point holds its fixed keys (name, knobs, workload, passed, headline,
within_noise) and, beside them, one object per mode under the mode's name. So a point's modes are
read once, here, into `SweepPoint.modes`, and written back beside the fixed keys."""

from __future__ import annotations

from typing import Any

import msgspec

FORMER_MODES = ("sequential", "split", "split-blocking")
"""The modes of a sweep record written before it listed its modes."""


class ModeEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One mode's numbers at one point (docs/metrics.md defines each)."""

    step_ms: float | None = None
    speedup_vs_first: float | None = None
    within_noise_vs_first: bool | None = None
    comm_ms: float | None = None
    compute_ms: float | None = None
    exposed_comm_ms: float | None = None
    overlap_pct: float | None = None


NO_ENTRY = ModeEntry()
"""A mode a point did not run: every number missing."""


class Workload(msgspec.Struct, frozen=True, kw_only=True):
    """A point's resolved model sizes (its config's)."""

    model: str | None = None
    layers: int | None = None
    dim: int | None = None
    batch: int | None = None
    heads: int | None = None
    seq_len: int | None = None
    dtype: str | None = None


WORKLOAD = tuple(Workload.__struct_fields__)
"""The config fields that describe a point's workload (its record keeps them, resolved)."""


class SweepPoint(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    knobs: dict[str, Any]
    workload: Workload
    passed: bool
    headline: dict[str, float | None]
    within_noise: bool | None
    modes: dict[str, ModeEntry] = {}
    """Each mode's entry (in the file: beside the fixed keys, under the mode's name)."""

    def mode(self, name: str) -> ModeEntry:
        return self.modes.get(name, NO_ENTRY)

    def to_json(self) -> dict[str, Any]:
        plain: dict[str, Any] = msgspec.to_builtins(msgspec.structs.replace(self, modes={}))
        del plain["modes"]
        return {**plain, **{name: msgspec.to_builtins(entry) for name, entry in self.modes.items()}}


POINT_KEYS = frozenset(SweepPoint.__struct_fields__) - {"modes"}


class SweepCrossover(msgspec.Struct, frozen=True, kw_only=True):
    series: dict[str, Any]
    mode: str | None = None
    """The mode that may beat the baseline (records before this key: the second mode)."""
    baseline: str | None = None
    kind: str
    """never, always or crossover."""
    at: dict[str, Any] | None
    point: str | None


class SweepRecord(msgspec.Struct, frozen=True, kw_only=True):
    vary: dict[str, list[Any]]
    modes: list[str]
    points: list[SweepPoint]
    crossover: list[SweepCrossover]

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> SweepRecord:
        """sweep.json parsed: each point's modes gathered from beside its fixed keys."""
        points = [
            msgspec.convert(
                {**{k: v for k, v in p.items() if k in POINT_KEYS}, "modes": {k: v for k, v in p.items() if k not in POINT_KEYS}},
                SweepPoint,
            )
            for p in raw["points"]
        ]
        modes = raw.get("modes") or [m for m in FORMER_MODES if points and m in points[0].modes]
        return cls(
            vary=raw["vary"], modes=list(modes), points=points, crossover=[msgspec.convert(c, SweepCrossover) for c in raw["crossover"]]
        )

    def to_json(self) -> dict[str, Any]:
        """sweep.json's layout."""
        return {
            "vary": self.vary,
            "modes": self.modes,
            "points": [p.to_json() for p in self.points],
            "crossover": [msgspec.to_builtins(c) for c in self.crossover],
        }
