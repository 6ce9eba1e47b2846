"""A synthetic job of many ranks (1,024 by default) with three things planted that the rank x time
heatmap must show at a glance, and known by construction:

- a slow node: ranks NODE*8 .. NODE*8+7 compute each forward layer SLOW_NODE_US longer, so at
  every forward all_gather the other ranks wait for them (a band of 8 rows without wait);
- a late rank: its backward layers take LATE_RANK_US longer, so every other rank waits for it at
  the end of backward (one row without wait, its compute running on);
- a phase pattern: the optimizer's all_reduce overlaps nothing on any rank (a column band of
  transfer across all rows).

All ranks share one clock (every call ends at the same instant on every rank, as a collective
does), so the analysis aligns them with offsets of 0.

    python benchmarks/many_ranks.py OUT [--ranks 1024] [--steps 3]
    python benchmarks/many_ranks.py OUT --damage    # plus a truncated, an empty and another job's file, one rank missing
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

from synthetic import PID, gpu_trace, write_trace

LAYERS = 6
FORWARD_US, BACKWARD_US, OPTIMIZER_US = 500, 800, 1200
GATHER_US, REDUCE_US, OPT_REDUCE_US = 120, 300, 900
SLOW_NODE_US = 150
LATE_RANK_US = 120
STEP_GAP_US = 300


def planted(world: int) -> tuple[int, int]:
    """(late rank, first rank of the slow node) for a world size: both away from the edges."""
    return (world * 3) // 8 + 1, ((world * 5) // 8) // 8 * 8


def schedule(world: int, steps: int = 3, seed: int = 0):
    """Per rank: (comm, compute, steps, phases) as gpu_trace takes them, plus phase windows."""
    late, node = planted(world)
    slow = range(node, node + 8)
    rng = random.Random(seed)
    out = [([], [], [], []) for _ in range(world)]  # comm, compute, steps, phases
    base = 1000.0
    for n in range(steps):
        t = [base] * world
        # forward: each layer waits for its all_gather, then computes
        for _ in range(LAYERS):
            end = max(t) + GATHER_US
            for r in range(world):
                out[r][0].append((20, t[r], end))
                c = FORWARD_US + (SLOW_NODE_US if r in slow else 0) + rng.uniform(0, 20)
                out[r][1].append((7, end, end + c))
                t[r] = end + c
        fwd_end = list(t)
        # backward: compute layer by layer; each layer's all_reduce runs behind the next layer's compute
        prev_end = 0.0
        for _ in range(LAYERS):
            for r in range(world):
                c = BACKWARD_US + (LATE_RANK_US if r == late else 0) + rng.uniform(0, 20)
                out[r][1].append((7, t[r], t[r] + c))
                t[r] += c
            starts = [max(t[r], prev_end) for r in range(world)]
            prev_end = max(starts) + REDUCE_US
            for r in range(world):
                out[r][0].append((21, starts[r], prev_end))
        bwd_end = [max(t[r], prev_end) for r in range(world)]
        # optimizer: one all_reduce nothing overlaps, then the update
        end = max(bwd_end) + OPT_REDUCE_US
        for r in range(world):
            out[r][0].append((20, bwd_end[r], end))
            out[r][1].append((7, end, end + OPTIMIZER_US))
            stop = end + OPTIMIZER_US + 10
            out[r][2].append((n, base - 10, stop))
            out[r][3].extend([("forward", base, fwd_end[r]), ("backward", fwd_end[r], bwd_end[r]), ("optimizer", bwd_end[r], stop)])
        base = end + OPTIMIZER_US + STEP_GAP_US
    return out


def trace(rank: int, world: int, plan) -> dict:
    comm, compute, steps, phases = plan
    doc = gpu_trace(comm, compute, steps=steps, rank=rank, world_size=world)
    for name, s, e in phases:
        doc["traceEvents"].append(
            {"ph": "X", "cat": "user_annotation", "name": f"## {name} ##", "pid": PID, "tid": PID, "ts": s, "dur": e - s, "args": {}}
        )
    return doc


def write(folder: Path, world: int = 1024, steps: int = 3, *, damage: bool = False) -> Path:
    """One trace per rank, rank<R>.pt.trace.json; with damage, rank 5's file truncated, rank 6's
    empty, rank 7's replaced by a rank of another job (world size 2) and rank 9's missing."""
    folder.mkdir(parents=True, exist_ok=True)
    for rank, plan in enumerate(schedule(world, steps)):
        path = folder / f"rank{rank}.pt.trace.json"
        if damage and rank == 9:
            continue
        write_trace(trace(rank, world, plan), path)
        if damage and rank == 5:
            path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
        elif damage and rank == 6:
            path.write_bytes(b"")
        elif damage and rank == 7:
            write_trace(trace(1, 2, schedule(2, steps)[1]), path)
    return folder


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", type=Path)
    p.add_argument("--ranks", type=int, default=1024)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--damage", action="store_true")
    a = p.parse_args()
    late, node = planted(a.ranks)
    write(a.out, a.ranks, a.steps, damage=a.damage)
    print(f"wrote {a.ranks} ranks to {a.out}: late rank {late}, slow node ranks {node}-{node + 7}")
