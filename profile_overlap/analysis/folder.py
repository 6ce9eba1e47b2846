"""A folder of traces -> one TraceAnalysis (`analyze_dir`, what `analyze DIR` runs): find the
trace files, read them in parallel processes, group them by rank, and report or skip bad files.
"""

from __future__ import annotations

import multiprocessing
import os
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from profile_overlap.analysis.file.events import extract
from profile_overlap.analysis.options import DEFAULT, AnalysisOptions
from profile_overlap.analysis.rank.per_rank import RankAnalysis, finish_rank
from profile_overlap.analysis.read.trace import load_trace
from profile_overlap.analysis.world.cross_rank import TraceAnalysis, combine
from profile_overlap.core.errors import UserError
from profile_overlap.core.files import (
    ADVICE_JSON,
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
_FORK = multiprocessing.get_context("fork") if "fork" in multiprocessing.get_all_start_methods() else None

# profile_overlap's own records, which sit beside traces in a run folder (or an analyze --tensorboard
# output folder) and are not traces. Skipped only in folders that are ours (a metrics.json or
# status.json beside them): a stray config.json among a user's traces still gets its error.
OWN_RECORDS = frozenset(
    {"metrics.json", ADVICE_JSON, TIMELINE_JSON, CONFIG_JSON, ENV_JSON, STATUS_JSON, REPORT_JSON, SWEEP_JSON, BENCH_JSON}
)


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


@dataclass(frozen=True)
class FileResult:
    """One trace file read and measured on its own, in a worker: what the grouping by rank needs,
    and the file's rank analysis for the usual case of one file per rank (a few kB, where the
    file's events are MBs; a rank with several files is measured again from all of them)."""

    path: str
    rank: int | None
    t_min: float
    t_max: float
    alone: RankAnalysis | UserError
    """finish_rank of this file alone, or the error it raised."""


def read_file(path: str, options: AnalysisOptions = DEFAULT) -> FileResult | UserError:
    """Read, classify and measure one file (run in worker processes, or on a torchrun rank)."""
    try:
        f = extract(load_trace(Path(path)), release=True)
    except UserError as err:
        return _bare(err)
    try:
        alone: RankAnalysis | UserError = finish_rank([f], options, release=True)
    except UserError as err:
        alone = _bare(err)
    return FileResult(path=f.path, rank=f.rank, t_min=f.t_min, t_max=f.t_max, alone=alone)


def _bare(err: UserError) -> UserError:
    """The error as a result keeps it: its message, without its traceback and the failure it was
    raised from. Their frames hold the reader's buffers (tens of MB for a giant string), and the
    error is kept while the other files are read (--skip-bad), in a reference cycle with the frame
    that returns it, which lives until the garbage collector runs."""
    err.__traceback__ = err.__context__ = err.__cause__ = None
    return err


def trace_paths(folder: Path) -> list[Path]:
    """The trace files `analyze DIR` reads, or a UserError saying why there are none."""
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
    return paths


def _bad(skip_bad: bool, warn: Callable[[str], None] | None) -> Callable[[str], None]:
    def bad(message: str) -> None:
        if not skip_bad:
            raise UserError(message)
        if warn is not None:
            warn(message)

    return bad


def finish(
    folder: Path,
    results: list[FileResult | UserError],
    options: AnalysisOptions = DEFAULT,
    *,
    warn: Callable[[str], None] | None = None,
) -> TraceAnalysis:
    """The files' results (in `trace_paths` order) -> the analysis: report bad files, group the
    files by rank, measure each rank (again, from all its files, if it has several) and add the
    cross-rank view. Shared by `analyze_dir` and the torchrun driver (`analysis.cluster`)."""
    bad = _bad(options.skip_bad, warn)
    files: list[FileResult] = []
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
    by_rank: dict[int | None, list[FileResult]] = defaultdict(list)
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
    ranks: list[RankAnalysis] = []
    for _rank, group in sorted(by_rank.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)):
        try:
            if len(group) == 1:
                alone = group[0].alone
                if isinstance(alone, UserError):
                    raise alone
                ranks.append(alone)
            else:
                # Successive spans of one rank: read them again, together (rare; one process).
                events = [extract(load_trace(Path(f.path)), release=True) for f in group]
                ranks.append(finish_rank(events, options, release=True))
        except UserError as err:
            bad(str(err))
    if not ranks:
        raise UserError(f"no usable trace under {folder}: every rank was bad (see the warnings above)")
    return combine(ranks, source=str(folder), hta_compat=options.hta_compat, duplicates=tuple(duplicates))


def analyze_dir(
    folder: Path,
    options: AnalysisOptions = DEFAULT,
    *,
    warn: Callable[[str], None] | None = None,
    max_workers: int | None = None,
) -> TraceAnalysis:
    """Every trace under `folder`, grouped by rank; files are read in parallel processes.
    With options.skip_bad, a bad file is reported through `warn(message)` and left out."""
    folder = Path(folder)
    paths = trace_paths(folder)
    workers = max_workers or min(len(paths), os.cpu_count() or 1)
    read = partial(read_file, options=options)
    # Worker processes cost ~0.1 s to start: only worth it when there is real parsing to share.
    # Each worker returns its files' small per-rank results, not their events, so the parent's
    # memory does not grow with the traces.
    total_bytes = sum(p.stat().st_size for p in paths)
    if len(paths) > 1 and workers > 1 and total_bytes > PARALLEL_MIN_BYTES:
        # fork: the workers start with this process's imports, not a fresh interpreter each; numpy.ma
        # among them, which np.unique's first call imports (8 ms), here once rather than in each worker.
        import numpy.ma  # noqa: F401

        with ProcessPoolExecutor(max_workers=workers, mp_context=_FORK) as pool:
            results = list(pool.map(read, [str(p) for p in paths], chunksize=max(1, len(paths) // (8 * workers))))
    else:
        results = [read(str(p)) for p in paths]
    return finish(folder, results, options, warn=warn)
