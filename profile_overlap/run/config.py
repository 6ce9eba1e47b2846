"""Configuration: the job flags every job command shares (JobConfig), the `run` command's Config
that holds them as its `job` section, and the one dtype table.

Each field is a flag, declared once: run/flags.py makes the argparse flags (help: the docstring
under the field) and the rerun command from it. Cross-field checks live in `__post_init__` and
raise ValueError naming the flag; the CLI turns them into a one-line error. Nothing here imports
torch, so `--help` is instant.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Literal, get_args

from profile_overlap.core.dtypes import DTYPE_BYTES
from profile_overlap.run import flags
from profile_overlap.run.flags import flag

Dtype = Literal[tuple(DTYPE_BYTES)]  # the names, written once: the table's keys
PipelineMode = Literal["sequential", "split"]
Mode = Literal[PipelineMode, "compare"]
Backend = Literal["auto", "nccl", "gloo"]
MODES: tuple[str, ...] = get_args(PipelineMode)

# --help groups
WORKLOAD = "pipeline and workload (K layers of d x d weights, an Adam step, a forward pass)"
STEPS = "steps and profiling"
DISTRIBUTED = "distributed"
OUTPUT = "output"


@dataclass(frozen=True)
class JobConfig:
    """The flags of a job (run, sweep, bench-collectives): where and how its ranks run, where its folder goes."""

    backend: Backend = flag("auto", group=DISTRIBUTED)
    """auto: nccl with CUDA, else gloo."""
    out: str = flag("runs", group=OUTPUT, local=True)
    """Parent folder of run folders."""
    name: str | None = flag(None, group=OUTPUT, local=True)
    """Run folder name, a plain name (default: <YYYYmmdd-HHMMSS>-<mode or command>-<backend>-w<N>)."""
    timeout_s: float = flag(300.0, option="--timeout", metavar="SECONDS", group=DISTRIBUTED)
    """Process-group timeout; a dead or hung rank ends the job within about this long."""
    nproc_per_node: int | None = flag(None, metavar="N", group=DISTRIBUTED, local=True, compare=False)
    """Without torchrun: ranks to launch on this machine (default: one per GPU, or 4 on CPU)."""

    def __post_init__(self) -> None:
        flags.check_choices(self)
        if self.timeout_s <= 0:
            raise ValueError(f"--timeout must be positive, got {self.timeout_s}")
        if self.nproc_per_node is not None and self.nproc_per_node <= 0:
            raise ValueError(f"--nproc-per-node must be positive, got {self.nproc_per_node}")
        if self.name is not None and (not self.name or "/" in self.name or self.name in (".", "..")):
            raise ValueError(f"--name {self.name!r} must be a plain folder name (no '/')")


JOB_FLAGS = tuple(f.name for f in dataclasses.fields(JobConfig))


class JobSection:
    """Base of a command's config that holds the job flags in its `job` field (a JobConfig section).

    The flags stay one flat namespace, as the command line, config.json and env.json spell them:
    `config.backend` reads `config.job.backend`, to_dict() is flat, and with @flat_job_flags the
    constructor and dataclasses.replace take them flat too.
    """

    job: JobConfig

    def __getattr__(self, name: str):
        # Reached only when ordinary lookup fails.
        if name not in JOB_FLAGS:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return getattr(self.job, name)

    def to_dict(self) -> dict:
        """Every flag's value, flat (config.json)."""
        return flags.flat_dict(self)

    def digest(self) -> str:
        """Hash of the flags every rank must agree on (compared across ranks at start-up)."""
        return flags.digest(self)


def flat_job_flags(cls):
    """Let the dataclass `cls` (a JobSection) take the job flags flat: Config(out="x") is
    Config(job=JobConfig(out="x")), and so is dataclasses.replace(config, out="x")."""
    init = cls.__init__

    @functools.wraps(init)
    def __init__(self, *args, **kwargs) -> None:
        flat = {name: kwargs.pop(name) for name in JOB_FLAGS if name in kwargs}
        if flat:
            kwargs["job"] = dataclasses.replace(kwargs.get("job") or JobConfig(), **flat)
        init(self, *args, **kwargs)

    cls.__init__ = __init__
    return cls


@flat_job_flags
@dataclass(frozen=True)
class Config(JobSection):
    """The `run` command's flags."""

    mode: Mode = flag("compare", group=WORKLOAD)
    """sequential: all_reduce then compute; split: reduce_scatter, shard update, async all_gather under the forward; compare: both."""
    layers: int = flag(8, metavar="K", group=WORKLOAD)
    """K: layers of d x d weights, P = K * d^2 parameters; each layer's gradient is one communication bucket."""
    dim: int = flag(512, metavar="d", group=WORKLOAD)
    """d: layer width; must divide by the world size."""
    batch: int = flag(64, metavar="B", group=WORKLOAD)
    """B: forward-pass rows (B x d @ d x d per layer)."""
    dtype: Dtype = flag("float32", group=WORKLOAD)
    """Parameter and gradient dtype (Adam's moments are float32 whatever it is)."""
    steps: int = flag(10, group=STEPS)
    """Timed, unprofiled steps per mode (step-time statistics come from these)."""
    warmup_steps: int = flag(2, group=STEPS)
    """Untimed steps per mode before timing; the AllReduce == AllGather(ReduceScatter) check runs on them."""
    profile_steps: int = flag(2, group=STEPS)
    """Profiled steps per mode (after one profiler warmup step)."""
    seed: int = flag(0, group=WORKLOAD)
    """Seeds the initial weights, the batch and every gradient (per rank, step and layer)."""
    profile: bool = flag(True, group=STEPS)
    """Record torch.profiler traces; --no-profile times steps only."""
    gzip: bool = flag(True, group=STEPS)
    """Write the traces gzipped (.pt.trace.json.gz)."""
    lr: float = flag(1e-3, group=WORKLOAD)
    """Adam learning rate."""
    job: JobConfig = field(default_factory=JobConfig)
    """The job flags (distributed and output)."""

    def __post_init__(self) -> None:
        flags.check_choices(self)
        for option, value in (("--layers", self.layers), ("--dim", self.dim), ("--batch", self.batch), ("--steps", self.steps)):
            if value <= 0:
                raise ValueError(f"{option} must be a positive integer, got {value}")
        for option, value in (("--warmup-steps", self.warmup_steps), ("--profile-steps", self.profile_steps)):
            if value < 0:
                raise ValueError(f"{option} must be 0 or more, got {value}")
        if self.profile and self.profile_steps == 0:
            raise ValueError("--profile-steps 0 records nothing: give 1 or more, or pass --no-profile")

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


def from_args(args: argparse.Namespace, cls: type = Config):
    """The config of `cls` (a JobSection) from parsed flags; ValueError names a bad flag."""
    return flags.from_namespace(cls, args)
