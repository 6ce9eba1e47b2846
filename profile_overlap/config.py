"""The `run` command's configuration: one frozen dataclass, its flags, and its checks.

Cross-field checks live in `__post_init__` and raise ValueError naming the flag; the CLI turns
them into a one-line error. Nothing here imports torch, so `--help` is instant.
"""

from __future__ import annotations

import argparse
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


VERBOSE_HELP = (
    "show everything every rank prints (torch, gloo and profiler logging included) instead of "
    "our lines only; by default it goes to <run folder>/logs/rank<r>.log (also: PROFILE_OVERLAP_DEBUG=1)"
)


def add_verbose_flag(parser) -> None:
    """--verbose, shared by the job commands; it is not part of any config (it changes no result)."""
    parser.add_argument("--verbose", action="store_true", help=VERBOSE_HELP)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    d = Config()
    parser.epilog = (
        "Examples:\n"
        "  torchrun --standalone --nproc-per-node 4 -m profile_overlap --mode compare\n"
        "  python -m profile_overlap --nproc-per-node 2 --layers 16 --dim 1024   # launches its own ranks"
    )
    parser.formatter_class = argparse.RawDescriptionHelpFormatter

    wl = parser.add_argument_group("pipeline and workload (K layers of d x d weights, an Adam step, a forward pass)")
    wl.add_argument(
        "--mode",
        default=d.mode,
        choices=MODE_CHOICES,
        help="sequential: all_reduce then compute; split: reduce_scatter, shard update, async all_gather "
        "overlapped with the forward pass; compare: both on the same data (default: %(default)s)",
    )
    wl.add_argument("--layers", type=int, default=d.layers, metavar="K", help="layers, one gradient bucket each (default: %(default)s)")
    wl.add_argument("--dim", type=int, default=d.dim, metavar="d", help="layer width; must divide by the world size (default: %(default)s)")
    wl.add_argument("--batch", type=int, default=d.batch, metavar="B", help="forward-pass rows (default: %(default)s)")
    wl.add_argument("--dtype", default=d.dtype, choices=DTYPES, help="parameter/gradient dtype (default: %(default)s)")
    wl.add_argument("--lr", type=float, default=d.lr, help="Adam learning rate (default: %(default)s)")
    wl.add_argument("--seed", type=int, default=d.seed, help="seed for weights, batch and gradients (default: %(default)s)")

    st = parser.add_argument_group("steps and profiling")
    st.add_argument(
        "--warmup-steps", type=int, default=d.warmup_steps, help="untimed steps per mode; verification runs on them (default: %(default)s)"
    )
    st.add_argument("--steps", type=int, default=d.steps, help="timed, unprofiled steps per mode (default: %(default)s)")
    st.add_argument("--profile-steps", type=int, default=d.profile_steps, help="profiled steps per mode (default: %(default)s)")
    st.add_argument(
        "--profile",
        action=argparse.BooleanOptionalAction,
        default=d.profile,
        help="record torch.profiler traces; --no-profile times steps only (default: on)",
    )
    st.add_argument("--gzip", action=argparse.BooleanOptionalAction, default=d.gzip, help="gzip the traces (default: on)")

    dist = parser.add_argument_group("distributed")
    dist.add_argument("--backend", default=d.backend, choices=BACKENDS, help="auto: nccl with CUDA, else gloo (default: %(default)s)")
    dist.add_argument(
        "--nproc-per-node",
        type=int,
        default=None,
        metavar="N",
        help="without torchrun: ranks to launch on this machine (default: one per GPU, or 4 on CPU)",
    )
    dist.add_argument(
        "--timeout",
        dest="timeout_s",
        type=float,
        default=d.timeout_s,
        metavar="SECONDS",
        help="process-group timeout; a dead or hung rank ends the job within about this long (default: %(default)s)",
    )

    out = parser.add_argument_group("output")
    out.add_argument("--out", default=d.out, help="parent folder of run folders (default: %(default)s)")
    out.add_argument("--name", default=None, help="run folder name (default: <YYYYmmdd-HHMMSS>-<mode>-<backend>-w<N>)")
    add_verbose_flag(out)


def from_args(args: argparse.Namespace) -> Config:
    names = {f.name for f in dataclasses.fields(Config)}
    return Config(**{k: v for k, v in vars(args).items() if k in names})


def main(args: argparse.Namespace) -> int:
    from profile_overlap.core.errors import UserError

    try:
        config = from_args(args)
    except ValueError as err:
        raise UserError(str(err)) from None
    from profile_overlap import launch

    return launch.launch_or_run(config)
