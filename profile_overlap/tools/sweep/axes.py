"""The sweep's x axis: the first knob, numeric (its values) or named (its place in the given order),
and the series of points over it (one per combination of the other knobs). Shared by the sweep
record (tools/sweep/) and its renderers (tools/sweep/report.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from profile_overlap.tools.sweep.record import SweepPoint


def numeric_knob(values) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def x_position(vary, value) -> float:
    """Where `value` of the first knob sits on the x axis: itself for numbers; its place in the given order for names."""
    values = list(vary[0][1])
    return value if numeric_knob(values) else values.index(value)


def series_of(points: list[SweepPoint], vary) -> list[tuple[dict, list[SweepPoint]]]:
    x_name = vary[0][0]
    groups: dict[tuple, list[SweepPoint]] = {}
    for p in points:
        key = tuple((k, v) for k, v in p.knobs.items() if k != x_name)
        groups.setdefault(key, []).append(p)
    return [(dict(key), sorted(ps, key=lambda p: x_position(vary, p.knobs[x_name]))) for key, ps in groups.items()]
