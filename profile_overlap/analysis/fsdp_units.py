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
from dataclasses import dataclass, field

import numpy as np

from profile_overlap.analysis.events import extract, main_tid
from profile_overlap.analysis.trace import Trace
from profile_overlap.core import intervals as iv
from profile_overlap.core.modes import PHASES

UNIT_RANGE_RE = re.compile(r"^FSDP::.*?(?: \((?P<paren>.+)\)| for (?P<after>.+))$")
"""An FSDP:: range naming its unit (the unit's module names, comma-separated when it holds several)."""
GATHER_RANGE_RE = re.compile(r"^(FSDP::all_gather \(|FSDP::backward_prefetch |fsdp::all_gather_copy_in|FSDP::all_gather_copy_out)")
"""The ranges of a gather's work on the training thread: issuing it, prefetching it, its copies."""


@dataclass(frozen=True)
class FsdpBusy:
    """One trace's FSDP2 work on the training thread, µs per ProfilerStep (empty: a GPU trace, or
    one without steps or FSDP2 ranges)."""

    units: dict[str, float] = field(default_factory=dict)
    """Unit -> busy time in the ranges naming it, in the order the units first appear (forward order)."""
    backward_gathers_us: float = 0.0
    """Busy time in the backward window in the gathers' ranges."""


def fsdp_busy(trace: Trace) -> FsdpBusy:
    events = extract(trace)
    main = main_tid(trace)
    if events.device != "cpu" or not events.step_num.size or main is None:
        return FsdpBusy()
    cpu = trace.cpu
    exposed = iv.difference(*events.comm_and_compute())
    lo, hi = float(events.step_start.min()), float(events.step_end.max())
    steps = events.step_num.size

    def busy(rows: np.ndarray, within: iv.Union) -> float:
        ranges = iv.intersect(iv.union(cpu.ts[rows], cpu.ts[rows] + cpu.dur[rows]), within)
        return (iv.length(ranges) - iv.intersection_length(ranges, exposed)) / steps

    on_main = cpu.tid == main
    unit_of = {code: m.group("paren") or m.group("after") for code, name in enumerate(cpu.names) if (m := UNIT_RANGE_RE.match(name))}
    rows = np.flatnonzero(np.isin(cpu.name, list(unit_of)) & on_main)
    rows = rows[np.argsort(cpu.ts[rows], kind="stable")]
    names = [unit_of[int(c)] for c in cpu.name[rows]]
    step_span = (np.array([lo]), np.array([hi]))
    units = {u: busy(rows[[n == u for n in names]], step_span) for u in dict.fromkeys(names)}
    backward = events.phases.phase == PHASES.index("backward")
    window = iv.clip(iv.union(events.phases.start[backward], events.phases.end[backward]), lo, hi)
    gathers = np.flatnonzero(np.isin(cpu.name, [c for c, name in enumerate(cpu.names) if GATHER_RANGE_RE.match(name)]) & on_main)
    return FsdpBusy(units=units, backward_gathers_us=busy(gathers, window))
