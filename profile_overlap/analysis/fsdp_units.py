"""FSDP2's cost per fully_shard unit on the training thread: the busy time inside the FSDP:: ranges
that name the unit (`FSDP::pre_forward (blocks.0)`, `FSDP::backward_prefetch for blocks.0`, ...).

Each unit pays its hooks once per pass whatever its size (Python, the copy-in and copy-out's launches,
the waits' bookkeeping), so merging units (`advise`'s `--fsdp-group`) drops all but one of them. On
CPU this is time on the training thread, the step's critical path; on GPU it runs ahead of the
kernels and is not counted (README "What to change").
"""

from __future__ import annotations

import re

import numpy as np

from profile_overlap.analysis.events import extract, main_tid
from profile_overlap.analysis.trace import Trace
from profile_overlap.core import intervals as iv

UNIT_RANGE_RE = re.compile(r"^FSDP::.*?(?: \((?P<paren>.+)\)| for (?P<after>.+))$")
"""An FSDP:: range naming its unit (the unit's module names, comma-separated when it holds several)."""


def unit_busy_us(trace: Trace) -> dict[str, float]:
    """Unit -> busy µs per ProfilerStep inside the FSDP:: ranges naming it, on the thread holding the
    steps: the ranges' union less the exposed communication inside it (the waits), in the order the
    units first appear (forward order). Empty for a GPU trace or one without steps or FSDP2 ranges."""
    events = extract(trace)
    if events.device != "cpu" or not events.step_num.size:
        return {}
    cpu = trace.cpu
    main = main_tid(trace)
    comm = iv.union(events.comm.start, events.comm.end)
    compute = iv.difference(iv.union(events.compute.start, events.compute.end), events.exclude)
    exposed = iv.difference(comm, compute)
    lo, hi = float(events.step_start.min()), float(events.step_end.max())
    unit_of = {}
    for code, name in enumerate(cpu.names):
        if m := UNIT_RANGE_RE.match(name):
            unit_of[code] = m.group("paren") or m.group("after")
    rows = np.flatnonzero(np.isin(cpu.name, list(unit_of)) & (cpu.tid == main)) if unit_of else np.array([], dtype=int)
    rows = rows[np.argsort(cpu.ts[rows], kind="stable")]
    out: dict[str, float] = {}
    for unit in dict.fromkeys(unit_of[int(c)] for c in cpu.name[rows]):
        mine = rows[[unit_of[int(c)] == unit for c in cpu.name[rows]]]
        ranges = iv.clip(iv.union(cpu.ts[mine], cpu.ts[mine] + cpu.dur[mine]), lo, hi)
        out[unit] = (iv.length(ranges) - iv.intersection_length(ranges, exposed)) / events.step_num.size
    return out
