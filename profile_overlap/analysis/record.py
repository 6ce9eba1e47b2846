"""TraceAnalysis -> JSON: the `analyze --json` record (`to_json`, also each mode's `analysis` in
metrics.json) and timeline.json (`timeline_record`). Keys only ever get added (other tools read them)."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

import msgspec

from profile_overlap.analysis.file.replay import OTHER, ReplayStep
from profile_overlap.analysis.rank.exposed_timeline import rank_exposure
from profile_overlap.analysis.rank.interference import combine as combine_interference
from profile_overlap.analysis.rank.per_rank import RankAnalysis
from profile_overlap.analysis.world.cross_rank import RankWait, TraceAnalysis
from profile_overlap.analysis.world.spread import spread
from profile_overlap.core.json_text import as_python_json, reindent
from profile_overlap.core.modes import PHASES
from profile_overlap.record.analysis import (
    AnalysisRecord,
    ConsoleFacts,
    ConsoleRank,
    RankRecord,
    ReplayCallRecord,
    ReplayStepRecord,
    as_json,
    builtin,
)
from profile_overlap.record.build import build_record
from profile_overlap.record.fields import converter, from_fields
from profile_overlap.record.integrity import IntegrityRecord
from profile_overlap.record.metrics import FOLDER, FOLDER_MODE, Env, JobFacts, ModeMetrics, RankEnv, RunMetrics, StepTimes
from profile_overlap.record.timeline import (
    PhaseWindow,
    Timeline,
    TimelineMode,
    TimelineRank,
    TimelineSpan,
    TimelineStep,
)

TIMELINE_SCHEMA = (
    "spans are [step, start_us, end_us, kind (comm|compute), label]; phases are [step, phase, start_us, end_us]; "
    "wait and transfer are [start_us, end_us] of exposed communication; critical is [start_us, end_us, piece] of the "
    "critical path on that rank; calls are [kind, phase, call, step, start_us, end_us] of the top calls; "
    "times are on the reference rank's clock where a rank is aligned (its own time - clock_offset_us), else on its own"
)


TIMELINE_MAX_RANKS = 64
"""Ranks whose geometry (spans, phases, wait, transfer, critical path, calls) timeline.json holds;
above it, every rank keeps its steps and clock, and the heatmap covers all of them."""


def drawn_ranks(result: TraceAnalysis, limit: int = TIMELINE_MAX_RANKS) -> set[int]:
    """Every rank up to `limit`; above, the ranks the analysis names (the reference, the slowest,
    the stragglers, the critical path's, the top calls' late ranks), in that order, then evenly
    spaced ranks up to `limit`."""
    ranks = [r.rank for r in result.ranks]
    if len(ranks) <= limit:
        return set(ranks)
    named = [result.clocks.reference_rank, result.slowest_rank]
    exposed = result.exposed
    if exposed is not None:
        named += [s.rank for s in exposed.stragglers]
        named += list(exposed.critical_path.ranks) if exposed.critical_path else []
        named += [c.late_rank for c in exposed.top]
    keep: list[int] = []
    for r in named:
        if r is not None and r in ranks and r not in keep and len(keep) < limit // 2:
            keep.append(r)
    others = [r for r in ranks if r not in keep]
    want = limit - len(keep)
    keep += [others[round(i * (len(others) - 1) / max(want - 1, 1))] for i in range(want)]
    return set(keep)


def timeline_of(analyses: Mapping[str, TraceAnalysis | None]) -> Timeline:
    """timeline.json: per mode and rank, the profiled steps' windows and their compute and
    communication spans (merged at display resolution by the analysis), for the figures. Each
    aligned rank's times are on the reference rank's clock (clocks.py), so ranks compare in time."""
    modes = {}
    for mode, result in analyses.items():
        if result is None:
            continue
        clocks = result.clocks
        exposure = rank_exposure(result)
        drawn_set = drawn_ranks(result)
        ranks = []
        for r in result.ranks:
            off = clocks.offset(r.rank)
            unc = clocks.uncertainty_us.get(r.rank)
            if r.rank not in drawn_set:  # steps and clock only (TIMELINE_MAX_RANKS)
                ranks.append(
                    TimelineRank(
                        rank=r.rank,
                        aligned=r.rank in clocks.offsets_us,
                        clock_offset_us=round(off, 3),
                        clock_uncertainty_us=None if unc is None or math.isinf(unc) else round(unc, 3),
                        steps=tuple(TimelineStep(step=s.step, start_us=round(s.start_us - off, 3), step_us=s.step_us) for s in r.steps),
                    )
                )
                continue
            assert r.timeline is not None, "a timeline of ranks analysed without their spans (AnalysisOptions.timeline)"
            # The causes' geometry (wait, transfer, critical, calls) converted once from its lists.
            drawn = msgspec.convert({"rank": r.rank, **exposure.get(r.rank, {})}, TimelineRank)
            ranks.append(
                msgspec.structs.replace(
                    drawn,
                    aligned=r.rank in clocks.offsets_us,
                    clock_offset_us=round(off, 3),
                    clock_uncertainty_us=None if unc is None or math.isinf(unc) else round(unc, 3),
                    steps=tuple(TimelineStep(step=s.step, start_us=round(s.start_us - off, 3), step_us=s.step_us) for s in r.steps),
                    spans=tuple(
                        TimelineSpan(sp.step, round(sp.start_us - off, 3), round(sp.end_us - off, 3), sp.kind, sp.label)
                        for sp in r.timeline
                    ),
                    phases=tuple(PhaseWindow(step, phase, round(a - off, 3), round(b - off, 3)) for step, phase, a, b in r.phase_windows),
                )
            )
        modes[mode] = TimelineMode(reference_rank=clocks.reference_rank, ranks=tuple(ranks), heatmap=result.heatmap)
    return Timeline(schema=TIMELINE_SCHEMA, modes=modes)


def timeline_record(analyses: Mapping[str, TraceAnalysis | None]) -> dict[str, Any]:
    """timeline.json as JSON has it (timeline_of)."""
    plain: dict[str, Any] = as_json(timeline_of(analyses))
    return plain


def _finite(x: float | None) -> float | None:
    """A clock figure for strict JSON: None where it is unknown (an infinite uncertainty)."""
    return None if x is None or not math.isfinite(x) else round(float(x), 3)


def integrity_record(analysis: TraceAnalysis) -> IntegrityRecord:
    """The record's `integrity`: every check, and each rank's clock offset (µs) against the
    reference rank with its uncertainty (ranks whose offset is unknown are absent)."""
    clocks = analysis.clocks
    return IntegrityRecord(
        checks=analysis.integrity.checks,
        clock_offsets_us={str(rank): _finite(v) for rank, v in sorted(clocks.offsets_us.items())},
        clock_uncertainty_us={str(rank): _finite(v) for rank, v in sorted(clocks.uncertainty_us.items())},
        clock_moved=tuple(rank for rank in sorted(clocks.offsets_us) if clocks.applies(rank)),
    )


def _rank(r: RankAnalysis, w: RankWait | None, *, replay: bool, exact: bool = False) -> RankRecord:
    """The rank's record: its fields by name (steps, phases and collectives too), rounded as the
    record declares (record/fields.py; exact: unrounded); the cross-rank wait from `w`. The replay
    steps, records already, go in after (from_fields would build each of their calls again)."""
    record = from_fields(
        RankRecord,
        r,
        exact=exact,
        # A rank with no call matched on another has no split (None, as the field says), not 0.
        wait_us=w.wait_us if w and w.matched else None,
        transfer_us=w.transfer_us if w and w.matched else None,
        last_arrivals=w.last_arrivals if w else None,
        last_arrival_pct=w.last_arrival_pct if w else None,
        replay=(),
    )
    return msgspec.structs.replace(record, replay=tuple(_replay(s) for s in r.replay)) if replay else record


def _replay(s: ReplayStep) -> ReplayStepRecord:
    """A replay step's record: its per-phase busy time by phase name, its calls' columns as records
    (they go in after: from_fields would build each call again)."""
    c = s.calls
    names = (*PHASES, OTHER)
    # Built from the columns (share_us rounded as the record declares), not through from_fields per
    # call: 43,008 calls at 1,024 ranks.
    share_us = converter(ReplayCallRecord, "share_us")
    calls = tuple(
        ReplayCallRecord(kind=c.kinds[k], nbytes=None if nb < 0 else nb, phase=names[p], share_us=share_us(share))
        for k, nb, p, share in zip(c.kind.tolist(), c.nbytes.tolist(), c.phase.tolist(), c.share_us.tolist())
    )
    return msgspec.structs.replace(from_fields(ReplayStepRecord, s, phase_us=dict(zip(PHASES, s.phase_us)), calls=()), calls=calls)


def analysis_record(analysis: TraceAnalysis, *, replay: bool = True) -> AnalysisRecord:
    """The typed `analyze --json` record (schema in docs/outputs.md; record/analysis.py).
    replay=False: without the ranks' replay steps (`streamed_json` adds them as it writes)."""
    waits = {w.rank: w for w in analysis.waits}
    ranks = tuple(_rank(r, waits.get(r.rank), replay=replay) for r in analysis.ranks)
    return AnalysisRecord(
        ranks=ranks,
        world_size=analysis.world_size,
        slowest_rank=analysis.slowest_rank,
        clock_slowest_rank=analysis.clock_slowest_rank,
        source=analysis.source,
        integrity=integrity_record(analysis),
        exposed=analysis.exposed,
        spread=spread(ranks),
        interference=combine_interference([(r.rank, r.interference) for r in analysis.ranks if r.interference is not None]),
        dimensions=analysis.dimensions,
        pipeline=analysis.pipeline,
    )


def console_facts(analysis: TraceAnalysis) -> ConsoleFacts:
    """What the `analyze` console shows beside analysis_record(analysis): each rank's record
    unrounded, its notes, calls matched across ranks and group sizes, and whether --hta-compat
    dropped a step."""
    waits = {w.rank: w for w in analysis.waits}
    return ConsoleFacts(
        hta_compat=analysis.hta_compat,
        ranks=tuple(
            ConsoleRank(
                record=_rank(r, w := waits.get(r.rank), replay=False, exact=True),
                notes=r.notes,
                matched=w.matched if w else 0,
                group_size={c.kind: c.group_size for c in r.collectives},
            )
            for r in analysis.ranks
        ),
    )


def traced_record(
    result: TraceAnalysis,
    *,
    mode: str,
    step_time: StepTimes,
    trace_dir: str,
    facts: JobFacts,
    config: dict[str, Any],
    env: Env,
    run_dir: str | None = None,
) -> RunMetrics:
    """The record of traces alone (a job's, or a bare folder's): one mode, its analysis, no memory or
    verification; `run_dir` defaults to the folder the traces came from."""
    modes = {mode: ModeMetrics(mode=mode, step_time=step_time, memory=(), checks=(), trace_dir=trace_dir, analysis=analysis_record(result))}
    return build_record(run_dir=run_dir or facts.source, config=config, env=env, modes=modes, job=facts)


def folder_metrics(result: TraceAnalysis, *, out_dir: str) -> RunMetrics:
    """The metrics record of a bare folder of traces (`analyze --tensorboard`: the Overlap tab reads it
    from out_dir): one mode, FOLDER_MODE, whose `analysis` is the `analyze --json` record; no step
    times, memory or verification for a job we only have traces of."""
    facts = JobFacts(
        kind=FOLDER,
        source=result.source,
        trace_files=sum(len(r.files) for r in result.ranks),
        profiled_steps=max((len(r.steps) for r in result.ranks), default=0),
        profiled_ranks=tuple(sorted(r.rank for r in result.ranks)),
    )
    return traced_record(
        result,
        mode=FOLDER_MODE,
        step_time=StepTimes.from_times([], method="none (traces only)"),
        trace_dir=result.source,
        facts=facts,
        run_dir=out_dir,
        config={"source": result.source, "hta_compat": result.hta_compat},
        env=Env(
            command="profile_overlap analyze --tensorboard",
            backend=next((r.backend for r in result.ranks if r.backend), None),
            device_type=result.ranks[0].device if result.ranks else None,
            world_size=result.world_size,
            ranks=tuple(RankEnv(rank=r.rank, host="?", device=r.device) for r in result.ranks),
        ),
    )


_REPLAY_SLOT = b'\n   "replay": []'
"""A rank's empty replay in the record's indented JSON (depth 3: record, ranks, rank): a string's
quotes are escaped, so these bytes occur nowhere else."""


def record_json(analysis: TraceAnalysis, record: AnalysisRecord) -> Iterator[bytes]:
    """The `analyze --json` file: `record` (analysis_record(analysis, replay=False)) encoded by msgspec
    from the structs, indented as json.dump(..., indent=1) writes it (core/json_text.py), with each
    rank's replay steps encoded one at a time into its empty slot as the pieces are written. A multi-GB
    trace has a replay entry per collective call: as structs all at once they take more memory than
    its analysis."""
    text = as_python_json(msgspec.json.encode(record, enc_hook=builtin), indent=1)
    at = 0
    for r in analysis.ranks:
        slot = text.index(_REPLAY_SLOT, at)
        yield text[at:slot]
        if r.replay:
            yield _REPLAY_SLOT[:-1]
            for n, step in enumerate(r.replay):
                yield (b"\n    " if n == 0 else b",\n    ") + reindent(
                    as_python_json(msgspec.json.encode(_replay(step), enc_hook=builtin), indent=1), 4
                )
            yield b"\n   ]"
        else:
            yield _REPLAY_SLOT
        at = slot + len(_REPLAY_SLOT)
    yield text[at:] + b"\n"


def to_json(analysis: TraceAnalysis) -> dict[str, Any]:
    """The `analyze --json` record as JSON has it."""
    plain: dict[str, Any] = as_json(analysis_record(analysis))
    return plain
