"""The metrics record: one tree of frozen msgspec Structs per run, written once as metrics.json
(field names are the JSON keys; record/summary.py reads it back with msgspec).

Renderers (console, TensorBoard, reports) read this record and never recompute. Every number
here is defined in docs/metrics.md.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from profile_overlap.core import modes
from profile_overlap.core.io import write_bytes_atomic
from profile_overlap.record.analysis import AnalysisRecord, as_json, json_bytes
from profile_overlap.record.config import RunConfig
from profile_overlap.record.exposed import Exposed
from profile_overlap.record.noise import NoiseSummary, percentile

SCHEMA_VERSION = 3
"""2: the record carries its summary (records of version 1 get it when they are read).
3: three modes (sequential, split, split-blocking); the summary adds per-phase numbers to each mode
(ModeSummary.phases), the overlap yield and the interference per phase; the headline adds
split_blocking_step_ms, overlap_yield_ms and overlap_yield_pct. Any set of modes in the run's order
(torch's ddp and fsdp2 too): each mode's collectives per phase (ModeSummary.phase_collectives), their
bytes against the model's parameter bytes (ModeSummary.bytes_checks) and every mode's speedup over the
first (RunSummary.speedup_vs_first). Records of versions 1 and 2 get their summary recomputed when
they are read (record.load.load_metrics). Keys added since, without a new version:
--repeats (StepTimes.blocks_ms, RunMetrics.rounds, RunSummary.noise; absent from older records, read as none);
the facts of a record built from traces alone (RunMetrics.job; older job records get it from their config when read)."""

JOB_MODE = modes.JOB_MODE
"""The one mode of a job's record (core/modes.py)."""
FOLDER_MODE = modes.TRACE_MODE
"""The one mode of a bare folder's record (core/modes.py)."""
JOB = "job"
"""JobFacts.kind of a job traced by profile_overlap.trace_handler (api/)."""
FOLDER = "folder"
"""JobFacts.kind of a bare folder of others' traces (`analyze --tensorboard`)."""


class StepTimes(msgspec.Struct, frozen=True, kw_only=True):
    """Unprofiled step times of one mode. A step's time is the slowest rank's."""

    times_ms: tuple[float, ...]
    """Empty when the mode stopped before its timed steps (a failed verification)."""
    median_ms: float | None
    p10_ms: float | None
    p90_ms: float | None
    mean_ms: float | None
    min_ms: float | None
    max_ms: float | None
    method: str
    """cuda_events (GPU) or perf_counter+barrier (CPU)."""
    blocks_ms: tuple[tuple[float, ...], ...] = ()
    """times_ms cut into its blocks, one per round (--repeats); empty in records before --repeats."""

    @classmethod
    def from_times(cls, times_ms: Sequence[float], *, method: str, blocks_ms: Sequence[Sequence[float]] = ()) -> StepTimes:
        if not times_ms:
            return cls(times_ms=(), median_ms=None, p10_ms=None, p90_ms=None, mean_ms=None, min_ms=None, max_ms=None, method=method)
        ordered = sorted(times_ms)
        return cls(
            times_ms=tuple(times_ms),
            blocks_ms=tuple(tuple(b) for b in blocks_ms) or (tuple(times_ms),),
            median_ms=statistics.median(ordered),
            p10_ms=percentile(ordered, 10),
            p90_ms=percentile(ordered, 90),
            mean_ms=statistics.fmean(ordered),
            min_ms=ordered[0],
            max_ms=ordered[-1],
            method=method,
        )


class Memory(msgspec.Struct, frozen=True, kw_only=True):
    """Bytes one rank holds in one mode."""

    rank: int
    param_bytes: int
    grad_bytes: int
    optimizer_state_bytes: int
    peak_allocated_bytes: int | None
    """torch.cuda.max_memory_allocated during the mode; None on CPU."""


class CheckResult(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    passed: bool
    max_abs_err: float | None
    """None when some compared value was NaN or infinite."""
    tolerance: float
    num_checked: int
    worst_rank: int
    worst_step: int | None
    worst_layer: int | None

    @property
    def error_text(self) -> str:
        """max_abs_err for display: 3 significant digits, or 'not finite'."""
        return "not finite" if self.max_abs_err is None else f"{self.max_abs_err:.3g}"

    def describe(self) -> str:
        where = f"rank {self.worst_rank}"
        if self.worst_step is not None:
            where += f", step {self.worst_step}"
        if self.worst_layer is not None:
            where += f", layer {self.worst_layer}"
        verdict = "OK" if self.passed else "FAILED"
        error = "values not finite" if self.max_abs_err is None else f"max error {self.max_abs_err:.3g}"
        return f"{self.name}: {verdict} ({error} at {where}; tolerance {self.tolerance:.3g} relative; {self.num_checked} checks)"


class RankRange(msgspec.Struct, frozen=True, kw_only=True):
    """A value over ranks: its mean, least and greatest."""

    mean: float
    min: float
    max: float


class CollectiveRow(msgspec.Struct, frozen=True, kw_only=True):
    """One collective kind of one mode, over ranks (definitions: "Per mode")."""

    kind: str
    size_per_call: float | None
    calls: tuple[int, int]
    """min and max over ranks (equal in a healthy run)."""
    time_per_call_us: RankRange
    algbw_gbps: RankRange | None
    busbw_gbps: RankRange | None


class PhaseSummary(msgspec.Struct, frozen=True, kw_only=True):
    """One phase (forward, backward, optimizer) of one mode: per profiled step, mean over ranks
    (definitions: "Phases")."""

    phase: str
    window_ms: float
    comm_ms: float
    compute_ms: float
    hidden_ms: float
    """Communication hidden behind this phase's compute (the analysis record's overlap_us)."""
    exposed_comm_ms: float
    """Communication exposed inside this phase's window: comm_ms - hidden_ms."""
    sources: tuple[str, ...] = ()
    """Where the ranks' windows of this phase came from: "labels", or torch's own ranges in unlabelled steps (Metrics, Phases)."""


class OverlapYield(msgspec.Struct, frozen=True, kw_only=True):
    """The step time won by overlapping (definitions: `overlap_yield_ms`, `overlap_yield_pct`)."""

    ms: float
    """median step time of `baseline` - median step time of `mode`."""
    pct_of_comm: float | None
    """100 * ms / comm_ms of `baseline`; None when the baseline has no profiled communication."""
    mode: str = "split"
    baseline: str = "split-blocking"
    within_noise: bool | None = None
    """The two modes' step times within run-to-run noise (definitions: `within_noise`)."""


class PhaseInterference(msgspec.Struct, frozen=True, kw_only=True):
    """How much slower a phase's compute ran beside communication (definitions: `interference_pct`)."""

    phase: str
    compute_ms: float | None
    """The phase's compute_ms in the overlapped mode (split); None when it lacks the phase."""
    baseline_compute_ms: float | None
    """The phase's compute_ms in the baseline (split-blocking); None when it lacks the phase."""
    pct: float | None
    """100 * (compute_ms / baseline_compute_ms - 1); None when either is missing or zero."""
    low_pct: float | None = None
    high_pct: float | None = None
    """The 95% interval of pct: a percentile bootstrap over each mode's (rank, profiled step) phase
    compute times; None with fewer than two of them in either mode, and in records before it."""


class PhaseCollective(msgspec.Struct, frozen=True, kw_only=True):
    """One collective kind issued in one phase of one mode: per profiled step, mean over ranks
    (definitions: "Communication by phase")."""

    phase: str
    """forward, backward, optimizer, or other (issued outside every phase)."""
    kind: str
    calls_per_step: float
    bytes_per_step: float | None
    """S (the nccl-tests size) summed over the calls; None when some call's size is unknown."""
    ms_per_step: float


class BytesCheck(msgspec.Struct, frozen=True, kw_only=True):
    """A mode's collective bytes per step of one kind and phase against the model's parameter bytes
    (definitions: `bytes_ratio`)."""

    phase: str
    kind: str
    ratio: float | None
    """bytes per step / the model's parameter bytes; None when a size is unknown."""
    expected: float
    """1.0: every parameter byte once per step; 0.0: none (fsdp2's backward all_gather without resharding)."""
    matches: bool | None
    """expected <= ratio <= expected + the padding allowance (record.summary.BYTES_PADDING); None when unknown."""


class RelativeSpeedup(msgspec.Struct, frozen=True, kw_only=True):
    """One mode against the run's first mode (definitions: `speedup_vs_first`)."""

    mode: str
    baseline: str
    """The run's first mode."""
    speedup: float | None
    """baseline's median step time / this mode's (1.0 for the first mode); None unless both were timed."""
    within_noise: bool | None
    """The two step times within run-to-run noise; None for the first mode itself or untimed modes."""


class ModeSummary(msgspec.Struct, frozen=True, kw_only=True):
    """One mode's derived numbers (definitions: "Per mode"). Profiled times are per profiled
    step, mean over ranks; None without profiling. Step times stay in ModeMetrics.step_time."""

    mode: str
    num_ranks: int
    comm_ms: float | None
    compute_ms: float | None
    overlap_ms: float | None
    exposed_comm_ms: float | None
    overlap_pct: float | None
    collectives: tuple[CollectiveRow, ...]
    optimizer_state_bytes: int
    param_bytes: int
    grad_bytes: int
    peak_allocated_bytes: int | None
    slowest_rank: int | None
    """The rank the others wait for (the analysis record's slowest_rank)."""
    wait_share_pct: tuple[tuple[int, float | None], ...] = ()
    """(rank, 100 * wait_us / (wait_us + transfer_us)) per rank, in rank order; None without collective time."""
    phases: tuple[PhaseSummary, ...] = ()
    """Per phase, in forward, backward, optimizer order; empty when the traces carry no phase labels."""
    phase_collectives: tuple[PhaseCollective, ...] = ()
    """Per phase (forward, backward, optimizer, other) and kind; empty without phase attribution."""
    bytes_checks: tuple[BytesCheck, ...] = ()
    """The (phase, kind) rows whose bytes this mode should move per step; empty when it cannot be checked."""


class RunSummary(msgspec.Struct, frozen=True, kw_only=True):
    """Every number derived from the run's measurements, computed once when the record is built
    (record/summary.py); renderers only read it."""

    modes: dict[str, ModeSummary]
    """In the run's order (the first mode is the reference of speedup_vs_first)."""
    headline_mode: str
    """The mode whose overlap the headline reports: split, else the first mode."""
    headline: dict[str, float | None]
    """The numbers `report --fail-if` and `--compare` work on (definitions: "Headline names")."""
    within_noise: bool | None
    """Sequential and split step times within run-to-run noise (definitions: `within_noise`); None
    unless both modes were timed."""
    overlap_yield: OverlapYield | None = None
    """split against split-blocking; None unless both were timed."""
    interference: tuple[PhaseInterference, ...] = ()
    """Per phase of split or split-blocking, in phase order; empty unless both were profiled with phase labels."""
    speedup_vs_first: tuple[RelativeSpeedup, ...] = ()
    """Every mode against the first, in the run's order (the first included)."""
    noise: NoiseSummary | None = None
    """The intervals over blocks and the rule every within_noise here follows (record/noise.py)."""


class ModeMetrics(msgspec.Struct, frozen=True, kw_only=True):
    mode: str
    step_time: StepTimes
    memory: tuple[Memory, ...]
    checks: tuple[CheckResult, ...]
    trace_dir: str | None
    """Folder of this mode's traces, relative to the run folder."""
    analysis: AnalysisRecord | None
    """The `analyze --json` record of this mode's traces (schema in docs/outputs.md); None without profiling."""
    model_param_bytes: int | None = None
    """Bytes of the model's parameters (all of them, unsharded and unpadded); None in records before schema 3."""

    @property
    def exposed(self) -> Exposed | None:
        """The analysis record's `exposed` (record/exposed.py); None without it (records before it)."""
        return self.analysis.exposed if self.analysis else None


class RankEnv(msgspec.Struct, frozen=True, kw_only=True):
    """Where one rank ran."""

    rank: int
    host: str | None = None
    """"?" in a folder of others' traces; None where a rank did not record it."""
    pid: int | None = None
    local_rank: int | None = None
    node_rank: int | None = None
    device: str | None = None
    """The GPU's name, or the CPU's."""


class Env(msgspec.Struct, frozen=True, kw_only=True):
    """env.json: versions, hosts, ranks and devices, and the command that reruns the job. None where
    the record's maker did not know it (a job's ranks record theirs; a bare folder of traces has
    only its world size)."""

    date: str | None = None
    """When the run started (UTC, ISO 8601)."""
    command: str | None = None
    """The command line that reruns it."""
    launcher: str | None = None
    """torchrun, python (this package's own launcher) or "own job"."""
    python: str | None = None
    torch: str | None = None
    cuda: str | None = None
    nccl: str | None = None
    gloo: str | None = None
    backend: str | None = None
    device_type: str | None = None
    world_size: int
    num_nodes: int | None = None
    hosts: tuple[str, ...] = ()
    ranks: tuple[RankEnv, ...] = ()


class JobFacts(msgspec.Struct, frozen=True, kw_only=True):
    """What a record built from traces alone covers: a job's folder (JOB) or a bare folder of traces
    (FOLDER). Runs of ours have none."""

    kind: str
    """JOB or FOLDER."""
    source: str
    """The folder the traces were read from."""
    trace_files: int | None
    """None in a bare folder's record written before RunMetrics.job."""
    profiled_steps: int
    """ProfilerStep windows found (the record's step times are theirs)."""
    profiled_ranks: tuple[int, ...]
    """The ranks that wrote traces."""
    missing_ranks: tuple[int, ...] = ()
    """Ranks of the world that wrote none (never profiled, or their traces are elsewhere)."""
    dropped_traces: int = 0
    """Traces the job dropped while writing them (a full disk)."""
    cycles: str = "all"
    """The profiler cycles the record covers: all, or one cycle while the job runs."""


class Speedup(msgspec.Struct, frozen=True, kw_only=True):
    measured: float
    """sequential median step time / split median step time."""
    predicted: float | None
    """(comm_us + compute_us) / max(comm_us, compute_us) of the sequential mode: the ideal if all of
    the sequential mode's communication could hide behind its compute."""


INDENTED_RANKS = 64
"""metrics.json is indented up to this many ranks in a mode (the report's per-rank tables stop there too)."""


class RunMetrics(msgspec.Struct, frozen=True, kw_only=True):
    schema_version: int
    run_dir: str
    config: RunConfig
    """The run's flags (config.json); a job's or a folder's own few facts."""
    env: Env
    modes: dict[str, ModeMetrics]
    checks: tuple[CheckResult, ...]
    """Checks across modes (final parameters of every mode equal to the first mode's)."""
    speedup: Speedup | None
    summary: RunSummary | None = None
    """None only while the record is being built (record.summary.with_summary fills it)."""
    rounds: tuple[tuple[str, ...], ...] = ()
    """The order the modes ran their blocks of timed steps in, one tuple per round (--repeats)."""
    job: JobFacts | None = None
    """What a record built from traces alone covers; None for a run of ours."""
    unit_param_bytes: tuple[tuple[int, ...], ...] = ()
    """Bytes of each of the model's parameters, unit by unit, each unit's in `parameters()` order
    (definitions: `unit_param_bytes`); () for traces alone and in records before it."""

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.all_checks())

    def all_checks(self) -> list[CheckResult]:
        return [c for m in self.modes.values() for c in m.checks] + list(self.checks)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunMetrics:
        """The record of JSON already parsed, as it stands (record/load.py also converts older schemas)."""
        metrics = msgspec.convert(data, cls)
        return msgspec.structs.replace(metrics, config=metrics.config.with_keys(data.get("config")))

    def to_json(self) -> dict[str, Any]:
        """The record as JSON has it (metrics.json, report.json): the config with the keys it was read with."""
        plain: dict[str, Any] = as_json(self)
        plain["config"] = self.config.to_json()
        return plain

    def json_bytes(self, *, indent: int | None = 2) -> bytes:
        """The record's JSON file (to_json's object), encoded once from the structs: the config with the
        keys it was read with, every other field as its struct."""
        fields: dict[str, Any] = {name: getattr(self, name) for name in self.__struct_fields__}
        fields["config"] = self.config.to_json()
        return json_bytes(fields, indent=indent)

    def write(self, path: Path) -> Path:
        """metrics.json, atomically: indented for reading up to INDENTED_RANKS ranks in a mode; above, on one
        line (at 1,024 ranks indentation makes it 2.6x larger, and the Overlap tab fetches and parses all of it)."""
        ranks = max((len(m.analysis.ranks) for m in self.modes.values() if m.analysis), default=0)
        return write_bytes_atomic(path, [self.json_bytes(indent=2 if ranks <= INDENTED_RANKS else None)])
