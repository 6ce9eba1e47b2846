"""timeline.json, typed: per mode and rank, the profiled steps' windows and their compute and
communication spans (merged at display resolution by the analysis), for the figures and the Overlap
tab. Field names are the JSON keys; a span and a phase window are JSON arrays (array_like). Fields
with a default are absent from timelines written before clock alignment or phase windows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from profile_overlap.core.errors import UserError
from profile_overlap.core.io import write_bytes_atomic
from profile_overlap.record.analysis import json_bytes
from profile_overlap.record.heatmap import Heatmap


class TimelineStep(msgspec.Struct, frozen=True, kw_only=True):
    step: int
    start_us: float
    """On the reference rank's clock where the rank is aligned, else on its own."""
    step_us: float


class TimelineSpan(msgspec.Struct, frozen=True, array_like=True):
    """[step, start_us, end_us, kind (comm|compute), label] in timeline.json."""

    step: int | None
    """None for a span outside every profiled step."""
    start_us: float
    end_us: float
    kind: str
    label: str


class PhaseWindow(msgspec.Struct, frozen=True, array_like=True):
    """[step, phase, start_us, end_us] in timeline.json."""

    step: int
    phase: str
    start_us: float
    end_us: float


class TimelineRank(msgspec.Struct, frozen=True, kw_only=True):
    rank: int
    aligned: bool = False
    """Its times are on the reference rank's clock."""
    clock_offset_us: float = 0.0
    clock_uncertainty_us: float | None = None
    steps: tuple[TimelineStep, ...] = ()
    spans: tuple[TimelineSpan, ...] = ()
    phases: tuple[PhaseWindow, ...] = ()
    wait: tuple[tuple[float, float], ...] = ()
    """[start_us, end_us] of exposed instants waiting for a peer (analysis/rank/exposed_timeline.py); this and
    the next three are empty without the causes (one rank, no steps, or timelines written before them)."""
    transfer: tuple[tuple[float, float], ...] = ()
    """[start_us, end_us] of exposed instants moving data."""
    critical: tuple[tuple[float, float, str], ...] = ()
    """[start_us, end_us, piece] of the critical path on this rank."""
    calls: tuple[tuple[str, str, int, int, float, float], ...] = ()
    """[kind, phase, call, step, start_us, end_us] of the top calls."""


class TimelineMode(msgspec.Struct, frozen=True, kw_only=True):
    reference_rank: int | None = None
    ranks: tuple[TimelineRank, ...] = ()
    heatmap: Heatmap | None = None
    """Every rank's exposed time per time bin of the median step (record/heatmap.py); absent before it."""


class Timeline(msgspec.Struct, frozen=True, kw_only=True):
    schema: str = ""
    """One line saying what the arrays hold (analysis/record.TIMELINE_SCHEMA)."""
    modes: dict[str, TimelineMode] = {}

    def write(self, path: Path) -> Path:
        """timeline.json, atomically and indented, encoded once from the structs."""
        return write_bytes_atomic(path, [json_bytes(self, indent=2)])


def as_timeline(data: Timeline | dict[str, Any]) -> Timeline:
    """A timeline as parsed JSON (a dict) converted once; a Timeline as it is."""
    if isinstance(data, Timeline):
        return data
    try:
        return msgspec.convert(data, Timeline)
    except msgspec.ValidationError as err:
        raise UserError(f"timeline.json: {err}: not a timeline this version can read; rerun") from None


def load_timeline(path: Path) -> Timeline:
    """timeline.json read back; one line naming the file and the field when it cannot be read."""
    try:
        data = Path(path).read_bytes()
    except OSError as err:
        raise UserError(f"cannot read {path}: {err.strerror}") from None
    return decode_timeline(data, path=path)


def decode_timeline(data: bytes, *, path: Path | str) -> Timeline:
    """A timeline from its JSON bytes (read by the caller); UserError (one line) for one this
    version cannot read, nesting deeper than msgspec decodes included."""
    try:
        return msgspec.json.decode(data, type=Timeline)
    except msgspec.ValidationError as err:
        raise UserError(f"{path}: {err}: not a timeline this version can read; rerun") from None
    except msgspec.DecodeError as err:
        raise UserError(f"{path} is not valid JSON ({err}): the run folder is damaged; rerun") from None
    except RecursionError:
        raise UserError(f"{path} nests deeper than any timeline: it is not a timeline.json; rerun") from None
