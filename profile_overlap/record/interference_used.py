"""The interference the replay charges (whatif, advise), per phase of one mode of a run, and where it
came from (definitions: `interference_used`): the mode's own per-operator figure
(record/interference.py), else the run's split vs split-blocking one, else none; or, with `advise
--calibrate`, the per-operator figure of a profiled run of a change (tools/advise/calibrate.py)."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from profile_overlap.core.modes import PHASES
from profile_overlap.record.analysis import AnalysisRecord
from profile_overlap.record.metrics import PhaseInterference

OPERATORS = "operators"
SPLIT_BLOCKING = "split vs split-blocking"
CALIBRATION = "calibration run"
NONE = "none"
"""The sources of the interference the replay uses."""


class UsedInterference(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The interference the replay charges in one phase, and where it came from."""

    phase: str
    slowdown_pct: float
    low_pct: float | None
    high_pct: float | None
    pairs: int | None
    """The pairs behind a per-operator figure (the median rank's); None for the other sources."""
    source: str
    """OPERATORS, SPLIT_BLOCKING, CALIBRATION or NONE (0%)."""
    calibrated_with: str | None = None
    """CALIBRATION: the flag of the profiled run it was measured in (`advise --calibrate`); left out of the JSON when None."""


def used_interference(analysis: AnalysisRecord | None, blocking_rows: Sequence[PhaseInterference] = ()) -> dict[str, UsedInterference]:
    """Per phase (PHASES and "other"), what the replay of a mode charges: the median over ranks of
    the ranks' per-operator figures of that phase in its `analysis` (ranks with a figure); else the
    run's split vs split-blocking interference_pct of the phase (`blocking_rows`, the run's summary);
    else 0 with source NONE."""
    ranks = analysis.interference.ranks if analysis is not None and analysis.interference is not None else {}
    blocking = {x.phase: x for x in blocking_rows}
    out = {}
    for phase in (*PHASES, "other"):
        known = [r.phases[phase] for r in ranks.values() if phase in r.phases and r.phases[phase].slowdown_pct is not None]
        if known:
            known.sort(key=lambda e: e.slowdown_pct or 0.0)
            mid = known[(len(known) - 1) // 2]
            assert mid.slowdown_pct is not None
            out[phase] = UsedInterference(
                phase=phase, slowdown_pct=mid.slowdown_pct, low_pct=mid.low_pct, high_pct=mid.high_pct, pairs=mid.pairs, source=OPERATORS
            )
        elif (row := blocking.get(phase)) is not None and row.pct is not None:
            out[phase] = _from_blocking(row)
        else:
            out[phase] = UsedInterference(phase=phase, slowdown_pct=0.0, low_pct=None, high_pct=None, pairs=None, source=NONE)
    return out


def _from_blocking(row: PhaseInterference) -> UsedInterference:
    assert row.pct is not None
    return UsedInterference(
        phase=row.phase, slowdown_pct=row.pct, low_pct=row.low_pct, high_pct=row.high_pct, pairs=None, source=SPLIT_BLOCKING
    )


def charged(u: UsedInterference) -> float:
    """The slowdown the replay charges, as a fraction: the figure, or 0 where it is negative (nothing
    makes compute faster beside communication: such a figure says the operators differ for another
    reason, such as warm caches or their place in the step)."""
    return max(u.slowdown_pct, 0.0) / 100


def overall(used: dict[str, UsedInterference]) -> str:
    """One line: each phase's charged interference and its source, e.g. "backward +12.0% (operators)"."""
    parts = [
        f"{u.phase} {u.slowdown_pct:+.1f}% ({source_text(u)}{', 0% charged' if u.slowdown_pct < 0 else ''})"
        for u in used.values()
        if u.source != NONE
    ]
    return ", ".join(parts) if parts else "none measured (0% charged)"


def source_text(u: UsedInterference) -> str:
    """Where the figure came from, in words: "operators", or "calibration run of --bucket-cap-mb 1"."""
    return f"{u.source} of {u.calibrated_with}" if u.calibrated_with else u.source
