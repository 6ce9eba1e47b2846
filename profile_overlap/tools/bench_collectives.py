"""`bench-collectives`: all_reduce, reduce_scatter and all_gather timed and checked, nccl-tests style.

    torchrun --standalone --nproc-per-node 4 -m profile_overlap bench-collectives --sizes 1K:16M:4
    python -m profile_overlap bench-collectives --nproc-per-node 4 --sizes 1K:256M --dtype bfloat16

Per size S (bytes of the full array, nccl-tests' convention) and per collective: `--warmup`
untimed iterations, then `--iters` timed ones. An iteration's time is its slowest rank's; the
table shows the median. CPU (gloo): a barrier before each iteration, perf_counter around the
call. GPU (NCCL): CUDA events around each call, no host sync inside the loop.

Correctness beside speed, like nccl-tests' `-c`: every rank's input holds known values,
x(r, i) = (r + 1) * (1 + i mod 7) at index i of the full array, so the reduced sum is
N(N+1)/2 * (1 + i mod 7) and the gathered array is x(i // chunk, i). After the last timed
iteration every element of every rank's output is compared against that closed form; `#wrong`
counts the elements outside the dtype's tolerance, over all ranks.

The record (BenchResult) is built once, then rendered: console table (rank 0), bench.json in
the run folder (and --json), TensorBoard scalars with the size in bytes as the step.

Test-only fault: PROFILE_OVERLAP_FAULT=corrupt:rank=R:step=I:layer=C adds 1 to rank R's output
of collective C (index into COLLECTIVES) at size index I, before the check.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from profile_overlap.analysis.bandwidth import algbw_gbps, busbw_gbps
from profile_overlap.core import rank_output
from profile_overlap.core.files import BENCH_JSON, CONFIG_JSON, ENV_JSON
from profile_overlap.run.config import BACKENDS, DTYPES, check_job_fields

COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather")
SCHEMA_VERSION = 1
COMMAND = "bench-collectives"
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
# nccl-tests' size suffixes are powers of 1024.
_SUFFIX = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}
_PATTERN_PERIOD = 7
"""x(r, i) = (r + 1) * (1 + i mod 7): 7 is odd, so every rank's chunk starts at a different phase
and a chunk landing in the wrong place is caught."""
RS_LIKE_AR = 0.75
"""reduce_scatter / all_reduce time at or above which the table says reduce_scatter costs about as
much as all_reduce (a ring reduce_scatter moves half of all_reduce's bytes: ideally 0.5)."""


def parse_size(text: str) -> int:
    """'64', '1K', '16M', '1G' -> bytes (K = 1024, as nccl-tests)."""
    match = re.fullmatch(r"(\d+)([KMG]?)B?", text.strip().upper())
    if not match:
        raise ValueError(f"--sizes: {text!r} is not a size; write bytes with an optional K, M or G suffix, e.g. 1K")
    return int(match.group(1)) * _SUFFIX[match.group(2)]


def parse_sizes(spec: str) -> tuple[int, int, int]:
    """'MIN:MAX[:FACTOR]' (or one size) -> (min_bytes, max_bytes, factor); factor defaults to 2."""
    parts = spec.split(":")
    if len(parts) > 3:
        raise ValueError(f"--sizes {spec!r}: write MIN:MAX[:FACTOR], e.g. 1K:256M or 1K:16M:4")
    min_bytes = parse_size(parts[0])
    max_bytes = parse_size(parts[1]) if len(parts) > 1 else min_bytes
    factor = 2
    if len(parts) == 3:
        if not parts[2].isdigit() or int(parts[2]) < 2:
            raise ValueError(f"--sizes {spec!r}: the factor must be an integer of 2 or more, e.g. 1K:16M:4")
        factor = int(parts[2])
    if min_bytes <= 0:
        raise ValueError(f"--sizes {spec!r}: the smallest size must be positive")
    if max_bytes < min_bytes:
        raise ValueError(f"--sizes {spec!r}: MAX is below MIN; write MIN:MAX, e.g. 1K:16M")
    return min_bytes, max_bytes, factor


def size_ladder(min_bytes: int, max_bytes: int, factor: int) -> list[int]:
    sizes, size = [], min_bytes
    while size <= max_bytes:
        sizes.append(size)
        size *= factor
    return sizes


@dataclass(frozen=True)
class BenchConfig:
    sizes: str = "1K:16M:4"
    """MIN:MAX[:FACTOR] in bytes of the full array; sizes MIN, MIN*F, ... up to MAX (F defaults to 2)."""
    dtype: str = "float32"
    """Element type of the buffers."""
    iters: int = 20
    """Timed iterations per size and collective (the median is reported)."""
    warmup: int = 5
    """Untimed iterations per size and collective before timing."""
    backend: str = "auto"
    """auto picks nccl when CUDA is available, else gloo."""
    out: str = "runs"
    """Folder that receives the run folder."""
    name: str | None = None
    """Run folder name; default <YYYYmmdd-HHMMSS>-bench-collectives-<backend>-w<N>."""
    json: str | None = None
    """Also write the record to this path."""
    timeout_s: float = 300.0
    """Process-group timeout."""
    nproc_per_node: int | None = field(default=None, compare=False)
    """Ranks to launch when run without torchrun (default: one per GPU, or 4 on CPU)."""

    def __post_init__(self) -> None:
        parse_sizes(self.sizes)
        if self.dtype not in DTYPES:
            raise ValueError(f"--dtype {self.dtype!r} is not one of {', '.join(DTYPES)}")
        if self.backend not in BACKENDS:
            raise ValueError(f"--backend {self.backend!r} is not one of {', '.join(BACKENDS)}")
        if self.iters <= 0:
            raise ValueError(f"--iters must be a positive integer, got {self.iters}")
        if self.warmup < 0:
            raise ValueError(f"--warmup must be 0 or more, got {self.warmup}")
        check_job_fields(self)

    def check_world_size(self, world_size: int) -> None:
        """Checks that need the world size (job.process_group calls it on every rank)."""
        self.byte_sizes(world_size)

    def digest(self) -> str:
        """Hash of the fields every rank must agree on (job.process_group compares them)."""
        fields = {k: v for k, v in self.to_dict().items() if k not in ("nproc_per_node", "name", "out", "json")}
        return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]

    def byte_sizes(self, world_size: int) -> list[int]:
        """The ladder, each size rounded down to whole elements split evenly over the ranks (as
        nccl-tests does); sizes that round to the same value are measured once."""
        unit = world_size * DTYPE_BYTES[self.dtype]
        sizes = sorted({s // unit * unit for s in size_ladder(*parse_sizes(self.sizes))})
        if sizes[0] == 0:
            raise ValueError(
                f"--sizes {self.sizes!r}: sizes below {unit} B cannot be split into one "
                f"{self.dtype} element per rank on {world_size} ranks; start at {unit} or more"
            )
        return sizes

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


# ---- the record ---------------------------------------------------------------------------


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
    config: dict
    env: dict
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

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


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
    env: dict,
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
        config=config.to_dict(),
        env=env,
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


# ---- measuring (every rank) ---------------------------------------------------------------


def _pattern(torch, *, count: int, device):
    """Per index i of the full array: 1 + i mod 7, as float32 (exact in every dtype)."""
    return (torch.arange(count, device=device) % _PATTERN_PERIOD + 1).to(torch.float32)


def _expected(torch, kind: str, *, count: int, rank: int, world_size: int, device):
    """The closed form of this rank's output of `kind`, as float32."""
    pattern = _pattern(torch, count=count, device=device)
    chunk = count // world_size
    if kind == "all_gather":
        return (torch.arange(count, device=device) // chunk + 1).to(torch.float32) * pattern
    reduced = world_size * (world_size + 1) / 2 * pattern
    return reduced if kind == "all_reduce" else reduced[rank * chunk : (rank + 1) * chunk]


def _count_wrong(torch, out, expected, *, tolerance: float) -> int:
    err = (out.to(torch.float32) - expected).abs()
    bound = tolerance * expected.abs().clamp(min=1.0)
    # NaN compares False with <=, so it counts as wrong.
    return int((~(err <= bound)).sum())


def _time_iterations(torch, dist, call, *, refill, iters: int, warmup: int, device) -> list[float]:
    """This rank's time per timed iteration in µs; `refill` runs untimed before each call."""
    for _ in range(warmup):
        refill()
        call()
    if device.type == "cuda":
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
        dist.barrier()
        for start, end in events:
            refill()
            start.record()
            call()
            end.record()
        torch.cuda.synchronize(device)
        return [start.elapsed_time(end) * 1e3 for start, end in events]
    times = []
    for _ in range(iters):
        refill()
        dist.barrier()
        t0 = time.perf_counter()
        call()
        times.append((time.perf_counter() - t0) * 1e6)
    return times


def _measure_size(torch, dist, *, nbytes: int, size_index: int, config: BenchConfig, device, fault) -> tuple[dict, dict]:
    """This rank's times (µs per iteration) and wrong-element counts for the three collectives."""
    from profile_overlap.run.harness import DTYPES as TORCH_DTYPES
    from profile_overlap.run.pipelines import all_gather_single, reduce_scatter_single
    from profile_overlap.run.verify import TOLERANCE

    rank, world = dist.get_rank(), dist.get_world_size()
    dtype = TORCH_DTYPES[config.dtype]
    count = nbytes // DTYPE_BYTES[config.dtype]
    chunk = count // world
    mine = slice(rank * chunk, (rank + 1) * chunk)
    full_input = ((rank + 1) * _pattern(torch, count=count, device=device)).to(dtype)

    buffers = {
        "all_reduce": (full_input, torch.empty_like(full_input)),
        "reduce_scatter": (full_input, torch.empty(chunk, device=device, dtype=dtype)),
        "all_gather": (full_input[mine].clone(), torch.empty(count, device=device, dtype=dtype)),
    }

    def call_for(kind: str):
        src, out = buffers[kind]
        if kind == "all_reduce":
            return lambda: dist.all_reduce(out, op=dist.ReduceOp.SUM)
        if kind == "reduce_scatter":
            return lambda: reduce_scatter_single(out, src, op=dist.ReduceOp.SUM)
        return lambda: all_gather_single(out, src)

    times, wrong = {}, {}
    for index, kind in enumerate(COLLECTIVES):
        src, out = buffers[kind]
        # all_reduce works in place: restore its input before every iteration, outside the timing.
        refill = (lambda out=out, src=src: out.copy_(src)) if kind == "all_reduce" else (lambda: None)
        times[kind] = _time_iterations(torch, dist, call_for(kind), refill=refill, iters=config.iters, warmup=config.warmup, device=device)
        if fault and fault.kind == "corrupt" and fault.hits(rank=rank, step=size_index, layer=index):
            out.add_(1)
        expected = _expected(torch, kind, count=count, rank=rank, world_size=world, device=device)
        wrong[kind] = _count_wrong(torch, out, expected, tolerance=TOLERANCE[dtype])
        del expected
    return times, wrong


def run_rank(config: BenchConfig) -> int:
    """Entry point on every rank (under torchrun, or started by launch.launch_or_run). The
    harness's process group and failure handling: a fault marks the run folder failed, in one line."""
    import torch
    import torch.distributed as dist

    from profile_overlap.run import job

    with job.process_group(config) as (backend, device):
        world = dist.get_world_size()
        run_dir = job.make_dir(lambda: job.create_fresh_dir(config, backend=backend, world=world, label=COMMAND))
        with job.failure_recorded(run_dir):
            result = bench_in_folder(torch, dist, config, backend=backend, device=device, run_dir=run_dir)
    return 0 if result.passed else 1


def bench_in_folder(torch, dist, config: BenchConfig, *, backend: str, device, run_dir: Path) -> BenchResult:
    from profile_overlap.core import status as run_status
    from profile_overlap.core.io import write_json_atomic
    from profile_overlap.run import environment
    from profile_overlap.run.pipelines import Fault

    world, rank = dist.get_world_size(), dist.get_rank()
    sizes = config.byte_sizes(world)
    env = environment.environment(backend, device)
    if rank == 0:
        write_json_atomic(run_dir / CONFIG_JSON, config.to_dict())
        write_json_atomic(run_dir / ENV_JSON, env)
        run_status.write(run_dir, "running")
    fault = Fault.from_env()

    times_us: dict[tuple[int, str], list[float]] = {}
    wrong: dict[tuple[int, str], int] = {}
    for index, nbytes in enumerate(sizes):
        mine = _measure_size(torch, dist, nbytes=nbytes, size_index=index, config=config, device=device, fault=fault)
        everyone: list = [None] * world
        dist.all_gather_object(everyone, mine)
        for kind in COLLECTIVES:
            # An iteration takes as long as its slowest rank.
            times_us[nbytes, kind] = [max(t) for t in zip(*(r[0][kind] for r in everyone))]
            wrong[nbytes, kind] = sum(r[1][kind] for r in everyone)

    result = build_result(
        times_us=times_us,
        wrong=wrong,
        sizes=sizes,
        element_bytes=DTYPE_BYTES[config.dtype],
        world_size=world,
        backend=backend,
        device_type=device.type,
        config=config,
        env=env,
        run_dir=str(run_dir),
    )
    if rank == 0:
        write_json_atomic(run_dir / BENCH_JSON, result.to_json())
        if config.json:
            write_json_atomic(Path(config.json), result.to_json())
        write_tensorboard(result, run_dir)
        print(render_table(result), file=rank_output.out(), flush=True)
        if result.passed:
            run_status.write(run_dir, "succeeded")
        else:
            run_status.write(run_dir, "failed", reason=f"{result.num_wrong} wrong values in collective outputs")
    dist.barrier()
    return result


# ---- renderers (rank 0, from the record only) ---------------------------------------------


def _num(value: float | None, width: int, spec: str) -> str:
    return f"{'-':>{width}}" if value is None or not math.isfinite(value) else f"{value:>{width}{spec}}"


def render_table(result: BenchResult) -> str:
    cfg = result.config
    min_b, max_b, factor = parse_sizes(cfg["sizes"])
    lines = [
        f"# profile_overlap bench-collectives  backend: {result.backend} ({result.device_type})  ranks: {result.world_size}  "
        f"dtype: {result.dtype}  minBytes: {min_b}  maxBytes: {max_b}  factor: {factor}  warmup iters: {cfg['warmup']}  "
        f"iters: {cfg['iters']}  validation: 1",
        f"# time: median over iters of the slowest rank ({result.timing}); size S: bytes of the full array; "
        f"count: its elements (reduce_scatter output and all_gather input: count/{result.world_size})",
        "#",
    ]
    for r in result.env.get("ranks", []):
        lines.append(f"#  Rank {r['rank']:>3}  Pid {r['pid']:>7}  on {r['host']}  device {r['device']}")
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


# ---- CLI ----------------------------------------------------------------------------------
