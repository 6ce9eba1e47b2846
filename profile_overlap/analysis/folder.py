"""A folder of traces -> one TraceAnalysis (`analyze_dir`, what `analyze DIR` runs): find the
trace files, read them in parallel processes, group them by rank, and report or skip bad files.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from profile_overlap.analysis.cross_rank import TraceAnalysis, combine
from profile_overlap.analysis.events import FileEvents, extract
from profile_overlap.analysis.per_rank import finish_rank
from profile_overlap.analysis.trace import load_trace
from profile_overlap.core.errors import UserError
from profile_overlap.core.files import (
    BENCH_JSON,
    CONFIG_JSON,
    ENV_JSON,
    METRICS_JSON,
    PERFETTO_TRACE,
    REPORT_JSON,
    STATUS_JSON,
    SWEEP_JSON,
    TIMELINE_JSON,
)

PARALLEL_MIN_BYTES = 2 << 20
"""analyze_dir reads files in worker processes only when they hold more than this in total."""

# profile_overlap's own records, which sit beside traces in a run folder (or an analyze --tensorboard
# output folder) and are not traces. Skipped only in folders that are ours (a metrics.json or
# status.json beside them): a stray config.json among a user's traces still gets its error.
OWN_RECORDS = frozenset({"metrics.json", TIMELINE_JSON, CONFIG_JSON, ENV_JSON, STATUS_JSON, REPORT_JSON, SWEEP_JSON, BENCH_JSON})


def _is_own_record(path: Path) -> bool:
    ours = path.name in OWN_RECORDS or (path.name.startswith(PERFETTO_TRACE.split(".")[0] + ".") and path.name.endswith(".json.gz"))
    return ours and any((path.parent / name).is_file() for name in (METRICS_JSON, STATUS_JSON))


def find_trace_files(folder: Path) -> list[Path]:
    """Every *.json and *.json.gz under `folder`, recursively, sorted, except our own records."""
    return sorted(
        p
        for p in Path(folder).rglob("*")
        if p.is_file() and not _is_own_record(p) and (p.name.endswith(".json") or p.name.endswith(".json.gz"))
    )


def _extract_path(path: str) -> FileEvents | UserError:
    try:
        return extract(load_trace(Path(path)))
    except UserError as err:
        return err


def analyze_dir(
    folder: Path,
    *,
    hta_compat: bool = False,
    steps: tuple[int | None, int | None] | None = None,
    skip_bad: bool = False,
    warn: Callable[[str], None] | None = None,
    max_workers: int | None = None,
    keep_spans: bool = False,
) -> TraceAnalysis:
    """Every trace under `folder`, grouped by rank; files are read in parallel processes.
    With skip_bad, a bad file is reported through `warn(message)` and left out. keep_spans: each
    rank keeps the intervals behind its totals (RankAnalysis.spans)."""
    folder = Path(folder)
    if not folder.exists():
        raise UserError(f"{folder} does not exist; pass the folder that holds the *.pt.trace.json(.gz) files")
    if not folder.is_dir():
        raise UserError(f"{folder} is not a folder; pass the folder that holds the trace files")
    paths = find_trace_files(folder)
    if not paths:
        raise UserError(
            f"no *.json or *.json.gz trace files under {folder}; point analyze at a "
            "torch.profiler output folder (tensorboard_trace_handler's dir_name)"
        )
    workers = max_workers or min(len(paths), os.cpu_count() or 1)
    # Worker processes cost ~0.3 s to start: only worth it when there is real parsing to share.
    total_bytes = sum(p.stat().st_size for p in paths)
    if len(paths) > 1 and workers > 1 and total_bytes > PARALLEL_MIN_BYTES:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            results = list(pool.map(_extract_path, [str(p) for p in paths]))
    else:
        results = [_extract_path(str(p)) for p in paths]

    def bad(message: str) -> None:
        if not skip_bad:
            raise UserError(message)
        if warn is not None:
            warn(message)

    files: list[FileEvents] = []
    for result in results:
        if isinstance(result, UserError):
            bad(str(result))
        else:
            files.append(result)
    if not files:
        raise UserError(f"no usable trace under {folder}: every file was bad (see the warnings above)")
    unknown = [f for f in files if f.rank is None]
    if unknown and len(files) > 1:
        for f in unknown:
            bad(
                f"cannot tell the rank of {f.path}: it has no distributedInfo.rank and no number in its "
                "name; rename it with its rank (e.g. rank3.json)"
            )
        files = [f for f in files if f.rank is not None]
    by_rank: dict[int | None, list[FileEvents]] = defaultdict(list)
    duplicates = []
    for f in sorted(files, key=lambda f: f.t_min):
        # Several files of one rank are fine when they are successive profiler spans (one file
        # per `on_trace_ready` cycle); two that cover the same time are copies or two runs.
        clash = next((g for g in by_rank[f.rank] if f.t_min < g.t_max), None)
        if clash is None:
            by_rank[f.rank].append(f)
        else:
            duplicates.append(f.path)
            bad(
                f"{clash.path} and {f.path} both claim rank {f.rank} and cover the same time, so they are "
                "not successive profiler spans of one worker; remove the duplicate or analyze each run's folder separately"
            )
    ranks = []
    for _rank, group in sorted(by_rank.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)):
        try:
            ranks.append(finish_rank(group, hta_compat=hta_compat, steps=steps, keep_spans=keep_spans))
        except UserError as err:
            bad(str(err))
    if not ranks:
        raise UserError(f"no usable trace under {folder}: every rank was bad (see the warnings above)")
    return combine(ranks, source=str(folder), hta_compat=hta_compat, duplicates=tuple(duplicates))
