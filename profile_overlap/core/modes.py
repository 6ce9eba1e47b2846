"""The registry of modes and phases: what each mode is, written once. Config (the --mode and --modes
choices), the pipelines, the summary (bytes checks, headline names), the renderers, whatif and the
Overlap tab read it. Adding a mode: one entry in MODES and its step function (run/pipelines.py's
PIPELINES, or run/engines.py for one of torch's engines); tests/test_modes_registry.py checks both.
whatif replays a mode once tools/whatif/model.py has its schedule (BUILDERS) and leaves it out until then.
"""

from __future__ import annotations

from dataclasses import dataclass

PHASES = ("forward", "backward", "optimizer")
"""The phases of a training step, in step order (definitions: docs/metrics.md "Phases")."""


@dataclass(frozen=True)
class ModeSpec:
    name: str
    title: str
    """One line: what the mode's step does (the Overlap tab's panel titles)."""
    description: str
    """The report's sentence about the mode."""
    engine: str | None
    """The torch engine that runs the mode (`DistributedDataParallel`, `fully_shard`), or None for this
    package's own pipelines (run/pipelines.py)."""
    sharded: bool
    """Its optimizer updates a 1/N shard of the parameters and keeps 1/N of the optimizer state, so
    its optimizer compute scales with 1/N (whatif)."""
    overlaps: bool
    """Its collectives may run beside compute. False: each is waited for at once, so nothing overlaps
    and its compute times are clean (whatif borrows them)."""
    same_compute: bool
    """Its forward and backward run the model's own operators only, as every such mode does (False for
    fully_shard, whose gathers add copies): whatif may give it a clean mode's compute times."""
    expected_bytes: tuple[tuple[str, str], ...]
    """The (phase, kind) rows that move every parameter byte once per step (definitions: `bytes_ratio`)."""
    resharded_bytes: tuple[tuple[str, str], ...] = ()
    """Rows of expected_bytes that move the bytes only when the engine reshards after forward (else none)."""
    in_compare: bool = False
    """Run by --mode compare without --modes."""
    unit_calls: str | None = None
    """The collective its backward issues once per communication unit, last unit first (whatif cuts the
    model into units by them), or None: its backward collectives are buckets filled in gradient order."""
    flags: tuple[str, ...] = ()
    """The run flags (config fields) that apply to this mode only; a rerun of another mode puts them back
    at their defaults (`advise --verify`), and the replay of the run takes the mode's from the config."""
    exclusive_flags: tuple[str, ...] = ()
    """Of its flags, those run/config.py refuses at a non-default value when the mode does not run."""
    advise: tuple[str, ...] = ()
    """What `advise` may change in it: the candidates replayed with one knob changed
    (tools/advise/candidates.py's CANDIDATES), or given unreplayed ("bucket-view")."""

    @property
    def step_headline(self) -> str:
        """Its headline name for the median step time (`report --fail-if`, the compare report)."""
        return f"{self.name.replace('-', '_')}_step_ms"


MODES: dict[str, ModeSpec] = {
    spec.name: spec
    for spec in (
        ModeSpec(
            name="sequential",
            title="sequential: all_reduce, then Adam, then forward",
            description="sequential (like DDP without its overlap): backward, then a blocking all_reduce of every gradient "
            "bucket, then Adam on all parameters; communication and compute take turns.",
            engine=None,
            sharded=False,
            overlaps=False,
            same_compute=True,
            expected_bytes=(("backward", "all_reduce"),),
            in_compare=True,
            unit_calls="all_reduce",
        ),
        ModeSpec(
            name="split",
            title="split: reduce_scatter, Adam on the 1/N shard, all_gather overlapped with forward",
            description="split (like ZeRO-2 / FSDP): in backward, each unit's bucket is reduce_scattered as soon as its "
            "gradients are ready, beside the backward of earlier units; each rank runs Adam on its own 1/N shard only (so it "
            "keeps 1/N of the optimizer state) and all_gathers the updated shards asynchronously, and the next forward pass "
            "waits for each unit's gather just before that unit.",
            engine=None,
            sharded=True,
            overlaps=True,
            same_compute=True,
            # Not its all_gathers: those of the last profiled step run after its ProfilerStep window.
            expected_bytes=(("backward", "reduce_scatter"),),
            in_compare=True,
            unit_calls="reduce_scatter",
            flags=("split_prefetch",),
            advise=("split-prefetch",),
        ),
        ModeSpec(
            name="split-blocking",
            title="split-blocking: the split, each collective waited for at once (no overlap)",
            description="split-blocking: split's collectives and compute, each collective waited for at once, so nothing "
            "overlaps; against split it measures what overlapping wins.",
            engine=None,
            sharded=True,
            overlaps=False,
            same_compute=True,
            # It waits for each all_gather at once, inside the ProfilerStep window.
            expected_bytes=(("backward", "reduce_scatter"), ("optimizer", "all_gather")),
            in_compare=True,
            unit_calls="reduce_scatter",
            flags=("split_prefetch",),
        ),
        ModeSpec(
            name="ddp",
            title="ddp: torch's DistributedDataParallel, bucketed all_reduce during backward",
            description="ddp: torch's DistributedDataParallel; autograd hooks all_reduce gradient buckets asynchronously "
            "while backward still runs, and every rank keeps full parameters, gradients and Adam state.",
            engine="DistributedDataParallel",
            sharded=False,
            overlaps=True,
            same_compute=True,
            expected_bytes=(("backward", "all_reduce"),),
            flags=("bucket_cap_mb", "first_bucket_mb"),
            exclusive_flags=("first_bucket_mb",),
            advise=("ddp-buckets", "bucket-view"),
        ),
        ModeSpec(
            name="fsdp2",
            title="fsdp2: torch's fully_shard, all_gather before each unit, reduce_scatter in backward",
            description="fsdp2: torch's fully_shard on every unit; each unit's parameters are all_gathered before its "
            "forward (and again in backward when resharded after forward) and its gradients reduce_scattered in backward; "
            "Adam updates this rank's 1/N shards.",
            engine="fully_shard",
            sharded=True,
            overlaps=True,
            same_compute=False,
            expected_bytes=(("forward", "all_gather"), ("backward", "all_gather"), ("backward", "reduce_scatter")),
            resharded_bytes=(("backward", "all_gather"),),
            unit_calls="reduce_scatter",
            flags=("reshard_after_forward", "fsdp_prefetch", "fsdp_group"),
            exclusive_flags=("fsdp_group",),
            advise=("fsdp2-reshard", "fsdp2-prefetch", "fsdp2-group"),
        ),
    )
}
"""The modes a run can train, in the order of --help and of --modes' list."""

COMPARE_MODES = tuple(name for name, spec in MODES.items() if spec.in_compare)
"""What --mode compare runs without --modes: the schedules whose differences are only the collectives
and whether they overlap. The engines are opt-in: each adds a full run."""
ENGINE_MODES = tuple(name for name, spec in MODES.items() if spec.engine)
"""The modes torch's engines run (run/engines.py); the others are run/pipelines.py's."""
SHARDED_MODES = frozenset(name for name, spec in MODES.items() if spec.sharded)
UNIT_MODES = tuple(
    sorted(
        (name for name, spec in MODES.items() if spec.unit_calls), key=lambda name: (not MODES[name].same_compute, not MODES[name].sharded)
    )
)
"""The modes whose backward calls cut the model into units, in the order whatif takes the cuts from:
the clean sharded schedules (their reduce_scatters are the units' own), then sequential, then fully_shard's."""

SPEEDUP_BASELINE, SPEEDUP_MODE = "sequential", "split"
"""`speedup` is the baseline's median step time over the mode's (definitions: `speedup`)."""
YIELD_MODE, YIELD_BASELINE = "split", "split-blocking"
"""The overlap yield and the interference compare split against split-blocking: the same collectives
and compute, overlapped and not."""

JOB_MODE = "job"
"""The one mode of a user's profiled job (api/): its traces, no pipeline of ours."""
TRACE_MODE = "trace"
"""The one mode of a folder of traces we did not run (`analyze DIR --tensorboard`)."""
RECORD_ONLY_TITLES = {
    JOB_MODE: "job: a profiled training job (trace_handler)",
    TRACE_MODE: "trace: analyze DIR --tensorboard",
}
"""Modes that a record may hold but no run trains: their one-line titles."""


def title(mode: str) -> str:
    """The one-line title of any mode a record may hold; its name for one this version does not know."""
    spec = MODES.get(mode)
    return spec.title if spec else RECORD_ONLY_TITLES.get(mode, mode)
