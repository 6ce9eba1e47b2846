"""Which c10d op each gloo work event runs (for `events._cpu_events`, CPU traces).

Gloo runs a group's work items in submission order on its worker threads, so the k-th work event
of a pool is the k-th op submitted to it; point-to-point work runs on the calling thread, inside
or right after its send/recv op. Rows index `Trace.cpu`.
"""

from __future__ import annotations

import numpy as np

from profile_overlap.analysis.read.classify import collective_kind, p2p_direction
from profile_overlap.analysis.read.trace import Events


def merge_p2p_ops(
    cpu: Events, p2p_ops: np.ndarray, gloo_rows: np.ndarray, p2p_rows: np.ndarray, worker_op_of: list[int | None]
) -> list[int | None]:
    """The op of every gloo event: worker events' from `worker_op_of` (in their order), and each
    point-to-point event's, the latest send/recv op of its direction on its thread that started
    at or before it (their work runs inside or right after the op)."""
    by_key: dict[tuple[int, str | None], np.ndarray] = {}
    for op in sorted(p2p_ops.tolist(), key=lambda r: float(cpu.ts[r])):
        key = (int(cpu.tid[op]), p2p_direction(cpu.name_of(op)))
        by_key[key] = np.append(by_key.get(key, np.zeros(0, np.int64)), op)
    out: list[int | None] = []
    workers = iter(worker_op_of)
    for row, p2p in zip(gloo_rows.tolist(), p2p_rows.tolist()):
        if not p2p:
            out.append(next(workers))
            continue
        ops = by_key.get((int(cpu.tid[row]), p2p_direction(cpu.name_of(row))))
        j = int(cpu.ts[ops].searchsorted(cpu.ts[row], side="right")) - 1 if ops is not None else -1
        out.append(int(ops[j]) if ops is not None and j >= 0 else None)
    return out


def _numels(dims: object) -> set[int]:
    """The element counts of every tensor in an `Input Dims` value (nested lists of sizes)."""
    if isinstance(dims, list) and dims and all(isinstance(d, int) for d in dims):
        n = 1
        for d in dims:
            n *= d
        return {n}
    if isinstance(dims, list):
        return set().union(*(_numels(d) for d in dims)) if dims else set()
    return set()


def _gloo_kind(name: str) -> str | None:
    """The kind of work gloo runs for a collective (it runs a reduce_scatter as an all_reduce)."""
    kind = collective_kind(name)
    return "all_reduce" if kind == "reduce_scatter" else kind


def match_gloo_pools(cpu: Events, ops: list[int], gloo_rows: np.ndarray, pool_of: list[str]) -> list[int | None]:
    """The c10d op of each gloo work event when the rank's groups run on several worker pools
    (gloo_groups): each pool runs its own group's work in submission order, but the groups' work
    interleaves. Ops in issue order each take the next event of the pool whose next event fits it
    (same work kind, an input of the same size, started at or after the op), the earliest such
    event when several pools fit (then the choice changes no size or kind); events that no op
    takes (work of ops issued before the trace began) get None."""
    events: dict[str, list[int]] = {}
    for i, pool in enumerate(pool_of):
        events.setdefault(pool, []).append(i)
    for rows in events.values():
        rows.sort(key=lambda i: float(cpu.ts[gloo_rows[i]]))
    at = dict.fromkeys(events, 0)
    sizes = [_numels(a.input_dims) if (a := cpu.args.get(int(r))) is not None else set() for r in gloo_rows.tolist()]
    out: list[int | None] = [None] * len(pool_of)
    for op in ops:
        t, kind = float(cpu.ts[op]), _gloo_kind(cpu.name_of(op))
        op_args = cpu.args.get(op)
        op_sizes = _numels(op_args.input_dims) if op_args is not None else set()
        best: tuple[float, str] | None = None
        for pool, rows in events.items():
            while at[pool] < len(rows) and cpu.ts[gloo_rows[rows[at[pool]]]] < t:
                at[pool] += 1  # started before the op: work of an op before the trace, or of no op we know
            if at[pool] == len(rows):
                continue
            i = rows[at[pool]]
            row = int(gloo_rows[i])
            fits = _gloo_kind(cpu.name_of(row)) == kind and (not sizes[i] or not op_sizes or bool(sizes[i] & op_sizes))
            if fits and (best is None or cpu.ts[row] < best[0]):
                best = (float(cpu.ts[row]), pool)
        if best is not None:
            i = events[best[1]][at[best[1]]]
            out[i] = op
            at[best[1]] += 1
    return out


def match_gloo_work(cpu: Events, ops: list[int], gloo_rows: np.ndarray) -> list[int | None]:
    """The c10d op of each gloo work event, or None. Gloo starts work items in submission order,
    so the k-th event is the k-th op, once events of ops submitted before the trace began (async
    ones still running, e.g. the previous step's all_gathers) are skipped; ops whose work had not
    started when the trace ended have no event. If an event would start before its op, the
    order is not what we assume, and nothing is matched."""
    if not ops or not gloo_rows.size:
        return [None] * gloo_rows.size
    lead = int(cpu.ts[gloo_rows].searchsorted(cpu.ts[ops[0]], side="left"))
    n = min(len(ops), gloo_rows.size - lead)
    pairs = list(zip(gloo_rows[lead : lead + n].tolist(), ops[:n]))
    if any(cpu.ts[g] < cpu.ts[op] for g, op in pairs):
        return [None] * gloo_rows.size
    return [None] * lead + [op for _, op in pairs] + [None] * (gloo_rows.size - lead - n)
