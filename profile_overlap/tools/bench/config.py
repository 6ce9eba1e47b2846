"""`bench-collectives`' configuration: its flags (a BenchConfig, with the job flags as its `job`
section) and the ladder of sizes they describe. Nothing here imports torch, so `--help` is instant.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from profile_overlap.run.config import DTYPE_BYTES, OUTPUT, Dtype, JobConfig, JobSection
from profile_overlap.run.flags import check_choices, flag

COMMAND = "bench-collectives"
COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather")
# nccl-tests' size suffixes are powers of 1024.
_SUFFIX = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}


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
class BenchConfig(JobSection):
    """The `bench-collectives` command's flags."""

    sizes: str = flag("1K:16M:4", metavar="MIN:MAX[:F]")
    """Bytes of the full array: MIN, MIN*F, ... up to MAX; K/M/G = 1024^1/2/3; F defaults to 2."""
    dtype: Dtype = "float32"
    """Element type of the buffers."""
    iters: int = 20
    """Timed iterations per size and collective (the table shows their median)."""
    warmup: int = 5
    """Untimed iterations per size and collective before timing."""
    job: JobConfig = field(default_factory=JobConfig)
    """The job flags (distributed and output)."""
    json: str | None = flag(None, metavar="OUT", group=OUTPUT, local=True)
    """Also write the record (bench.json) to OUT."""

    def __post_init__(self) -> None:
        parse_sizes(self.sizes)
        check_choices(self)
        if self.iters <= 0:
            raise ValueError(f"--iters must be a positive integer, got {self.iters}")
        if self.warmup < 0:
            raise ValueError(f"--warmup must be 0 or more, got {self.warmup}")

    def check_world_size(self, world_size: int) -> None:
        """Checks that need the world size (job.process_group calls it on every rank)."""
        self.byte_sizes(world_size)

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
