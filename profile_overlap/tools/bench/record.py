"""`bench-collectives`' record (BenchResult), built once from every rank's measurements, and its
renderers (rank 0, from the record only): the nccl-tests style console table and TensorBoard
scalars with the size in bytes as the step. bench.json is the record itself.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from profile_overlap.analysis.file.bandwidth import algbw_gbps, busbw_gbps
from profile_overlap.record.analysis import as_json
from profile_overlap.record.metrics import Env
from profile_overlap.tools.bench.config import COLLECTIVES, BenchConfig, parse_sizes

SCHEMA_VERSION = 1
RS_LIKE_AR = 0.75
"""reduce_scatter / all_reduce time at or above which the table says reduce_scatter costs about as
much as all_reduce (a ring reduce_scatter moves half of all_reduce's bytes: ideally 0.5)."""


class TimedResult(msgspec.Struct, frozen=True):
    time_us: float


class TimedRow(msgspec.Struct, frozen=True):
    nbytes: int
    results: dict[str, TimedResult]


class BenchTimes(msgspec.Struct, frozen=True):
    """The part of bench.json that `whatif --fit` reads: each size's time per collective kind."""

    world_size: int
    rows: tuple[TimedRow, ...]


@dataclass(frozen=True)
class CollectiveResult:
    kind: str
    time_us: float
    """Median over iterations of the slowest rank's time."""
    algbw_gbps: float | None
    busbw_gbps: float | None
    num_wrong: int
    """Output elements outside tolerance, summed over ranks."""


@dataclass(frozen=True)
class SizeRow:
    nbytes: int
    """S: bytes of the full array (all_reduce's buffer, reduce_scatter's input, all_gather's output)."""
    count: int
    """Elements of the full array; reduce_scatter's output and all_gather's input are count / N."""
    results: dict[str, CollectiveResult]
    rs_ag_over_ar: float | None
    """(reduce_scatter time + all_gather time) / all_reduce time."""
    rs_over_ar: float | None
    """reduce_scatter time / all_reduce time."""


@dataclass(frozen=True)
class BenchResult:
    schema_version: int
    backend: str
    device_type: str
    world_size: int
    dtype: str
    timing: str
    """cuda_events or perf_counter+barrier."""
    config: BenchConfig
    """The command's flags (in bench.json: flat, as config.json spells them)."""
    env: Env
    rows: tuple[SizeRow, ...]
    num_wrong: int
    avg_busbw_gbps: float | None
    """Mean busbw over every size and collective (nccl-tests' 'Avg bus bandwidth')."""
    avg_busbw_gbps_by_kind: dict[str, float | None]
    notes: tuple[str, ...]
    run_dir: str | None

    @property
    def passed(self) -> bool:
        return self.num_wrong == 0

    def to_json(self) -> dict[str, Any]:
        plain: dict[str, Any] = as_json(self)
        plain["config"] = self.config.to_dict()  # in its place: the file's key order is unchanged
        return plain


def _mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.fmean(known) if known else None


def build_result(
    *,
    times_us: dict[tuple[int, str], list[float]],
    wrong: dict[tuple[int, str], int],
    sizes: list[int],
    element_bytes: int,
    world_size: int,
    backend: str,
    device_type: str,
    config: BenchConfig,
    env: Env,
    run_dir: str | None,
) -> BenchResult:
    """times_us[(nbytes, kind)]: per iteration, the slowest rank's time; wrong: summed over ranks."""
    rows = []
    for nbytes in sizes:
        results = {}
        for kind in COLLECTIVES:
            t = statistics.median(times_us[nbytes, kind])
            results[kind] = CollectiveResult(
                kind=kind,
                time_us=t,
                algbw_gbps=algbw_gbps(nbytes, t),
                busbw_gbps=busbw_gbps(kind, nbytes, t, world_size),
                num_wrong=wrong[nbytes, kind],
            )
        ar, rs, ag = (results[k].time_us for k in COLLECTIVES)
        rows.append(
            SizeRow(
                nbytes=nbytes,
                count=nbytes // element_bytes,
                results=results,
                rs_ag_over_ar=(rs + ag) / ar if ar > 0 else None,
                rs_over_ar=rs / ar if ar > 0 else None,
            )
        )
    by_kind = {k: _mean([r.results[k].busbw_gbps for r in rows]) for k in COLLECTIVES}
    return BenchResult(
        schema_version=SCHEMA_VERSION,
        backend=backend,
        device_type=device_type,
        world_size=world_size,
        dtype=config.dtype,
        timing="cuda_events" if device_type == "cuda" else "perf_counter+barrier",
        config=config,
        env=msgspec.structs.replace(env, world_size=world_size),
        rows=tuple(rows),
        num_wrong=sum(r.results[k].num_wrong for r in rows for k in COLLECTIVES),
        avg_busbw_gbps=_mean([r.results[k].busbw_gbps for r in rows for k in COLLECTIVES]),
        avg_busbw_gbps_by_kind=by_kind,
        notes=tuple(_notes(rows, backend=backend)),
        run_dir=run_dir,
    )


def _notes(rows: list[SizeRow], *, backend: str) -> list[str]:
    """What the measurements say about the split's premise, stated only when measured so."""
    ratios = [r.rs_over_ar for r in rows if r.rs_over_ar is not None]
    if backend != "gloo" or not ratios:
        return []
    median = statistics.median(ratios)
    if median < RS_LIKE_AR:
        return []
    split = statistics.median(r.rs_ag_over_ar for r in rows if r.rs_ag_over_ar is not None)
    return [
        f"gloo: reduce_scatter took {median:.2f}x the all_reduce time (median over sizes; "
        f"{min(ratios):.2f}-{max(ratios):.2f}x), where a ring reduce_scatter moves half of all_reduce's bytes "
        f"(0.5x). On gloo reduce_scatter costs about as much as all_reduce, so RS+AG costs {split:.2f}x AR "
        f"(median): here the split spends more time communicating, and can only win by hiding its all_gathers "
        f"behind compute."
    ]


# ---- renderers (rank 0, from the record only) ---------------------------------------------


def _num(value: float | None, width: int, spec: str) -> str:
    return f"{'-':>{width}}" if value is None or not math.isfinite(value) else f"{value:>{width}{spec}}"


def render_table(result: BenchResult) -> str:
    cfg = result.config
    min_b, max_b, factor = parse_sizes(cfg.sizes)
    lines = [
        f"# profile_overlap bench-collectives  backend: {result.backend} ({result.device_type})  ranks: {result.world_size}  "
        f"dtype: {result.dtype}  minBytes: {min_b}  maxBytes: {max_b}  factor: {factor}  warmup iters: {cfg.warmup}  "
        f"iters: {cfg.iters}  validation: 1",
        f"# time: median over iters of the slowest rank ({result.timing}); size S: bytes of the full array; "
        f"count: its elements (reduce_scatter output and all_gather input: count/{result.world_size})",
        "#",
    ]
    for r in result.env.ranks:
        lines.append(f"#  Rank {r.rank:>3}  Pid {r.pid!s:>7}  on {r.host}  device {r.device}")
    lines.append("#")
    group = "   time   algbw   busbw  #wrong"
    width = len(group)
    lines.append("#" + " " * 23 + "".join(f"{k:^{width + 2}}" for k in COLLECTIVES) + "   rs+ag")
    lines.append("#       size       count" + ("  " + group) * 3 + "     /ar")
    lines.append("#        (B)  (elements)" + ("  " + "   (us)  (GB/s)  (GB/s)        ") * 3 + "     (x)")
    for row in result.rows:
        cells = [f"{row.nbytes:>12}", f"{row.count:>12}"]
        for kind in COLLECTIVES:
            c = row.results[kind]
            cells.append(
                "  "
                + _num(c.time_us, 7, ".1f")
                + " "
                + _num(c.algbw_gbps, 7, ".3f")
                + " "
                + _num(c.busbw_gbps, 7, ".3f")
                + f" {c.num_wrong:>7}"
            )
        cells.append(" " + _num(row.rs_ag_over_ar, 7, ".2f"))
        lines.append("".join(cells))
    verdict = "OK" if result.passed else "FAILED"
    by_kind = ", ".join(f"{k} {_num(v, 0, '.3f').strip()}" for k, v in result.avg_busbw_gbps_by_kind.items())
    lines += [
        f"# Out of bounds values : {result.num_wrong} {verdict}",
        f"# Avg bus bandwidth    : {_num(result.avg_busbw_gbps, 0, '.3f').strip()} GB/s ({by_kind})",
        "#",
    ]
    lines += [f"# Note: {note}" for note in result.notes]
    if result.run_dir:
        lines.append(f"# run folder: {result.run_dir}")
    return "\n".join(lines)


def write_tensorboard(result: BenchResult, run_dir: Path) -> None:
    """Scalars per collective with the size in bytes as the step, so each curve is bandwidth vs size."""
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(log_dir=str(run_dir)) as writer:
        for row in result.rows:
            for kind, c in row.results.items():
                writer.add_scalar(f"bench_collectives/{kind}/time_us", c.time_us, row.nbytes)
                for name in ("algbw_gbps", "busbw_gbps"):
                    value = getattr(c, name)
                    if value is not None:
                        writer.add_scalar(f"bench_collectives/{kind}/{name}", value, row.nbytes)
                writer.add_scalar(f"bench_collectives/{kind}/num_wrong", c.num_wrong, row.nbytes)
            if row.rs_ag_over_ar is not None:
                writer.add_scalar("bench_collectives/rs_ag_over_ar", row.rs_ag_over_ar, row.nbytes)
