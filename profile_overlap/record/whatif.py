"""The `whatif` record: predicted step times of each mode at other world sizes and bandwidths, the
self-replay error and the crossovers, built once by tools/whatif/ and stored as
RUN_DIR/whatif.json; the console, the plot and the report's "What if" section only read it.
Every number is defined in docs/metrics.md ("What if")."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from profile_overlap.core.errors import UserError
from profile_overlap.record.analysis import as_json

WHATIF_JSON = "whatif.json"
WHATIF_PNG = "whatif.png"
SCHEMA = 1


@dataclass(frozen=True)
class WhatifPoint:
    """One mode at one target world size and link bandwidth."""

    mode: str
    world_size: int
    link_gbps: float
    step_ms: float
    exposed_comm_ms: float
    overlap_pct: float | None
    """None when the mode has no communication."""
    speedup_vs_first: float
    """The first mode's predicted step_ms / this mode's, at the same point."""


@dataclass(frozen=True)
class SelfReplay:
    """The run's own configuration replayed with its measured collectives (each its share of the busy communication time)."""

    mode: str
    measured_ms: float | None
    """The mode's median unprofiled step time (step_time_ms)."""
    predicted_ms: float
    error_pct: float | None
    """100 · (predicted − measured) / measured."""
    profiled_ms: float | None = None
    """Median over profiled steps of the ranks' mean ProfilerStep window: the steps the traces measured."""
    profiled_error_pct: float | None = None


@dataclass(frozen=True)
class Crossover:
    """Where `mode` starts to beat `baseline` along one axis, the other held at `at`."""

    mode: str
    baseline: str
    axis: str
    """world_size (at a link_gbps) or link_gbps (at a world_size)."""
    at: float
    value: str
    """Where the mode wins along the axis: "always", "from X", "up to X" or "never" (tools/whatif/model.py's crossover)."""


@dataclass(frozen=True)
class WhatifResult:
    schema: int
    run_dir: str
    measured_world_size: int
    latency_us: float
    compute_scale: float
    fit: str | None
    """Where α and B came from: None (the flags), a bench.json path, or "run" (the run's own collectives)."""
    world_sizes: tuple[int, ...]
    link_gbps: tuple[float, ...]
    modes: tuple[str, ...]
    points: tuple[WhatifPoint, ...]
    self_replay: tuple[SelfReplay, ...]
    crossovers: tuple[Crossover, ...]
    notes: tuple[str, ...]
    """What the model assumed for this run (fallbacks, unmodelled modes)."""

    def to_json(self) -> dict[str, Any]:
        plain: dict[str, Any] = as_json(self)
        return plain

    def point(self, mode: str, world_size: int, link_gbps: float) -> WhatifPoint:
        """`mode` at one point of the grid (the record holds every mode at every point)."""
        for p in self.points:
            if (p.mode, p.world_size, p.link_gbps) == (mode, world_size, link_gbps):
                return p
        raise KeyError(f"no whatif point for {mode} at {world_size} ranks, {link_gbps:g} GB/s")


def load_whatif(run_dir: Path) -> WhatifResult | None:
    """RUN_DIR/whatif.json read back; None when `whatif` was never run on the folder."""
    path = Path(run_dir) / WHATIF_JSON
    if not path.is_file():
        return None
    try:
        return msgspec.json.decode(path.read_bytes(), type=WhatifResult)
    except msgspec.DecodeError as err:
        raise UserError(f"{path} is not a whatif record this version can read ({err}): rerun `whatif`") from None
