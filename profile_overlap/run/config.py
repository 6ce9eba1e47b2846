"""The `run` command's configuration: one frozen dataclass, its flags, and its checks.

Cross-field checks live in `__post_init__` and raise ValueError naming the flag; the CLI turns
them into a one-line error. Nothing here imports torch, so `--help` is instant.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field

MODES = ("sequential", "split")
MODE_CHOICES = (*MODES, "compare")
DTYPES = ("float32", "bfloat16", "float16")
BACKENDS = ("auto", "nccl", "gloo")


def check_job_fields(config) -> None:
    """Checks of the flags every job command shares (run, sweep, bench-collectives)."""
    if config.timeout_s <= 0:
        raise ValueError(f"--timeout must be positive, got {config.timeout_s}")
    if config.nproc_per_node is not None and config.nproc_per_node <= 0:
        raise ValueError(f"--nproc-per-node must be positive, got {config.nproc_per_node}")
    if config.name is not None and (not config.name or "/" in config.name or config.name in (".", "..")):
        raise ValueError(f"--name {config.name!r} must be a plain folder name (no '/')")


@dataclass(frozen=True)
class Config:
    mode: str = "compare"
    """sequential, split, or compare (both, on the same data, in one job)."""
    layers: int = 8
    """K: number of d x d layers; each layer's gradient is one communication bucket."""
    dim: int = 512
    """d: each layer is a d x d weight matrix, so P = K * d^2 parameters."""
    batch: int = 64
    """B: rows in the forward pass (B x d @ d x d per layer)."""
    dtype: str = "float32"
    """Parameter and gradient dtype. Adam state is kept in the same dtype."""
    steps: int = 10
    """Timed, unprofiled steps per mode (step-time statistics come from these)."""
    warmup_steps: int = 2
    """Untimed steps per mode before timing; the AllReduce == AllGather(ReduceScatter) check runs on them."""
    profile_steps: int = 2
    """Profiled steps per mode (after one profiler warmup step)."""
    backend: str = "auto"
    """auto picks nccl when CUDA is available, else gloo."""
    out: str = "runs"
    """Folder that receives the run folder."""
    name: str | None = None
    """Run folder name; default <YYYYmmdd-HHMMSS>-<mode>-<backend>-w<N>."""
    seed: int = 0
    """Seeds the initial weights, the batch and every gradient (per rank, step and layer)."""
    profile: bool = True
    """Record torch.profiler traces (--no-profile times steps only)."""
    gzip: bool = True
    """Write traces as .pt.trace.json.gz."""
    timeout_s: float = 300.0
    """Process-group timeout: a dead or hung rank ends the job within about this long."""
    lr: float = 1e-3
    """Adam learning rate."""
    nproc_per_node: int | None = field(default=None, compare=False)
    """Ranks to launch when run without torchrun (default: one per GPU, or 4 on CPU)."""

    def __post_init__(self) -> None:
        if self.mode not in MODE_CHOICES:
            raise ValueError(f"--mode {self.mode!r} is not one of {', '.join(MODE_CHOICES)}")
        if self.dtype not in DTYPES:
            raise ValueError(f"--dtype {self.dtype!r} is not one of {', '.join(DTYPES)}")
        if self.backend not in BACKENDS:
            raise ValueError(f"--backend {self.backend!r} is not one of {', '.join(BACKENDS)}")
        for flag, value in (("--layers", self.layers), ("--dim", self.dim), ("--batch", self.batch), ("--steps", self.steps)):
            if value <= 0:
                raise ValueError(f"{flag} must be a positive integer, got {value}")
        for flag, value in (("--warmup-steps", self.warmup_steps), ("--profile-steps", self.profile_steps)):
            if value < 0:
                raise ValueError(f"{flag} must be 0 or more, got {value}")
        if self.profile and self.profile_steps == 0:
            raise ValueError("--profile-steps 0 records nothing: give 1 or more, or pass --no-profile")
        check_job_fields(self)

    @property
    def modes(self) -> tuple[str, ...]:
        return MODES if self.mode == "compare" else (self.mode,)

    def check_world_size(self, world_size: int) -> None:
        """Checks that need the world size, made on every rank before any collective."""
        if self.dim % world_size:
            raise ValueError(
                f"--dim {self.dim} is not divisible by the world size {world_size}: "
                f"each rank owns dim/{world_size} rows of every layer; use a multiple of {world_size}"
            )

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def digest(self) -> str:
        """Hash of the fields every rank must agree on (compared across ranks at start-up)."""
        fields = {k: v for k, v in self.to_dict().items() if k not in ("nproc_per_node", "name", "out")}
        return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]
