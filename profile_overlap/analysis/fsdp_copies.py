"""FSDP2's all_gather copies: the compute each gather costs besides the collective itself.

Before each all_gather FSDP2 copies the unit's shards into one flat buffer (`fsdp::all_gather_copy_in`),
after it splits the gathered buffer back into the unit's parameters (`FSDP::all_gather_copy_out`).
Both run on the training thread as compute, so a change that drops gathers (`advise`'s
`--reshard-after-forward false`) drops them too. Per trace file: their time per profiled step in
each phase window (README "What to change").
"""

from __future__ import annotations

import numpy as np

from profile_overlap.analysis.trace import Trace
from profile_overlap.core.modes import PHASES

COPY_PREFIXES = ("fsdp::all_gather_copy_in", "FSDP::all_gather_copy_out")
"""The names of FSDP2's copy ranges (the copy-out carries its module: `... (blocks.0)`)."""


def copy_us_per_step(trace: Trace) -> dict[str, float]:
    """Phase -> µs of FSDP2's gather copies per ProfilerStep (each copy in the phase window it starts in)."""
    cpu = trace.cpu
    code_of = np.asarray(cpu.name)

    def rows(prefixes: tuple[str, ...] = (), name: str | None = None) -> np.ndarray:
        codes = [i for i, n in enumerate(cpu.names) if n == name or (prefixes and n.startswith(prefixes))]
        return np.flatnonzero(np.isin(code_of, codes)) if codes else np.array([], dtype=int)

    steps = rows(("ProfilerStep#",))
    if not steps.size:
        return {}
    copies = rows(COPY_PREFIXES)
    out = {}
    for phase in PHASES:
        windows = rows(name=phase)
        starts, ends = cpu.ts[windows], cpu.ts[windows] + cpu.dur[windows]
        t = cpu.ts[copies]
        inside = ((t[:, None] >= starts[None, :]) & (t[:, None] < ends[None, :])).any(axis=1) if windows.size else np.zeros(t.size, bool)
        out[phase] = float(cpu.dur[copies][inside].sum()) / steps.size
    return out
