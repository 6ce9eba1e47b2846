"""What FSDP2 costs the training thread besides its collectives, from the ranges it records
(docs/advise.md): what advise's `--fsdp-group` and `--reshard-after-forward false` take off.

- Per fully_shard unit: the busy time inside the FSDP:: ranges that name it (`FSDP::pre_forward
  (blocks.0)`, `FSDP::backward_prefetch for blocks.0`, ...). Each unit pays its hooks once per pass
  whatever its size (Python, the copies' launches, the waits' bookkeeping), so merging units drops
  all but one of them.
- The backward gathers' work: the busy time in the backward window inside the ranges that issue a
  gather (`FSDP::all_gather (unit)`, `FSDP::backward_prefetch for unit`) or copy into or out of one
  (`fsdp::all_gather_copy_in`, `FSDP::all_gather_copy_out (unit)`), all of which a run that keeps
  its gathered parameters from forward to backward does not do.

Busy: the ranges' union, on the thread holding the steps, less the exposed communication inside it
(the waits, which the replay costs as communication). Per ProfilerStep. CPU traces only: on GPU this
work runs ahead of the kernels, and the step does not wait for it.
"""

from __future__ import annotations

import re

import numpy as np

from profile_overlap.analysis.file.phases import PhaseWindows
from profile_overlap.analysis.read.trace import Events
from profile_overlap.core import intervals as iv
from profile_overlap.core.codes import coded_in
from profile_overlap.core.modes import PHASES
from profile_overlap.record.analysis import FsdpRecord, FsdpUnitRecord

UNIT_RANGE_RE = re.compile(r"^FSDP::.*?(?: \((?P<paren>.+)\)| for (?P<after>.+))$")
"""An FSDP:: range naming its unit (the unit's module names, comma-separated when it holds several)."""
GATHER_RANGE_RE = re.compile(r"^(FSDP::all_gather \(|FSDP::backward_prefetch |fsdp::all_gather_copy_in|FSDP::all_gather_copy_out)")
"""The ranges of a gather's work on the training thread: issuing it, prefetching it, its copies."""


def fsdp_busy(
    cpu: Events, main: int, *, step_start: np.ndarray, step_end: np.ndarray, phases: PhaseWindows, exposed: iv.Union
) -> FsdpRecord | None:
    """One CPU trace's FSDP2 work on its training thread `main`, µs per ProfilerStep (the steps' CPU
    windows), less the exposed communication inside it; None without steps or FSDP:: ranges."""
    unit_of = {code: m.group("paren") or m.group("after") for code, name in enumerate(cpu.names) if (m := UNIT_RANGE_RE.match(name))}
    gather_codes = [c for c, name in enumerate(cpu.names) if GATHER_RANGE_RE.match(name)]
    if not step_start.size or not (unit_of or gather_codes):
        return None
    lo, hi = float(step_start.min()), float(step_end.max())
    steps = step_start.size

    def busy(rows: np.ndarray, within: iv.Union) -> float:
        ranges = iv.intersect(iv.union(cpu.ts[rows], cpu.ts[rows] + cpu.dur[rows]), within)
        return round((iv.length(ranges) - iv.intersection_length(ranges, exposed)) / steps, 3)

    on_main = cpu.tid == main
    rows = np.flatnonzero(coded_in(cpu.name, unit_of, len(cpu.names)) & on_main)
    rows = rows[cpu.ts[rows].argsort(kind="stable")]
    names = [unit_of[int(c)] for c in cpu.name[rows]]
    step_span = (np.array([lo]), np.array([hi]))
    units = tuple(FsdpUnitRecord(unit=u, busy_us=busy(rows[[n == u for n in names]], step_span)) for u in dict.fromkeys(names))
    backward = phases.phase == PHASES.index("backward")
    window = iv.clip(iv.union(phases.start[backward], phases.end[backward]), lo, hi)
    gathers = np.flatnonzero(coded_in(cpu.name, gather_codes, len(cpu.names)) & on_main)
    return FsdpRecord(units=units, backward_gathers_us=busy(gathers, window))


def rank_busy(parts: list[tuple[FsdpRecord, int]]) -> FsdpRecord | None:
    """One rank's FSDP2 work from its files' (record, number of steps): the mean per ProfilerStep over
    all of them (a unit a file does not name cost it nothing there)."""
    if len(parts) <= 1:
        return parts[0][0] if parts else None
    steps = sum(n for _, n in parts)
    units: dict[str, float] = {}
    for busy, n in parts:
        for u in busy.units:
            units[u.unit] = units.get(u.unit, 0.0) + u.busy_us * n
    return FsdpRecord(
        units=tuple(FsdpUnitRecord(unit=u, busy_us=round(total / steps, 3)) for u, total in units.items()),
        backward_gathers_us=round(sum(b.backward_gathers_us * n for b, n in parts) / steps, 3),
    )
