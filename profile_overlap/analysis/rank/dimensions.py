"""Process groups -> dimensions, and each dimension's communication per rank and step (rank stage:
`rank_dimensions`), then over the job with the cross-rank wait and transfer (world stage:
`job_dimensions`). Definitions: docs/metrics.md "Dimensions".

A call's group is the one it names (GPU: its arguments) or the one inferred for it (gloo:
analysis/file/gloo_groups.py). Groups with the same `pg_desc` form one dimension ("mesh_tp" -> "tp",
"default_pg" -> "world"); groups without a description form one per size and stride. Calls that
could not be placed (gloo_groups.UNPLACED) belong to no dimension: they are counted apart.
A dimension's exposed time is the union of its calls minus the union of compute, inside the step
windows; dimensions can overlap each other in time, so their exposed times add up to at least the
rank's exposed communication (equal when no two dimensions' calls run at once).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np

from profile_overlap.analysis.file.bandwidth import bus_factor
from profile_overlap.analysis.file.call_columns import Calls, Instances, most_common
from profile_overlap.analysis.file.gloo_groups import UNPLACED
from profile_overlap.analysis.file.steps import StepTable
from profile_overlap.analysis.read.trace import ProcessGroupInfo
from profile_overlap.core import intervals as iv
from profile_overlap.core.codes import coded_in
from profile_overlap.core.modes import PHASES
from profile_overlap.record.dimensions import Dimension, DimensionPhase, DimensionRank, DimensionStep

NO_GROUP = "default"
"""The group of a call whose trace names none (events.py): the whole world."""
BY_DESC, BY_SHAPE = "pg_desc", "size and stride"


@dataclass(frozen=True)
class RankDimension:
    """One dimension on one rank: its groups there and its numbers (wait and transfer come later,
    across ranks)."""

    name: str
    pg_names: tuple[str, ...]
    group_size: int | None
    found_by: str
    numbers: DimensionRank


@dataclass(frozen=True)
class RankDimensions:
    """A rank's calls by dimension, and what could not be placed."""

    dims: tuple[RankDimension, ...]
    dimension_of: tuple[tuple[str, str], ...]
    """(process group, dimension) of each group the rank's calls name; unplaced groups absent."""
    unplaced: dict[str, int]
    """Calls that could not be placed in a group, by kind."""
    method: str
    """How the rank's groups were found (analysis/file/events.py, gloo_groups.py), in words."""


def dimension_name(group: ProcessGroupInfo | None, *, size: int | None, world: int | None) -> tuple[str, str]:
    """(dimension, how it was found) of a process group: from its description, else its size and stride."""
    desc = group.desc if group is not None else ""
    if desc.startswith("mesh_") and len(desc) > len("mesh_"):
        return desc.removeprefix("mesh_"), BY_DESC
    if desc == "default_pg":
        return "world", BY_DESC
    if desc and desc != "undefined":
        return desc, BY_DESC
    size = group.size if group is not None and group.size else size
    if size is None or (world is not None and size >= world):
        return "world", BY_SHAPE
    ranks = group.ranks if group is not None else ()
    stride = ranks[1] - ranks[0] if len(ranks) >= 2 else None
    return (f"n{size}" if stride is None else f"n{size}_stride{stride}"), BY_SHAPE


def _lengths_in(u: iv.Union, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """|u ∩ [lo_i, hi_i)| for each window, from the covered length before each instant."""
    starts, ends = u
    if not starts.size or not lo.size:
        return np.zeros(lo.size)
    before = np.concatenate([[0.0], np.cumsum(ends - starts)])

    def covered(t: np.ndarray) -> np.ndarray:
        j = starts.searchsorted(t, side="right") - 1
        inside = np.clip(t - starts[np.maximum(j, 0)], 0, (ends - starts)[np.maximum(j, 0)])
        out: np.ndarray = np.where(j >= 0, before[np.maximum(j, 0)] + inside, 0.0)
        return out

    lengths: np.ndarray = np.maximum(covered(hi) - covered(lo), 0.0)
    return lengths


def _known(sizes: np.ndarray) -> np.ndarray:
    """The group sizes the trace gives (> 0)."""
    out: np.ndarray = sizes[sizes > 0]
    return out


def _busbw(calls: Calls, sel: np.ndarray) -> float | None:
    """Σ bytes · bus factor(kind, group size) / Σ duration (GB/s) over the sized calls in `sel`."""
    kind, n = calls.kind[sel], calls.group_size[sel]
    if not kind.size:
        return None
    # One code per (kind, group size) pair, the factor looked up per distinct pair.
    low = int(n.min())
    span = int(n.max()) - low + 1
    code = kind.astype(np.int64) * span + (n - low)
    del kind
    pairs, which = np.unique(code, return_inverse=True)
    del code
    table = [bus_factor(calls.kinds[p // span], p % span + low) if p % span + low > 0 else None for p in pairs.tolist()]
    factor = np.array([np.nan if f is None else f for f in table])[which.reshape(-1)]
    del which
    nb, dur = calls.nbytes[sel], calls.dur_us[sel]
    ok = (nb >= 0) & ~np.isnan(factor)
    total = float(dur[ok].sum())
    return float((nb[ok] * factor[ok]).sum()) / (total * 1e3) if total > 0 else None


def rank_dimensions(
    calls: Calls,
    compute: iv.Union,
    *,
    groups: Sequence[ProcessGroupInfo],
    method: str,
    world: int | None,
    step_table: StepTable,
    phase: np.ndarray,
    phase_unions: tuple[iv.Union, ...],
) -> RankDimensions:
    """calls: the rank's calls (in the --steps window); compute: its compute union; phase: the phase
    index into PHASES of each of its phase windows (analysis/file/phases.py), phase_unions: their
    union per phase (phases.unions_of_phases)."""
    info = {g.name: g for g in groups}
    dim_of_pg: dict[int, tuple[str, str]] = {}
    for code, pg in enumerate(calls.pgs):
        if pg == UNPLACED:
            continue
        dim_of_pg[code] = dimension_name(info.get(pg), size=most_common(_known(calls.group_size[calls.pg == code])), world=world)
    step_num, step_start, step_end = step_table.num, step_table.start_us, step_table.end_us
    windows = step_table.union() if step_table.size else None
    phase_windows = [
        (name, iv.intersect(phase_unions[i], windows)) for i, name in enumerate(PHASES) if windows is not None and (phase == i).any()
    ]
    dims = []
    for name in sorted({d for d, _ in dim_of_pg.values()}):
        codes = [c for c, (d, _) in dim_of_pg.items() if d == name]
        sel = coded_in(calls.pg, codes, len(calls.pgs))
        start = calls.start_us[sel]
        u = iv.union(start, start + calls.dur_us[sel])
        del start
        if windows is not None:
            u = iv.intersect(u, windows)
        comm_us = iv.length(u)
        hidden_u = iv.intersect(u, compute)
        hidden_us = iv.length(hidden_u)
        nb = calls.nbytes[sel]
        nbytes = int(nb[nb >= 0].sum()) if (nb >= 0).any() else None
        del nb
        per_comm = _lengths_in(u, step_start, step_end)
        per_hidden = _lengths_in(hidden_u, step_start, step_end)
        steps = [
            DimensionStep(step=int(n), comm_us=round(c, 3), hidden_us=round(h, 3), exposed_us=round(c - h, 3))
            for n, c, h in zip(step_num.tolist(), per_comm.tolist(), per_hidden.tolist())
        ]
        in_phases = []
        for phase_name, w in phase_windows:
            c, h = iv.intersection_length(u, w), iv.intersection_length(hidden_u, w)
            in_phases.append(DimensionPhase(phase=phase_name, comm_us=round(c, 3), hidden_us=round(h, 3), exposed_us=round(c - h, 3)))
        dims.append(
            RankDimension(
                name=name,
                pg_names=tuple(sorted(calls.pgs[c] for c in codes)),
                group_size=most_common(_known(calls.group_size[sel])),
                found_by=dim_of_pg[codes[0]][1],
                numbers=DimensionRank(
                    calls=int(sel.sum()),
                    bytes=nbytes,
                    comm_us=round(comm_us, 3),
                    hidden_us=round(hidden_us, 3),
                    exposed_us=round(comm_us - hidden_us, 3),
                    wait_us=None,
                    transfer_us=None,
                    busbw_gbps=None if (bw := _busbw(calls, sel)) is None else round(bw, 4),
                    steps=tuple(steps),
                    phases=tuple(in_phases),
                ),
            )
        )
    unplaced = Counter(calls.kinds[k] for k in calls.kind[calls.pg == calls.pgs.index(UNPLACED)].tolist()) if UNPLACED in calls.pgs else {}
    return RankDimensions(
        dims=tuple(dims),
        dimension_of=tuple((calls.pgs[c], d) for c, (d, _) in sorted(dim_of_pg.items())),
        unplaced=dict(unplaced),
        method=method,
    )


def base_group(pg: str) -> str:
    """The process group of an Instances group name: a point-to-point link "<pg> <a>-><b>"
    (call_columns.number_calls) is its group's."""
    head, _, link = pg.rpartition(" ")
    return head if head and "->" in link else pg


def job_dimensions(
    ranks: Sequence[tuple[int, RankDimensions | None, Instances]],
    fastest: Sequence[np.ndarray],
    matched: Sequence[np.ndarray],
) -> dict[str, Dimension]:
    """Every rank's dimensions gathered by name, with each rank's wait and transfer per dimension.
    ranks: (rank, its dimensions, its instances); fastest, matched: per rank and instance, the
    fastest rank's duration of that call and whether it was matched on two or more ranks
    (cross_rank.combine)."""
    pg_names: dict[str, set[str]] = defaultdict(set)
    sizes: dict[str, Counter[int]] = defaultdict(Counter)
    found_by: dict[str, str] = {}
    per_rank: dict[str, dict[str, DimensionRank]] = defaultdict(dict)
    for (rank, dims, inst), fast, ok in zip(ranks, fastest, matched):
        if dims is None:
            continue
        dim_of = dict(dims.dimension_of)
        inst_dim = np.array([dim_of.get(base_group(pg), "") for pg in inst.pgs] or [""], dtype=object)[inst.pg] if len(inst) else None
        for d in dims.dims:
            pg_names[d.name].update(d.pg_names)
            if d.group_size is not None:
                sizes[d.name][d.group_size] += 1
            found_by.setdefault(d.name, d.found_by)
            numbers = d.numbers
            if inst_dim is not None:
                sel = (inst_dim == d.name) & ok
                if sel.any():
                    transfer = float(fast[sel].cumsum()[-1])
                    wait = float(np.cumsum(inst.dur_us[sel] - fast[sel])[-1])
                    numbers = _with_wait(numbers, wait, transfer)
            per_rank[d.name][str(rank)] = numbers
    return {
        name: Dimension(
            pg_names=tuple(sorted(pg_names[name], key=_group_order)),
            group_size=sizes[name].most_common(1)[0][0] if sizes[name] else None,
            found_by=found_by[name],
            ranks=per_rank[name],
            **_means(per_rank[name]),
        )
        for name in sorted(per_rank)
    }


def _means(ranks: dict[str, DimensionRank]) -> dict[str, Any]:
    """Per step, the mean over the ranks that have it; and the mean per step of its exposed time."""
    by_step: dict[int, list[DimensionStep]] = defaultdict(list)
    for d in ranks.values():
        for s in d.steps:
            by_step[s.step].append(s)
    steps = tuple(
        DimensionStep(
            step=n,
            comm_us=round(sum(s.comm_us for s in xs) / len(xs), 3),
            hidden_us=round(sum(s.hidden_us for s in xs) / len(xs), 3),
            exposed_us=round(sum(s.exposed_us for s in xs) / len(xs), 3),
        )
        for n, xs in sorted(by_step.items())
    )
    if steps:
        per_step = sum(s.exposed_us for s in steps) / len(steps)
    else:  # no steps: the whole trace, once
        per_step = sum(d.exposed_us for d in ranks.values()) / len(ranks) if ranks else 0.0
    return {"steps": steps, "exposed_per_step_us": round(per_step, 3)}


def _with_wait(d: DimensionRank, wait: float, transfer: float) -> DimensionRank:
    return msgspec.structs.replace(d, wait_us=round(wait, 3), transfer_us=round(transfer, 3))


def _group_order(pg: str) -> tuple[int, str]:
    return (int(pg), "") if pg.isdigit() else (1 << 62, pg)
