"""The analysis record, typed: what `analyze --json` writes and each mode's `analysis` in metrics.json
(schema in docs/outputs.md). Field names are the JSON keys; msgspec decodes JSON straight into
these and `msgspec.to_builtins` writes them back in field order. The analysis builds them once
(analysis/record.py); renderers read them by attribute.

Fields with a default are absent from records of older schemas (read as that default)."""

from __future__ import annotations

from typing import Any

import msgspec

from profile_overlap.core.json_text import as_python_json
from profile_overlap.record.dimensions import Dimension, Pipeline
from profile_overlap.record.exposed import Exposed
from profile_overlap.record.fields import Float3, MaybeFloat3, MaybeFloat4
from profile_overlap.record.integrity import IntegrityRecord
from profile_overlap.record.interference import Interference
from profile_overlap.record.spread import Spread


def as_json(record: object) -> Any:
    """A typed record as JSON has it: dicts, lists, str, numbers, None (what json.loads gives back)."""
    return msgspec.json.decode(msgspec.json.encode(record, enc_hook=builtin))


def json_bytes(record: object, *, indent: int | None) -> bytes:
    """A typed record's JSON file (with its final newline), encoded once by msgspec and spelled as
    `json.dump(as_json(record), f, indent=indent)` spells it (indent None: one line, `,` and `:`
    without spaces, as json.dumps(..., separators=(",", ":"))): the bytes our records always had."""
    text = as_python_json(msgspec.json.encode(record, enc_hook=builtin), indent=1 if indent is None else indent)
    return (text if indent is not None else msgspec.json.format(text, indent=-1)) + b"\n"


def builtin(x: Any) -> Any:
    """Subclasses of builtins (torch's TorchVersion is a str) as their builtin; anything else is a bug."""
    for kind in (str, int, float):
        if isinstance(x, kind):
            return kind(x)
    raise TypeError(f"{type(x).__name__} has no JSON form in a record")


class PhaseRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One phase (forward, backward, optimizer) of one step, or summed over a rank's steps
    (definitions: "Phases"): the communication hidden behind the phase's compute and the
    communication exposed in its window. The analysis makes it (analysis/rank/per_rank.py) with its
    numbers as measured; the record's are rounded (from_fields)."""

    phase: str
    window_us: Float3
    """Length of the union of the phase's windows (clipped to the step)."""
    comm_us: Float3
    """|∪comm ∩ window|."""
    compute_us: Float3
    """|∪compute ∩ window|."""
    overlap_us: Float3
    """|∪comm ∩ ∪compute ∩ window|: communication hidden behind this phase's compute."""
    exposed_comm_us: Float3
    """comm_us − overlap_us: communication exposed inside this phase's window."""
    sources: tuple[str, ...] = ()
    """Where the window came from (analysis/file/phases.py): "labels", an engine whose own ranges
    placed it (classify.ENGINE_RANGES: "FSDP2", "DDP", "torch.optim", "profile_overlap"),
    "autograd" (backward from autograd's frames) or "step" (forward: the step before the
    backward); over a rank's steps, each source once, in the order first met. Absent before phases
    were found without labels."""


class StepRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One ProfilerStep#N window of one rank: its metrics clipped to the window."""

    step: int
    step_us: MaybeFloat3
    comm_us: MaybeFloat3
    compute_us: MaybeFloat3
    overlap_us: MaybeFloat3
    exposed_comm_us: MaybeFloat3
    overlap_pct: MaybeFloat3
    phases: tuple[PhaseRecord, ...] = ()


class PhaseCollectiveRecord(msgspec.Struct, frozen=True, kw_only=True):
    """The collectives of one kind issued in one phase, over a rank's steps ("other": outside every phase)."""

    phase: str
    kind: str
    count: int
    nbytes: int | None
    """Sum of the calls' sizes; None when some call's size is unknown."""
    dur_us: Float3


class CollectiveRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One collective kind of one rank, totals over its calls (definitions: `algbw_gbps`, `busbw_gbps`)."""

    kind: str
    count: int
    nbytes: int | None
    dur_us: Float3
    algbw_gbps: MaybeFloat4
    busbw_gbps: MaybeFloat4


class ReplayCallRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One collective call of a profiled step, in issue order (analysis/file/replay.py)."""

    kind: str
    nbytes: int | None
    phase: str
    """The phase whose window holds the call's issue, or "other"."""
    share_us: Float3
    """Its share of the time communication was busy: calls in flight together share it."""


class ReplayStepRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One profiled step of one rank as `whatif` replays it (definitions: "What if")."""

    step: int
    pre_us: Float3
    """Busy time (the step minus its exposed communication) outside every phase window."""
    phase_us: dict[str, Float3]
    """Busy time inside each phase's window."""
    calls: tuple[ReplayCallRecord, ...]
    backward_cuts_us: tuple[Float3, ...] | None
    """The backward's busy time per unit (forward order), cut at the reduce_scatter launches; None without them."""


class FsdpUnitRecord(msgspec.Struct, frozen=True, kw_only=True):
    unit: str
    """The fully_shard unit's module names, as FSDP2's ranges name it (comma-separated when it holds several)."""
    busy_us: float
    """Busy time per ProfilerStep inside the FSDP:: ranges naming the unit, less the waits inside them."""


class FsdpRecord(msgspec.Struct, frozen=True, kw_only=True):
    """What FSDP2 costs one rank's training thread besides its collectives, µs per ProfilerStep
    (analysis/file/fsdp_units.py): what advise's `--fsdp-group` and `--reshard-after-forward false` take off."""

    units: tuple[FsdpUnitRecord, ...] = ()
    """Per fully_shard unit, in the order the units first appear (forward order)."""
    backward_gathers_us: float = 0.0
    """Busy time in the backward window in the ranges issuing, prefetching or copying a gather."""


class RankRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One rank's metrics over its profiled steps (definitions: "Per rank")."""

    rank: int
    device: str
    comm_us: Float3
    compute_us: Float3
    overlap_us: Float3
    exposed_comm_us: Float3
    overlap_pct: MaybeFloat3
    steps: tuple[StepRecord, ...]
    phases: tuple[PhaseRecord, ...] = ()
    """Summed over the rank's steps; absent before schema 3."""
    phase_collectives: tuple[PhaseCollectiveRecord, ...] = ()
    collectives: tuple[CollectiveRecord, ...] = ()
    wait_us: MaybeFloat3 = None
    """Cross-rank wait (definitions: `wait_us`); None when no call was matched across ranks."""
    transfer_us: MaybeFloat3 = None
    last_arrivals: int | None = None
    """The matched calls this rank arrived at last; absent before the integrity checks."""
    last_arrival_pct: MaybeFloat3 = None
    replay: tuple[ReplayStepRecord, ...] = ()
    """Per profiled step, what whatif replays; absent from records written before whatif read it here."""
    fsdp: FsdpRecord | None = None
    """FSDP2's work on the training thread (CPU traces with FSDP:: ranges); None otherwise, and in records before it."""


class AnalysisRecord(msgspec.Struct, frozen=True, kw_only=True):
    """The analysis of one folder of traces: every rank, the slowest one, and the integrity checks."""

    ranks: tuple[RankRecord, ...]
    world_size: int
    slowest_rank: int | None = None
    """The rank the others wait for; absent before schema 2."""
    clock_slowest_rank: int | None = None
    """The rank the aligned clock names as the one the others wait for, where that is not
    slowest_rank (definitions: `clock_slowest_rank`); None where they agree, and in records before it."""
    source: str | None = None
    """The folder the traces were read from."""
    integrity: IntegrityRecord | None = None
    """None in records written before the checks existed."""
    exposed: Exposed | None = None
    """Why communication is exposed (record/exposed.py); None with one rank or without steps, and in
    records written before the causes."""
    spread: tuple[Spread, ...] = ()
    """Each per-rank number over the ranks (record/spread.py); absent before it and with one rank."""
    interference: Interference | None = None
    """How much longer compute ran with communication in flight than alone, over the ranks, per rank
    and per phase (record/interference.py); None without profiled steps, and in records before it."""
    dimensions: dict[str, Dimension] = msgspec.field(default_factory=dict)
    """Per dimension (process groups of one kind), its groups and per-rank numbers (record/dimensions.py);
    absent before dimensions were measured."""
    pipeline: Pipeline | None = None
    """The pipeline stages and their bubble; None for a job without send/recv."""

    def rank(self, rank: int) -> RankRecord | None:
        return next((r for r in self.ranks if r.rank == rank), None)


class ConsoleRank(msgspec.Struct, frozen=True, kw_only=True):
    """One rank as the `analyze` console shows it: its record unrounded, and what the record's JSON leaves out."""

    record: RankRecord
    """The rank's record with its numbers as measured (record.fields.from_fields(exact=True)): the
    console prints them to 1 or 2 decimals, and from the record's 3 (rounding twice) about one
    overlap % in ten would move by 0.01."""
    notes: tuple[str, ...]
    """Things the user should know, e.g. that the rank came from the file name."""
    matched: int
    """Its calls matched on at least two ranks: without any, the console has no wait/transfer split ("-")."""
    group_size: dict[str, int | None]
    """Per collective kind (RankRecord.collectives), its process group's size (the n of busbw)."""


class ConsoleFacts(msgspec.Struct, frozen=True, kw_only=True):
    """What the `analyze` console shows beside the AnalysisRecord that the record's JSON does not
    hold (so analyze --json and metrics.json keep their bytes): made with the record by the analysis
    (analysis/record.py console_facts), never written."""

    hta_compat: bool
    """The analysis dropped each rank's last step as HTA does (--hta-compat)."""
    ranks: tuple[ConsoleRank, ...]
    """Per rank, in the record's order."""
