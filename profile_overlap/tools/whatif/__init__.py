"""`whatif`: predict every mode's step at other world sizes and link bandwidths from a measured run.

    python -m profile_overlap whatif runs/<run> --world-size 8,64,512 --link-gbps 50,450

Inputs, per mode, from the run's record (each rank's `replay`, measured by analysis/file/replay.py with
the rest of the analysis; a record written before it held them gets its traces analysed again):
the compute per phase (forward, backward, optimizer, and outside the phases) and every collective
of a step (kind, size S, the phase that issued it, its duration), each the median over ranks and
profiled steps. Per-unit compute: the backward is cut at the moments the split hands each unit's
gradients to its reduce_scatter (the hook fires when autograd has produced them), so unit k's
backward is the compute between two such launches; the forward is split in the same proportions
(a unit's backward costs about twice its forward, whatever the unit), the optimizer by the units'
bytes. A run without split or split-blocking traces splits both by bytes (a note says so).

The replay (tools/whatif/model.py) then runs each mode's dependency graph: with the measured
collective durations at the run's own world size (the self-replay, against the measured median
step time), and with ring α-β costs at each target point.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import msgspec

from profile_overlap.analysis.folder import analyze_dir, find_trace_files
from profile_overlap.analysis.options import IN_STEPS
from profile_overlap.analysis.record import analysis_record
from profile_overlap.core.errors import UserError
from profile_overlap.core.io import write_json_atomic
from profile_overlap.core.modes import MODES, PHASES, SHARDED_MODES, UNIT_MODES
from profile_overlap.record.analysis import AnalysisRecord
from profile_overlap.record.folder import Run, load_run
from profile_overlap.record.interference_used import UsedInterference, charged, overall, used_interference
from profile_overlap.record.whatif import SCHEMA, WHATIF_JSON, Crossover, SelfReplay, WhatifPoint, WhatifResult
from profile_overlap.tools.bench.record import BenchTimes
from profile_overlap.tools.whatif import model

SAME_BODY = tuple(name for name, spec in MODES.items() if spec.same_compute)
"""Modes that run the same forward and backward operators (fsdp2 adds its gathers' copies)."""
CLEAN = tuple(name for name, spec in MODES.items() if not spec.overlaps)
"""Modes whose collectives never run beside compute, so their compute times are clean: the first measured one lends them."""


@dataclass(frozen=True)
class MeasuredCall:
    kind: str
    nbytes: int | None
    phase: str
    dur_us: float


@dataclass(frozen=True)
class Measured:
    """One mode's step as measured: medians over ranks and profiled steps (µs)."""

    mode: str
    pre_us: float
    phase_us: dict[str, float]
    calls: tuple[MeasuredCall, ...]
    backward_cuts: tuple[float, ...] | None
    """Share of the backward compute per unit (forward order), from the reduce_scatter launches."""
    step_ms: float | None
    profiled_ms: float | None
    overlap_us: dict[str, float] = dataclasses.field(default_factory=dict)
    """Per phase: the compute that ran beside communication (the phase's overlap_us), per step."""
    interference: dict[str, UsedInterference] = dataclasses.field(default_factory=dict)
    """Per phase (and "other"): the interference the replay charges (record/interference_used.py)."""
    call_samples: tuple[MeasuredCall, ...] = ()
    """Every rank's and profiled step's calls, each its own share (`calls` holds their medians per
    position in the step): what advise fits a collective's cost to (`advice_cost_fit`)."""

    def slowdown(self, phase: str) -> float:
        """The charged slowdown of the phase's compute beside communication, as a fraction."""
        u = self.interference.get(phase)
        return charged(u) if u is not None else 0.0

    def alone_us(self, phase: str) -> float:
        """The phase's busy time had its compute run alone: the part beside communication took
        (1 + s) of its alone time, so it gives back overlap_us · s / (1 + s)."""
        s = self.slowdown(phase)
        return self.phase_us[phase] - self.overlap_us.get(phase, 0.0) * s / (1 + s)


def _median(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def replay_record(run: Run, mode: str) -> AnalysisRecord:
    """The mode's analysis with its per-step replay inputs: the record's own, or, for a record written
    before it held them, the mode's traces analysed again (as the run did: every profiled step)."""
    analysis = run.metrics.modes[mode].analysis
    if analysis is not None and any(r.replay for r in analysis.ranks):
        return analysis
    folder = run.dir / mode
    if not folder.is_dir() or not find_trace_files(folder):
        raise UserError(f"{folder} holds no traces: whatif needs profiled steps; rerun with --profile-steps 2 or more")
    return analysis_record(analyze_dir(folder, IN_STEPS, max_workers=1))


def measure_mode(run: Run, mode: str) -> Measured:
    """The mode's measured step from its record's replay inputs (one-line errors for a mode without them)."""
    analysis = replay_record(run, mode)
    samples = [s for r in analysis.ranks for s in r.replay]
    if not samples:
        raise UserError(f"the traces of {mode} in {run.dir / mode} have no ProfilerStep: rerun the run with --profile-steps 2 or more")
    # The calls of a step, as (kind, phase) in issue order; steps that differ (a straggling
    # collective outside the window) are outvoted.
    shapes = Counter(tuple((c.kind, c.phase) for c in s.calls) for s in samples)
    shape = shapes.most_common(1)[0][0]
    same = [s.calls for s in samples if tuple((c.kind, c.phase) for c in s.calls) == shape]
    calls = tuple(
        MeasuredCall(kind=kind, nbytes=same[0][i].nbytes, phase=phase, dur_us=statistics.median(c[i].share_us for c in same))
        for i, (kind, phase) in enumerate(shape)
    )
    cut_sets = [s.backward_cuts_us for s in samples if s.backward_cuts_us is not None and sum(s.backward_cuts_us) > 0]
    cuts = None
    if cut_sets and len({len(c) for c in cut_sets}) == 1:
        shares = [[x / sum(c) for x in c] for c in cut_sets]
        medians = [statistics.median(s[i] for s in shares) for i in range(len(shares[0]))]
        cuts = tuple(x / sum(medians) for x in medians)
    # Per step, the ranks' mean ProfilerStep window: every rank runs the same steps in the same wall
    # time, but each marks its step boundaries at its own moment, and a boundary that is late on
    # one rank moves time from that step into the next. The slowest rank per step would take the
    # longer side of every such shift.
    by_step: dict[int, list[float]] = {}
    for r in analysis.ranks:
        for st in r.steps:
            if st.step_us:
                by_step.setdefault(st.step, []).append(st.step_us)
    profiled = _median(statistics.fmean(v) for v in by_step.values())
    phases = [p for r in analysis.ranks for st in r.steps for p in st.phases]
    beside = {name: [p.overlap_us or 0.0 for p in phases if p.phase == name] for name in PHASES}
    summary = run.metrics.summary
    return Measured(
        mode=mode,
        pre_us=max(statistics.median(s.pre_us for s in samples), 0.0),
        phase_us={name: statistics.median(s.phase_us.get(name, 0.0) for s in samples) for name in PHASES},
        calls=calls,
        backward_cuts=cuts,
        step_ms=run.metrics.modes[mode].step_time.median_ms,
        profiled_ms=profiled / 1e3 if profiled else None,
        overlap_us={name: statistics.median(v) for name, v in beside.items() if v},
        interference=used_interference(analysis, summary.interference if summary is not None else ()),
        call_samples=tuple(MeasuredCall(kind=c.kind, nbytes=c.nbytes, phase=c.phase, dur_us=c.share_us) for s in same for c in s),
    )


@dataclass(frozen=True)
class Units:
    """The communication units: their bytes (S of their gradient bucket) and compute shares."""

    nbytes: tuple[int, ...]
    backward_share: tuple[float, ...]
    optimizer_share: tuple[float, ...]
    measured_cuts: bool


def find_units(measured: dict[str, Measured], notes: list[str]) -> Units:
    """One unit per backward reduce_scatter (or sequential all_reduce), last unit first in the trace."""
    for mode in UNIT_MODES:
        m = measured.get(mode)
        if m is None:
            continue
        kind = MODES[mode].unit_calls
        calls = [c for c in m.calls if c.phase == "backward" and c.kind == kind]
        sizes = [c.nbytes for c in calls if c.nbytes]
        if sizes and len(sizes) == len(calls):
            nbytes = tuple(reversed(sizes))
            by_bytes = tuple(s / sum(nbytes) for s in nbytes)
            cuts = next((x.backward_cuts for x in measured.values() if x.backward_cuts and len(x.backward_cuts) == len(nbytes)), None)
            if cuts is None:
                notes.append("per-unit compute split by the units' bytes (no reduce_scatter launches in backward to cut it at)")
            return Units(nbytes=nbytes, backward_share=cuts or by_bytes, optimizer_share=by_bytes, measured_cuts=cuts is not None)
    notes.append("no per-unit collectives in the traces: each mode replayed as one unit")
    return Units(nbytes=(0,), backward_share=(1.0,), optimizer_share=(1.0,), measured_cuts=False)


def _assign_units(m: Measured, units: Units) -> list[tuple[MeasuredCall, int]]:
    """Each collective's unit: backward ones go last unit first, forward and optimizer ones first unit first;
    ddp's buckets go to the unit whose backward fills them (by cumulative bytes)."""
    K = len(units.nbytes)
    out = []
    groups: dict[tuple[str, str], list[MeasuredCall]] = {}
    for c in m.calls:
        groups.setdefault((c.phase, c.kind), []).append(c)
    for (phase, _kind), calls in groups.items():
        if MODES[m.mode].unit_calls is None and phase == "backward":  # buckets
            filled, u, total = 0.0, K - 1, 0.0
            for c in calls:
                total += c.nbytes or 0
                while u > 0 and filled + units.nbytes[u] < total * 0.999:
                    filled += units.nbytes[u]
                    u -= 1
                out.append((c, u))
            continue
        for i, c in enumerate(calls):
            unit = len(calls) - 1 - i if phase == "backward" else i
            out.append((c, min(max(unit, 0), K - 1)))
    return out


def step_graph(
    m: Measured, units: Units, *, durations, world_size: int, measured_world: int, compute_scale: float, body: Measured | None = None
) -> model.StepGraph:
    """The mode's step with compute scaled and each collective costed by `durations(call, n)`;
    `body`: the measurement whose pre-forward, forward and backward time to use (default: m's own)."""
    body = body or m
    shard = measured_world / world_size if m.mode in SHARDED_MODES else 1.0
    comms = tuple(
        model.Comm(kind=c.kind, nbytes=c.nbytes or 0, phase=c.phase, unit=u, dur_us=durations(c, world_size))
        for c, u in _assign_units(m, units)
        if c.phase != "other"
    )
    s = units.backward_share
    # Alone times: the replay charges m's interference where its collectives run beside compute.
    return model.StepGraph(
        mode=m.mode,
        pre_us=body.pre_us * compute_scale,
        forward_us=tuple(body.alone_us("forward") * x * compute_scale for x in s),
        backward_us=tuple(body.alone_us("backward") * x * compute_scale for x in s),
        optimizer_us=tuple(m.alone_us("optimizer") * x * compute_scale * shard for x in units.optimizer_share),
        comms=comms,
        slowdown=tuple((phase, m.slowdown(phase)) for phase in (*PHASES, "other")),
    )


def fit_source(fit: str, run: Run, measured: dict[str, Measured], *, latency_us: float) -> tuple[float, float]:
    """(α µs, B GB/s) from a bench-collectives result (its bench.json or folder) or, with "run", the run's own collectives."""
    n0 = run.metrics.env.world_size
    if fit == "run":
        samples = [(c.kind, n0, c.nbytes, c.dur_us) for m in measured.values() for c in m.calls if c.nbytes]
    else:
        path = Path(fit)
        path = path / "bench.json" if path.is_dir() else path
        try:
            bench = msgspec.json.decode(path.read_bytes(), type=BenchTimes)
            samples = [(k, bench.world_size, row.nbytes, r.time_us) for row in bench.rows for k, r in row.results.items()]
        except (OSError, msgspec.DecodeError) as err:
            raise UserError(f"--fit {fit}: not a bench-collectives result ({err}); give its bench.json or run folder, or `run`") from None
    try:
        return model.fit_alpha_beta(samples, latency_us=latency_us)
    except ValueError as err:
        raise UserError(f"--fit {fit}: {err}") from None


def whatif(
    run_dir: Path,
    *,
    world_sizes: tuple[int, ...] = (8, 64, 512),
    link_gbps: tuple[float, ...] = (50.0, 450.0),
    latency_us: float = 5.0,
    compute_scale: float = 1.0,
    fit: str | None = None,
) -> WhatifResult:
    """Measure the run, replay it at its own size (self-replay) and at every target point; the record."""
    run = load_run(run_dir)
    modes = tuple(m for m in run.metrics.modes if m in model.BUILDERS and run.metrics.modes[m].analysis)
    notes: list[str] = [f"{m}: not modelled (no profiled traces)" for m in run.metrics.modes if m not in modes]
    if not modes:
        raise UserError(f"{run_dir} has no profiled mode to replay: rerun with --profile-steps 2 or more")
    measured = {m: measure_mode(run, m) for m in modes}
    for m, x in measured.items():
        if not any(x.phase_us.values()):
            notes.append(f"{m}: its traces carry no phase labels, so all of its compute is replayed before the forward")
    units = find_units(measured, notes)
    n0 = run.metrics.env.world_size
    if fit:
        latency_us, gbps = fit_source(fit, run, measured, latency_us=latency_us)
        link_gbps = (round(gbps, 6),)
    # Our three schedules and ddp run the same forward and backward operators (fsdp2 adds its own
    # copies); the model has no contention, so predictions take them from a mode where compute
    # never runs beside communication.
    clean = next((measured[m] for m in CLEAN if m in measured), None)
    if clean is not None:
        same = ", ".join(m for m in modes if m in SAME_BODY)
        notes.append(f"forward and backward time of {same} from {clean.mode}, where no communication runs beside compute")
    notes += [f"{m}: interference charged: {overall(x.interference)}" for m, x in measured.items()]
    self_replay = _self_replay(measured, modes, units, n0)
    points = _target_points(
        measured,
        modes,
        units,
        clean,
        measured_world=n0,
        world_sizes=world_sizes,
        link_gbps=link_gbps,
        latency_us=latency_us,
        compute_scale=compute_scale,
    )
    result = WhatifResult(
        schema=SCHEMA,
        run_dir=str(run.dir),
        measured_world_size=n0,
        latency_us=latency_us,
        compute_scale=compute_scale,
        fit=fit,
        world_sizes=tuple(world_sizes),
        link_gbps=tuple(link_gbps),
        modes=modes,
        points=tuple(points),
        self_replay=tuple(self_replay),
        crossovers=(),
        notes=tuple(notes),
    )
    return _with_crossovers(result)


def _self_replay(measured: dict[str, Measured], modes: tuple[str, ...], units: Units, n0: int) -> list[SelfReplay]:
    """Each mode replayed at its own size with its own measured call times, against its measured step."""
    out = []
    for m in modes:
        graph = step_graph(measured[m], units, durations=lambda c, n: c.dur_us, world_size=n0, measured_world=n0, compute_scale=1.0)
        predicted = model.simulate(graph).step_us / 1e3
        meas, prof = measured[m].step_ms, measured[m].profiled_ms
        out.append(
            SelfReplay(
                mode=m,
                measured_ms=meas,
                predicted_ms=predicted,
                error_pct=100 * (predicted - meas) / meas if meas else None,
                profiled_ms=prof,
                profiled_error_pct=100 * (predicted - prof) / prof if prof else None,
            )
        )
    return out


def _target_points(
    measured: dict[str, Measured],
    modes: tuple[str, ...],
    units: Units,
    clean: Measured | None,
    *,
    measured_world: int,
    world_sizes: tuple[int, ...],
    link_gbps: tuple[float, ...],
    latency_us: float,
    compute_scale: float,
) -> list[WhatifPoint]:
    """Every mode at every target world size and link bandwidth, its calls costed by the ring model."""
    points = []
    for n in world_sizes:
        for bw in link_gbps:

            def cost(c: MeasuredCall, n: int, bw=bw) -> float:
                return model.ring_cost_us(c.kind, c.nbytes or 0, n, latency_us=latency_us, link_gbps=bw)

            steps = {}
            for m in modes:
                body = clean if m in SAME_BODY else None
                graph = step_graph(
                    measured[m], units, durations=cost, world_size=n, measured_world=measured_world, compute_scale=compute_scale, body=body
                )
                steps[m] = model.simulate(graph)
            first = steps[modes[0]].step_us
            for m, st in steps.items():
                points.append(
                    WhatifPoint(
                        mode=m,
                        world_size=n,
                        link_gbps=bw,
                        step_ms=st.step_us / 1e3,
                        exposed_comm_ms=st.exposed_comm_us / 1e3,
                        overlap_pct=st.overlap_pct,
                        speedup_vs_first=first / st.step_us if st.step_us > 0 else 0.0,
                    )
                )
    return points


def _with_crossovers(r: WhatifResult) -> WhatifResult:
    """Per mode after the first: along world size at each bandwidth, and along bandwidth at each world size."""
    out = []
    for mode in r.modes[1:]:
        for bw in r.link_gbps:
            speedups = [r.point(mode, n, bw).speedup_vs_first for n in r.world_sizes]
            out.append(Crossover(mode, r.modes[0], "world_size", bw, model.crossover(r.world_sizes, speedups)))
        for n in r.world_sizes:
            speedups = [r.point(mode, n, bw).speedup_vs_first for bw in r.link_gbps]
            out.append(Crossover(mode, r.modes[0], "link_gbps", n, model.crossover(r.link_gbps, speedups)))
    return dataclasses.replace(r, crossovers=tuple(out))


def write(result: WhatifResult, *, json_out: Path | None = None) -> Path:
    """RUN_DIR/whatif.json (what the report reads), and a copy at --json."""
    target = Path(result.run_dir) / WHATIF_JSON
    try:
        path = write_json_atomic(target, result.to_json(), indent=1)
        if json_out is not None:
            target = Path(json_out)
            write_json_atomic(target, result.to_json(), indent=1)
    except OSError as err:
        raise UserError(f"cannot write {target} ({err.strerror}): make the folder writable, or pick another --json") from None
    return path
