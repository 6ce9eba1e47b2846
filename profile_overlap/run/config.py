"""Configuration: the `run` command's Config, nested by section (its workload, its schedule of
steps, torch's engines, and the job flags every job command shares: JobConfig), and the one dtype
table.

Each field is a flag, declared once: run/flags.py makes the argparse flags (help: the docstring
under the field) and the rerun command from it, and builds a config from flat flags in one place
(flags.build: the command line, a record's config, a test's keywords: `Config.of(dim=64)`). A
section's own checks live in its `__post_init__`, the checks across sections in Config's; each
raises ValueError naming the flag, which the CLI turns into a one-line error. Nothing here imports
torch, so `--help` is instant.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeVar, overload

from profile_overlap.core.dtypes import DTYPE_BYTES
from profile_overlap.core.modes import COMPARE_MODES, ENGINE_MODES, MODES
from profile_overlap.run import flags
from profile_overlap.run.flags import flag

if TYPE_CHECKING:
    from profile_overlap.record.config import RunConfig

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


@dataclass(frozen=True)
class Workload:
    """What trains: the pipeline (mode) and its model and data."""

    mode: Mode = flag("compare", group=WORKLOAD)
    """sequential: backward, blocking all_reduce, Adam; split: reduce_scatter in backward, Adam on the shard,
    async all_gather under the next forward; split-blocking: split with every collective waited for at once;
    ddp, fsdp2: torch's DistributedDataParallel and fully_shard; compare: several (see --modes)."""
    compare_modes: str | None = flag(None, option="--modes", metavar="M1,M2,...", group=WORKLOAD)
    """With --mode compare: the modes to run, in this order, comma-separated; speedups are relative to the
    first (default: sequential,split,split-blocking)."""
    model: Model = flag("mlp", group=WORKLOAD)
    """mlp: K tanh layers of d x d and an MSE loss; transformer: K pre-norm decoder blocks, an embedding and an LM head."""
    layers: int = flag(None, metavar="K", group=WORKLOAD)  # None: its --model's, filled in
    """K: layers (mlp) or decoder blocks (transformer); each is one communication bucket (default: 8 for mlp, 4 for transformer)."""
    dim: int = flag(None, metavar="d", group=WORKLOAD)
    """d: model width; must divide by --heads (default: 512 for mlp, 256 for transformer)."""
    batch: int = flag(None, metavar="B", group=WORKLOAD)
    """B: rows (mlp) or sequences (transformer) per rank and step (default: 64 for mlp, 8 for transformer)."""
    heads: int = flag(4, group=WORKLOAD)
    """Attention heads (transformer)."""
    seq_len: int = flag(64, metavar="T", group=WORKLOAD)
    """T: tokens per sequence (transformer)."""
    dtype: Dtype = flag("float32", group=WORKLOAD)
    """Parameter and gradient dtype (Adam's moments are float32 whatever it is)."""
    seed: int = flag(0, group=WORKLOAD)
    """Seeds the initial weights and every batch (per rank and step)."""
    lr: float = flag(1e-3, group=WORKLOAD)
    """Adam learning rate."""
    split_prefetch: int = flag(0, metavar="N", group=WORKLOAD)
    """split: before unit k's forward, wait for the all_gathers of units k to k+N (0: unit k's only, just before it runs)."""

    def __post_init__(self) -> None:
        flags.check_choices(self)
        for name, value in MODEL_DEFAULTS[self.model].items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, value)
        for option, value in (
            ("--layers", self.layers),
            ("--dim", self.dim),
            ("--batch", self.batch),
            ("--heads", self.heads),
            ("--seq-len", self.seq_len),
        ):
            if value <= 0:
                raise ValueError(f"{option} must be a positive integer, got {value}")
        if self.model == "transformer" and self.dim % self.heads:
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
        self.check_prefetch("--split-prefetch", self.split_prefetch)

    def check_prefetch(self, option: str, value: int) -> None:
        if not 0 <= value < self.num_units:
            raise ValueError(
                f"{option} {value} is out of range: this model has {self.num_units} communication units, "
                f"so a unit can prefetch 0 to {self.num_units - 1} units ahead"
            )

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
        return self.layers + 2 if self.model == "transformer" else self.layers


@dataclass(frozen=True)
class Schedule:
    """The steps each mode trains: untimed, timed and profiled."""

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
    profile: bool = flag(True, group=STEPS)
    """Record torch.profiler traces; --no-profile times steps only."""
    gzip: bool = flag(True, group=STEPS)
    """Write the traces gzipped (.pt.trace.json.gz)."""

    def __post_init__(self) -> None:
        for option, value in (("--steps", self.steps), ("--repeats", self.repeats)):
            if value <= 0:
                raise ValueError(f"{option} must be a positive integer, got {value}")
        for option, value in (("--warmup-steps", self.warmup_steps), ("--profile-steps", self.profile_steps)):
            if value < 0:
                raise ValueError(f"{option} must be 0 or more, got {value}")
        if self.profile and self.profile_steps == 0:
            raise ValueError("--profile-steps 0 records nothing: give 1 or more, or pass --no-profile")


@dataclass(frozen=True)
class Engines:
    """How torch's engines (--mode ddp, fsdp2) cut the model into communication."""

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
    fsdp_group: int = flag(1, metavar="N", group=ENGINE)
    """fsdp2: communication units per fully_shard call, fully_shard(units[k:k+N]): one all_gather and one
    reduce_scatter for N consecutive units (1: one per unit; the number of units: the whole model at once)."""

    def __post_init__(self) -> None:
        flags.check_choices(self)
        if self.bucket_cap_mb <= 0:
            raise ValueError(f"--bucket-cap-mb must be positive, got {self.bucket_cap_mb:g}")
        if self.first_bucket_mb is not None and self.first_bucket_mb <= 0:
            raise ValueError(f"--first-bucket-mb must be positive, got {self.first_bucket_mb:g}")

    @property
    def reshard(self) -> bool:
        return self.reshard_after_forward == "true"


S = TypeVar("S", bound="JobSection")


class JobSection:
    """Base of a job command's config (run, sweep, bench-collectives): its job flags are its `job`
    section. to_dict() is flat, as the command line, config.json and env.json spell the flags."""

    job: JobConfig
    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]  # every subclass is a dataclass

    @classmethod
    def of(cls: type[S], **values: object) -> S:
        """The config from flat flags (`Config.of(dim=64, out="x")`); flags.build places each in its section."""
        return flags.build(cls, values)

    def to_dict(self) -> dict[str, Any]:
        """Every flag's value, flat (config.json)."""
        return flags.flat_dict(self)

    def digest(self) -> str:
        """Hash of the flags every rank must agree on (compared across ranks at start-up)."""
        return flags.digest(self)

    def check_world_size(self, world_size: int) -> None:
        """Checks that need the world size, made on every rank before any collective (job.process_group)."""


@dataclass(frozen=True)
class Config(JobSection):
    """The `run` command's flags, by section."""

    workload: Workload = field(default_factory=Workload)
    """What trains: the mode, the model, its data."""
    schedule: Schedule = field(default_factory=Schedule)
    """The untimed, timed and profiled steps."""
    engines: Engines = field(default_factory=Engines)
    """torch's engines' shape (ddp, fsdp2)."""
    job: JobConfig = field(default_factory=JobConfig)
    """The job flags (distributed and output)."""

    FLAG_ORDER: ClassVar[tuple[str, ...]] = (
        *("mode", "compare_modes", "model", "layers", "dim", "batch", "heads", "seq_len", "dtype"),
        *("steps", "repeats", "warmup_steps", "profile_steps", "seed", "profile", "gzip", "lr"),
        *("bucket_cap_mb", "first_bucket_mb", "reshard_after_forward", "fsdp_prefetch", "split_prefetch", "fsdp_group"),
        *JOB_FLAGS,
    )
    """The flags' flat order: config.json's keys, the record's, the rerun command's, and --help's within each group."""

    def __post_init__(self) -> None:
        w, e = self.workload, self.engines
        w.check_prefetch("--fsdp-prefetch", e.fsdp_prefetch)
        if e.first_bucket_mb is not None and "ddp" not in w.modes:
            raise ValueError("--first-bucket-mb sets a ddp bucket: add ddp to the modes (--mode ddp) or drop it")
        if not 1 <= e.fsdp_group <= w.num_units:
            raise ValueError(
                f"--fsdp-group {e.fsdp_group} is out of range: this model has {w.num_units} communication units, "
                f"so a fully_shard call can take 1 to {w.num_units} of them"
            )
        if e.fsdp_group > 1:
            if "fsdp2" not in w.modes:
                raise ValueError("--fsdp-group sets fsdp2's units: add fsdp2 to the modes (--mode fsdp2) or drop it")
            if e.fsdp_prefetch >= self.fsdp_units:
                raise ValueError(
                    f"--fsdp-prefetch {e.fsdp_prefetch} is out of range with --fsdp-group {e.fsdp_group}: "
                    f"fsdp2 has {self.fsdp_units} units, so a unit can prefetch 0 to {self.fsdp_units - 1} units ahead"
                )
        if w.dtype == "float16" and set(w.modes) & set(ENGINE_MODES):
            raise ValueError(
                "--dtype float16 with ddp or fsdp2: torch.optim.Adam keeps its moments in float16, where they flush to zero; "
                "use float32 or bfloat16"
            )

    @property
    def fsdp_units(self) -> int:
        """fsdp2's units: fully_shard calls of --fsdp-group consecutive communication units each."""
        return -(-self.workload.num_units // self.engines.fsdp_group)

    def check_world_size(self, world_size: int) -> None:
        """Checks that need the world size, made on every rank before any collective."""
        w = self.workload
        if w.dim % world_size:
            raise ValueError(
                f"--dim {w.dim} is not divisible by the world size {world_size}: "
                f"each rank owns dim/{world_size} rows of every weight, as FSDP shards them; use a multiple of {world_size}"
            )
        if any(MODES[m].engine == "fully_shard" for m in w.modes) and w.model == "transformer" and w.seq_len % world_size:
            raise ValueError(
                f"--seq-len {w.seq_len} is not divisible by the world size {world_size}: fsdp2 shards the position "
                f"embedding's {w.seq_len} rows over the ranks; use a multiple of {world_size}"
            )


T = TypeVar("T", bound=JobSection)


@overload
def from_args(args: argparse.Namespace) -> Config: ...
@overload
def from_args(args: argparse.Namespace, cls: type[T]) -> T: ...
def from_args(args: argparse.Namespace, cls: type[JobSection] = Config) -> JobSection:
    """The config of `cls` (a JobSection; the run's Config) from parsed flags; ValueError names a bad flag."""
    return flags.from_namespace(cls, args)


def from_record(cfg: RunConfig, **changes: object) -> Config:
    """A run's Config again from its record (metrics.json's config), with `changes` (flat flags) made:
    what advise replays and reruns. A flag an older run did not write takes today's default;
    --nproc-per-node is the launcher's, left to the rerun. A changed config the run's checks refuse is
    their ValueError."""
    run_flags = {f.name for f in flags.flags(Config)} - {"nproc_per_node"}
    values = {name: getattr(cfg, name) for name in cfg.present() if name in run_flags}
    return flags.build(Config, {**values, **changes})
