"""`analyze DIR` spread over a torchrun job's ranks (what `torchrun ... -m profile_overlap analyze
DIR` runs): every rank reads its share of the trace files (DIR on a shared file system) and
measures each file's rank (`folder.read_file`); the small per-file results are gathered over
torch.distributed (gloo) to rank 0, which groups them by rank and adds the cross-rank view
(`folder.finish`), so it gets exactly what a single-process `analyze_dir` gets.

torch is imported only here, and only when torchrun launched us: plain `analyze` never loads it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from profile_overlap.analysis.folder import FileResult, finish, read_file, trace_paths
from profile_overlap.analysis.options import DEFAULT, AnalysisOptions
from profile_overlap.analysis.world.cross_rank import TraceAnalysis
from profile_overlap.core.errors import UserError

TORCHRUN_ENV = ("RANK", "WORLD_SIZE", "TORCHELASTIC_RUN_ID")
"""torchrun sets all three in each worker's environment."""


def launched_by_torchrun() -> bool:
    return all(name in os.environ for name in TORCHRUN_ENV)


def is_leader() -> bool:
    """Rank 0 of the torchrun job: the one that prints and writes."""
    return int(os.environ.get("RANK", "0")) == 0


def share(sizes: list[int], workers: int) -> list[int]:
    """The worker that reads each file: the largest files first, each to the worker with the
    fewest bytes so far (ties to the lowest worker), so the shares take about the same time.
    Every rank computes the same answer from the same sizes."""
    load = [0] * workers
    owner = [0] * len(sizes)
    for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        w = min(range(workers), key=lambda w: (load[w], w))
        owner[i] = w
        load[w] += sizes[i]
    return owner


def analyze_dir_cluster(
    folder: Path,
    options: AnalysisOptions = DEFAULT,
    *,
    warn: Callable[[str], None] | None = None,
    timeout_s: float = 1800.0,
) -> TraceAnalysis | None:
    """The analysis on rank 0, None on the other ranks. A bad file gives rank 0 the same
    UserError (or, with options.skip_bad, the same warning) as `analyze_dir`; the other ranks stay quiet.
    A folder that is missing or empty raises the same UserError on every rank."""
    import torch.distributed as dist

    folder = Path(folder)
    paths = trace_paths(folder)  # the same on every rank: DIR is on a shared file system
    dist.init_process_group("gloo", timeout=timedelta(seconds=timeout_s))
    try:
        rank, world = dist.get_rank(), dist.get_world_size()
        sizes = []
        for p in paths:
            try:
                sizes.append(p.stat().st_size)
            except OSError:
                sizes.append(0)  # read_file names the problem
        owner = share(sizes, world)
        mine = {i: read_file(str(p), options) for i, p in enumerate(paths) if owner[i] == rank}
        gathered: list[dict[int, FileResult | UserError]] | None = [{} for _ in range(world)] if rank == 0 else None
        dist.gather_object(mine, gathered, dst=0)
    finally:
        dist.destroy_process_group()
    if rank != 0:
        return None
    assert gathered is not None  # rank 0 gathered every rank's part
    results = {i: r for part in gathered for i, r in part.items()}
    assert sorted(results) == list(range(len(paths))), "every file read once"
    return finish(folder, [results[i] for i in range(len(paths))], options, warn=warn)
