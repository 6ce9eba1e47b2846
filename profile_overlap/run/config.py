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
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from profile_overlap.core.dtypes import DTYPE_BYTES
from profile_overlap.core.modes import COMPARE_MODES, ENGINE_MODES, MODES
from profile_overlap.run import flags
from profile_overlap.run.flags import flag

if TYPE_CHECKING:
    Dtype = str
    Mode = str
else:
    # The choices of --dtype and --mode, written once: the dtype table's keys and the mode registry's.
    Dtype = Literal[tuple(DTYPE_BYTES)]
    Mode = Literal[tuple([*MODES, "compare"])]
Model = Literal["mlp", "transformer"]
Backend = Literal["auto", "nccl", "gloo"]

# --help groups
WORKLOAD = "pipeline and workload (a model trained with forward, autograd backward and Adam)"

MODEL_DEFAULTS = {
    "mlp": {"layers": 8, "dim": 512, "batch": 64},
    "transformer": {"layers": 4, "dim": 256, "batch": 8},
}
"""--layers, --dim and --batch when not given, per --model (a transformer step costs far more per row)."""
STEPS = "steps and profiling"
ENGINE = "torch's engines (--mode ddp, fsdp2)"
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
    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]  # every subclass is a dataclass

    def __getattr__(self, name: str) -> Any:
        # Reached only when ordinary lookup fails.
        if name not in JOB_FLAGS:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return getattr(self.job, name)

    def to_dict(self) -> dict[str, Any]:
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
    """sequential: backward, blocking all_reduce, Adam; split: reduce_scatter in backward, Adam on the shard,
    async all_gather under the next forward; split-blocking: split with every collective waited for at once;
    ddp, fsdp2: torch's DistributedDataParallel and fully_shard; compare: several (see --modes)."""
    compare_modes: str | None = flag(None, option="--modes", metavar="M1,M2,...", group=WORKLOAD)
    """With --mode compare: the modes to run, in this order, comma-separated; speedups are relative to the
    first (default: sequential,split,split-blocking)."""
    model: Model = flag("mlp", group=WORKLOAD)
    """mlp: K tanh layers of d x d and an MSE loss; transformer: K pre-norm decoder blocks, an embedding and an LM head."""
    layers: int | None = flag(None, metavar="K", group=WORKLOAD)
    """K: layers (mlp) or decoder blocks (transformer); each is one communication bucket (default: 8 for mlp, 4 for transformer)."""
    dim: int | None = flag(None, metavar="d", group=WORKLOAD)
    """d: model width; must divide by --heads (default: 512 for mlp, 256 for transformer)."""
    batch: int | None = flag(None, metavar="B", group=WORKLOAD)
    """B: rows (mlp) or sequences (transformer) per rank and step (default: 64 for mlp, 8 for transformer)."""
    heads: int = flag(4, group=WORKLOAD)
    """Attention heads (transformer)."""
    seq_len: int = flag(64, metavar="T", group=WORKLOAD)
    """T: tokens per sequence (transformer)."""
    dtype: Dtype = flag("float32", group=WORKLOAD)
    """Parameter and gradient dtype (Adam's moments are float32 whatever it is)."""
    steps: int = flag(10, group=STEPS)
    """Timed, unprofiled steps per mode and block (step-time statistics come from these)."""
    repeats: int = flag(1, metavar="R", group=STEPS)
    """R: blocks of --steps timed steps per mode, in R rounds; each round runs one block of every mode, the order
    rotating, so step times and speedups get 95% intervals over the blocks (1: one block per mode; use 5 or more:
    with fewer blocks the intervals are too narrow)."""
    warmup_steps: int = flag(2, group=STEPS)
    """Untimed steps per mode before timing; the AllReduce == AllGather(ReduceScatter) check runs on them."""
    profile_steps: int = flag(2, group=STEPS)
    """Profiled steps per mode (after one profiler warmup step)."""
    seed: int = flag(0, group=WORKLOAD)
    """Seeds the initial weights and every batch (per rank and step)."""
    profile: bool = flag(True, group=STEPS)
    """Record torch.profiler traces; --no-profile times steps only."""
    gzip: bool = flag(True, group=STEPS)
    """Write the traces gzipped (.pt.trace.json.gz)."""
    lr: float = flag(1e-3, group=WORKLOAD)
    """Adam learning rate."""
    bucket_cap_mb: float = flag(25.0, metavar="MiB", group=ENGINE)
    """ddp: DistributedDataParallel's gradient bucket size."""
    first_bucket_mb: float | None = flag(None, metavar="MiB", group=ENGINE)
    """ddp: the first bucket's size (the gradients ready first, the model's last parameters), the others'
    --bucket-cap-mb: DistributedDataParallel(bucket_cap_mb_list=[first, cap]) (default: the same as the others)."""
    reshard_after_forward: Literal["true", "false"] = flag("true", group=ENGINE)
    """fsdp2: free each block's gathered parameters after forward and gather them again in backward."""
    fsdp_prefetch: int = flag(0, metavar="N", group=ENGINE)
    """fsdp2: explicitly prefetch the next N units' all_gathers in forward and backward
    (set_modules_to_forward_prefetch / set_modules_to_backward_prefetch); 0: FSDP2's own implicit prefetch."""
    split_prefetch: int = flag(0, metavar="N", group=WORKLOAD)
    """split: before unit k's forward, wait for the all_gathers of units k to k+N (0: unit k's only, just before it runs)."""
    fsdp_group: int = flag(1, metavar="N", group=ENGINE)
    """fsdp2: communication units per fully_shard call, fully_shard(units[k:k+N]): one all_gather and one
    reduce_scatter for N consecutive units (1: one per unit; the number of units: the whole model at once)."""
    job: JobConfig = field(default_factory=JobConfig)
    """The job flags (distributed and output)."""

    def __post_init__(self) -> None:
        flags.check_choices(self)
        for name, value in MODEL_DEFAULTS[self.model].items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, value)
        layers, dim, batch = self.layers, self.dim, self.batch
        assert layers is not None and dim is not None and batch is not None  # the model's defaults, just filled in
        for option, value in (
            ("--layers", layers),
            ("--dim", dim),
            ("--batch", batch),
            ("--steps", self.steps),
            ("--repeats", self.repeats),
            ("--heads", self.heads),
            ("--seq-len", self.seq_len),
        ):
            if value <= 0:
                raise ValueError(f"{option} must be a positive integer, got {value}")
        for option, value in (("--warmup-steps", self.warmup_steps), ("--profile-steps", self.profile_steps)):
            if value < 0:
                raise ValueError(f"{option} must be 0 or more, got {value}")
        if self.model == "transformer" and dim % self.heads:
            raise ValueError(f"--dim {self.dim} is not divisible by --heads {self.heads}: each head gets dim/heads channels")
        if self.compare_modes is not None:
            if self.mode != "compare":
                raise ValueError(f"--modes goes with --mode compare, not --mode {self.mode}: drop --modes or use --mode compare")
            names = [m.strip() for m in self.compare_modes.split(",")]
            unknown = [m for m in names if m not in MODES]
            if unknown:
                raise ValueError(f"--modes: unknown mode {unknown[0]!r}; choose from {', '.join(MODES)}")
            if len(set(names)) != len(names) or len(names) < 2:
                raise ValueError(f"--modes {self.compare_modes!r}: give two or more different modes, comma-separated")
        for option, value in (("--fsdp-prefetch", self.fsdp_prefetch), ("--split-prefetch", self.split_prefetch)):
            if not 0 <= value < self.num_units:
                raise ValueError(
                    f"{option} {value} is out of range: this model has {self.num_units} communication units, "
                    f"so a unit can prefetch 0 to {self.num_units - 1} units ahead"
                )
        if self.bucket_cap_mb <= 0:
            raise ValueError(f"--bucket-cap-mb must be positive, got {self.bucket_cap_mb:g}")
        self._check_engine_shape()
        if self.dtype == "float16" and set(self.modes) & set(ENGINE_MODES):
            raise ValueError(
                "--dtype float16 with ddp or fsdp2: torch.optim.Adam keeps its moments in float16, where they flush to zero; "
                "use float32 or bfloat16"
            )
        if self.profile and self.profile_steps == 0:
            raise ValueError("--profile-steps 0 records nothing: give 1 or more, or pass --no-profile")

    def _check_engine_shape(self) -> None:
        """--first-bucket-mb and --fsdp-group: in range, and only with the mode they change."""
        if self.first_bucket_mb is not None:
            if self.first_bucket_mb <= 0:
                raise ValueError(f"--first-bucket-mb must be positive, got {self.first_bucket_mb:g}")
            if "ddp" not in self.modes:
                raise ValueError("--first-bucket-mb sets a ddp bucket: add ddp to the modes (--mode ddp) or drop it")
        if not 1 <= self.fsdp_group <= self.num_units:
            raise ValueError(
                f"--fsdp-group {self.fsdp_group} is out of range: this model has {self.num_units} communication units, "
                f"so a fully_shard call can take 1 to {self.num_units} of them"
            )
        if self.fsdp_group > 1:
            if "fsdp2" not in self.modes:
                raise ValueError("--fsdp-group sets fsdp2's units: add fsdp2 to the modes (--mode fsdp2) or drop it")
            if self.fsdp_prefetch >= self.fsdp_units:
                raise ValueError(
                    f"--fsdp-prefetch {self.fsdp_prefetch} is out of range with --fsdp-group {self.fsdp_group}: "
                    f"fsdp2 has {self.fsdp_units} units, so a unit can prefetch 0 to {self.fsdp_units - 1} units ahead"
                )

    @property
    def fsdp_units(self) -> int:
        """fsdp2's units: fully_shard calls of --fsdp-group consecutive communication units each."""
        return -(-self.num_units // self.fsdp_group)

    @property
    def modes(self) -> tuple[str, ...]:
        """The modes this run trains, in order (the first is the reference of speedups and checks)."""
        if self.mode != "compare":
            return (self.mode,)
        if self.compare_modes is None:
            return COMPARE_MODES
        return tuple(m.strip() for m in self.compare_modes.split(","))

    @property
    def num_units(self) -> int:
        """Communication units of the model: each mlp layer; the transformer's embedding, each block and its head."""
        assert self.layers is not None  # filled from MODEL_DEFAULTS by __post_init__
        return self.layers + 2 if self.model == "transformer" else self.layers

    @property
    def reshard(self) -> bool:
        return self.reshard_after_forward == "true"

    def check_world_size(self, world_size: int) -> None:
        """Checks that need the world size, made on every rank before any collective."""
        assert self.dim is not None  # filled in by __post_init__
        if self.dim % world_size:
            raise ValueError(
                f"--dim {self.dim} is not divisible by the world size {world_size}: "
                f"each rank owns dim/{world_size} rows of every weight, as FSDP shards them; use a multiple of {world_size}"
            )
        if any(MODES[m].engine == "fully_shard" for m in self.modes) and self.model == "transformer" and self.seq_len % world_size:
            raise ValueError(
                f"--seq-len {self.seq_len} is not divisible by the world size {world_size}: fsdp2 shards the position "
                f"embedding's {self.seq_len} rows over the ranks; use a multiple of {world_size}"
            )


def from_args(args: argparse.Namespace, cls: type = Config):
    """The config of `cls` (a JobSection) from parsed flags; ValueError names a bad flag."""
    return flags.from_namespace(cls, args)
