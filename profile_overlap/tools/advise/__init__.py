"""`advise`: what to change in a run or job, ranked by predicted gain (docs/advise.md).

    python -m profile_overlap advise runs/<run> [--top 5] [--json advice.json]

For each cause of exposed time (record/exposed.py) the candidate changes: DDP bucket sizes, FSDP2
resharding and prefetch, the split's wait-ahead, sequential <-> split (tools/advise/candidates.py, each
replayed by the whatif model), a straggler rank and a collective that needs more bandwidth than the
link has (from the causes, not replayed). Each replayed change is checked against the run's own
config checks (run/config.py) before it is advised. A job (traces of anyone's training) gets the
causes' items and the code lines to try; `advise --verify` runs our runs' top items
(tools/advise/verify.py).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import msgspec

from profile_overlap.api.job import ensure_record, is_job_record
from profile_overlap.core.errors import UserError
from profile_overlap.core.files import ADVICE_JSON, METRICS_JSON, STATUS_JSON
from profile_overlap.core.io import write_json_atomic
from profile_overlap.core.modes import MODES
from profile_overlap.record import noise
from profile_overlap.record.advice import NOTHING, SCHEMA, Advice, AdviceItem
from profile_overlap.record.config import RunConfig
from profile_overlap.record.folder import Run, load_run
from profile_overlap.record.interference_used import UsedInterference, overall
from profile_overlap.record.metrics import ModeMetrics
from profile_overlap.record.summary import blocks, summary_of
from profile_overlap.tools import whatif
from profile_overlap.tools.advise import candidates as replay
from profile_overlap.tools.whatif import model


def load_source(path: Path) -> tuple[Run, bool]:
    """(the run or job, is it a job); one-line errors for a folder that is neither, or has no traces."""
    path = folder = Path(path)
    if not path.is_dir():
        raise UserError(f"{path} is not a folder: give a run folder (runs/<run>) or a job folder with its traces")
    neither = UserError(
        f"{folder} is not a run or job folder (no metrics.json, status.json or profiler traces): give a folder made by "
        "`profile_overlap run`, or a job's folder of torch.profiler traces"
    )
    if not (path / STATUS_JSON).is_file() and not (path / METRICS_JSON).is_file():
        try:  # a job's log_dir or trace folder: its record, built as `report` builds it
            path = ensure_record(path)
        except UserError:
            raise neither from None
    if not (path / METRICS_JSON).is_file():
        raise neither
    run = load_run(path)
    if not any(m.analysis for m in run.metrics.modes.values()):
        raise UserError(f"{path} has no analysed traces: advise needs profiled steps; rerun with --profile-steps 2 or more")
    return run, is_job_record(path)


TIMED_NOTE = 0.05
"""A note names the scale from profiled to timed steps when they differ by this share or more."""


def noise_ms(m: ModeMetrics) -> float:
    """The step-time change the mode's noise hides: half its median's 95% interval over blocks; with one
    block, the single-run bound 1.96 · SINGLE_RUN_SD of the median (record/noise.py)."""
    median = m.step_time.median_ms or 0.0
    interval = noise.median_interval(blocks(m.step_time)) if len(blocks(m.step_time)) > 1 else None
    if interval is not None:
        return max((interval.high - interval.low) / 2, 0.0)
    return median * noise.Z * noise.SINGLE_RUN_SD


def _steps(m: ModeMetrics) -> int:
    ranks = m.analysis.ranks if m.analysis else ()
    return max(len(ranks[0].steps), 1) if ranks else 1


def unreplayed(
    *,
    kind: str,
    mode: str,
    cause: str,
    change: str,
    code: str | None,
    baseline_ms: float | None,
    bound_ms: float | None = None,
    worth_it: bool = False,
) -> AdviceItem:
    """An item advise does not replay, so no flag verifies it: its gain is at most bound_ms (an
    interval 0 .. bound_ms), or unknown (None)."""
    return AdviceItem(
        kind=kind,
        mode=mode,
        cause=cause,
        change=change,
        flag=None,
        code=code,
        baseline_ms=baseline_ms,
        predicted_ms=None if baseline_ms is None or bound_ms is None else baseline_ms - bound_ms,
        predicted_gain_ms=bound_ms,
        gain_low_ms=None if bound_ms is None else 0.0,
        gain_high_ms=bound_ms,
        worth_it=worth_it,
        verifiable=False,
    )


@dataclass(frozen=True)
class Quote:
    """A candidate's predicted gain per timed step and its interval, in ms."""

    gain: float
    low: float
    high: float
    noise: float
    """The step noise the interval includes (`advice_noise_ms`)."""


def quote(c: replay.Candidate, *, error_pct: float, profiled_ms: float | None, timed_ms: float | None, noise: float) -> Quote:
    """The gain, its interval and noise in ms of the timed step for candidate `c` of a mode whose replay is off
    its profiled steps by error_pct, whose profiled steps took profiled_ms and timed ones timed_ms, and
    whose noise is `noise` (a timed schedule switch: both modes' noises added). A replayed gain is
    a share of the profiled step, quoted on the timed step (what a rerun measures): × timed / profiled
    (`advice_predicted_gain_ms`); a timed switch is a difference of timed medians as it is."""
    if c.timed:  # two measured medians: their noises add (no replay in it)
        gain = c.gain_us / 1e3
        return Quote(gain, gain - noise, gain + noise, noise)
    k = timed_ms / profiled_ms if profiled_ms and timed_ms else 1.0
    drift = abs(profiled_ms / timed_ms - 1) if profiled_ms and timed_ms else 0.0
    gain = k * c.gain_us / 1e3
    spread = (error_pct / 100 + drift) * abs(gain) + noise + k * c.fit_error_us / 1e3
    low, high = gain - spread, gain + spread
    if c.gain_range_us is not None:  # the call cost's two readings: the interval spans both replays
        low, high = k * c.gain_range_us[0] / 1e3 - spread, k * c.gain_range_us[1] / 1e3 + spread
    return Quote(gain, low, high, noise)


def cause_items(name: str, m: ModeMetrics, summary) -> list[AdviceItem]:
    """The causes that no flag changes: the most late rank, and the exposed call that needs the most bandwidth."""
    e = m.exposed
    if e is None:
        return []
    base = m.step_time.median_ms
    out = []
    wait_ms = e.per_rank_step_ms(_steps(m))[0]
    if e.stragglers and wait_ms:
        # What the peers would stop waiting for: at most the mean wait per rank and step, and at
        # most the late rank's extra time.
        s = max(e.stragglers, key=lambda s: s.extra_ms)
        wait_ms = min(wait_ms, s.extra_ms)
        out.append(
            unreplayed(
                kind="straggler",
                mode=name,
                cause=f"wait: rank {s.rank} arrives late",
                change=f"make rank {s.rank}'s {s.phase} ({s.what}) as fast as its peers': it runs {s.extra_ms:.3g} ms longer per step",
                code=f"look at rank {s.rank} in {s.phase}: its host, its data, its {s.what}",
                baseline_ms=base,
                bound_ms=wait_ms,
                worth_it=wait_ms > noise_ms(m),
            )
        )
    busbw = {c.kind: c.busbw_gbps.mean for c in (summary.collectives if summary else ()) if c.busbw_gbps}
    needs = [c for c in e.top if c.required_gbps is not None and c.exposed_us > 0 and c.required_gbps > busbw.get(c.kind, 0.0)]
    if needs:
        c = max(needs, key=lambda c: c.exposed_us)
        per_step = c.exposed_us / 1e3 / max(len(e.ranks), 1) / _steps(m)
        out.append(
            unreplayed(
                kind="bandwidth",
                mode=name,
                cause=f"transfer: {c.kind} #{c.call} in {c.phase} is exposed",
                change=f"this schedule cannot hide it at the measured {busbw[c.kind]:.3g} GB/s: it fits in its slack only at "
                f"{c.required_gbps:.3g} GB/s bus bandwidth (a faster link, or a schedule that issues it earlier)",
                code=None,
                baseline_ms=base,
                bound_ms=per_step,
                worth_it=False,  # a bound of what the link costs, not a change to make
            )
        )
    return out


def _valid(cfg: RunConfig, mode: str, change: dict) -> bool:
    """The run's own checks accept the changed config of `mode` (run/config.py)."""
    try:
        replay.rerun_config(cfg, mode, change)
    except (ValueError, TypeError):
        return False
    return True


def replay_items(
    run: Run, notes: list[str], calibrated: Mapping[str, dict[str, UsedInterference]] | None = None
) -> tuple[list[AdviceItem], dict[str, float]]:
    """The replayed candidates of every profiled mode of our run, and each mode's self-replay error (%).
    `calibrated`: per mode, the interference to charge instead of its own (`advise --calibrate`)."""
    cfg, metrics = run.metrics.config, run.metrics
    modes = [m for m in metrics.modes if m in model.BUILDERS and metrics.modes[m].analysis]
    measured = {m: whatif.measure_mode(run, m) for m in modes}
    for m, used in (calibrated or {}).items():
        if m in measured:
            measured[m] = dataclasses.replace(measured[m], interference=used)
    world = metrics.env.world_size
    params = replay.unit_params(cfg, metrics.unit_param_bytes)
    units = replay.units_of(params, whatif.find_units(measured, []))
    if not units.measured_cuts:
        notes.append("per-unit compute split by the units' bytes (no split or split-blocking traces to cut the backward at)")
    overlaps = {name: x.overlap_pct for name, x in summary_of(metrics).modes.items()}
    replayed = {m: replay.replay_as_run(measured[m], units, cfg, world, overlap_pct=overlaps.get(m)) for m in modes}
    errors: dict[str, float] = {}
    for m, r in replayed.items():
        if r.profiled_ms:
            errors[m] = 100 * abs(r.step_us / 1e3 - r.profiled_ms) / r.profiled_ms
        timed = metrics.modes[m].step_time.median_ms
        if r.profiled_ms and timed:
            ratio = r.profiled_ms / timed
            if abs(ratio - 1) >= TIMED_NOTE:
                notes.append(
                    f"{m}: its replayed gains are quoted on its timed steps: × {1 / ratio:.2g} (the timed median "
                    f"{timed:.3g} ms / the profiled steps' {r.profiled_ms:.3g} ms)"
                )
            if not 2 / 3 <= ratio <= 3 / 2:
                notes.append(
                    f"{m}'s profiled steps took {ratio:.2g}x its timed steps ({r.profiled_ms:.3g} ms against "
                    f"{timed:.3g} ms): its replayed gains rest on steps unlike the others; rerun with more --profile-steps"
                )
    candidates = list(replay.schedule(replayed, {m: metrics.modes[m].step_time.median_ms for m in modes}))
    ctx = replay.Context(
        cfg=cfg, measured=measured, world=world, params=params, units=units, analysis=lambda m: whatif.replay_record(run, m)
    )
    for m, r in replayed.items():
        for change in MODES[m].advise:
            if change in replay.CANDIDATES:
                candidates += replay.CANDIDATES[change](r, ctx)
    out = []
    gains: list[tuple[replay.Candidate, float, float]] = []
    for c in candidates:
        if not _valid(cfg, c.mode, c.config):
            continue
        mode = metrics.modes[c.mode]
        base = mode.step_time.median_ms
        other = metrics.modes[c.to_mode] if c.timed and c.to_mode is not None else None
        q = quote(
            c,
            error_pct=errors.get(c.mode, 0.0),
            profiled_ms=replayed[c.mode].profiled_ms if c.mode in replayed else None,
            timed_ms=base,
            noise=noise_ms(mode) if other is None else math.hypot(noise_ms(mode), noise_ms(other)),
        )
        gains.append((c, q.gain, q.noise))
        out.append(
            AdviceItem(
                kind=c.kind,
                mode=c.mode,
                cause=_cause(c.kind),
                change=c.change,
                flag=c.flag,
                code=c.code,
                baseline_ms=base,
                predicted_ms=None if base is None else base - q.gain,
                predicted_gain_ms=q.gain,
                gain_low_ms=q.low,
                gain_high_ms=q.high,
                worth_it=q.gain > q.noise,
                verifiable=True,
                interference=None if c.timed or c.mode not in measured else tuple(measured[c.mode].interference.values()),
                call_cost=c.call_cost or None,
                less_overlap=c.less_overlap,
            )
        )
    notes += overlap_costs(gains, {m: x.interference for m, x in measured.items()})
    for name, mm in metrics.modes.items():
        if name not in MODES or "bucket-view" not in MODES[name].advise:
            continue
        grad_mib = statistics.median(x.grad_bytes for x in mm.memory) / 2**20 if mm.memory else None
        saving = f": saves {grad_mib:.3g} MiB per rank" if grad_mib else ""
        out.append(
            unreplayed(
                kind="ddp-bucket-view",
                mode=name,
                cause="memory: every gradient is held twice (in .grad and in its bucket)",
                change=f"let the gradients be views into DDP's buckets (no copy into the bucket){saving}; step time: no change predicted",
                code="DistributedDataParallel(model, gradient_as_bucket_view=True)",
                baseline_ms=mm.step_time.median_ms,
            )
        )
    return out, errors


def overlap_costs(gains: list[tuple[replay.Candidate, float, float]], used: dict[str, dict[str, UsedInterference]]) -> list[str]:
    """Per mode, a note when a change that takes communication out from under compute is worth it
    ((candidate, predicted gain ms, noise ms)): its overlap costs more than it hides. The best such change."""
    best: dict[str, tuple[float, replay.Candidate]] = {}
    for c, gain, floor_ms in gains:
        if c.less_overlap and gain > floor_ms and gain > best.get(c.mode, (0.0, c))[0]:
            best[c.mode] = (gain, c)
    return [
        f"{mode}: the current overlap costs more than it hides at the measured interference ({overall(used[mode])}): "
        f"{c.change} ({c.flag}) is predicted {gain:.3g} ms per step faster"
        for mode, (gain, c) in best.items()
    ]


_CAUSES = {
    "ddp-bucket": "transfer: the gradient all_reduce starts only when its bucket fills (one bucket: at the end of backward)",
    "ddp-first-bucket": "transfer: the first bucket's all_reduce waits until the bucket fills (at the cap or the end of backward)",
    "fsdp2-reshard": "transfer: the backward all_gathers of resharded parameters",
    "fsdp2-group": "transfer and hooks: per fully_shard unit one all_gather, one reduce_scatter (each pays its latency) and FSDP2's hooks",
    "fsdp2-prefetch": "transfer: each all_gather is issued just before its unit needs it",
    "split-prefetch": "transfer: the forward waits for the all_gathers",
    "schedule": "transfer: the schedule's collectives and what they overlap",
}


def _cause(kind: str) -> str:
    return _CAUSES[kind]


def _rank(items: list[AdviceItem]) -> list[AdviceItem]:
    """Worth-it items by predicted gain, then the rest by gain (unknown last, bounds after changes); the best per (kind, mode)."""
    best: dict[tuple[str, str], AdviceItem] = {}
    for i in items:
        key = (i.kind, i.mode)
        if key not in best or (i.predicted_gain_ms or 0) > (best[key].predicted_gain_ms or 0):
            best[key] = i
    # A bandwidth item is a bound of what the link costs, not a change: after the changes.
    return sorted(
        best.values(),
        key=lambda i: (not i.worth_it, i.kind == "bandwidth", -(i.predicted_gain_ms if i.predicted_gain_ms is not None else -1e18)),
    )


def advise(path: Path, *, top: int | None = None, calibrate: bool = False) -> Advice:
    """The advice for a run or job; `calibrate` (our runs): where a mode measured no interference, one
    profiled run of its best change that puts communication under compute measures it
    (tools/advise/calibrate.py), and the items are replayed again charging that."""
    run, is_job = load_source(path)
    notes: list[str] = []
    items: list[AdviceItem] = []
    errors: dict[str, float] = {}
    if is_job:
        if calibrate:
            raise UserError(f"{path} is a job: --calibrate reruns our runs only; run advise without it")
        notes.append(
            "a job's changes are not replayed (its model is not known here): try an item by changing the code line, "
            "rerunning the job, and comparing the two with `profile_overlap report --compare`"
        )
    else:
        items, errors = replay_items(run, notes)
        if calibrate:
            from profile_overlap.tools.advise.calibrate import calibrate as measure_calibration

            found = measure_calibration(run, items)
            if found:
                notes = [*(f"{m}: {c.note}" for m, c in found.items())]
                items, errors = replay_items(run, notes, {m: c.used for m, c in found.items()})
    for name, m in run.metrics.modes.items():
        items += cause_items(name, m, summary_of(run.metrics).modes.get(name))
    ranked = _rank(items)
    noises = {name: noise_ms(m) for name, m in run.metrics.modes.items()}
    if not any(i.worth_it for i in ranked):
        ranked.insert(
            0,
            unreplayed(
                kind=NOTHING,
                mode=", ".join(run.metrics.modes),
                cause="no change is predicted to beat the run-to-run noise",
                change="nothing worth changing: every predicted gain is within the noise of the step time",
                code=None,
                baseline_ms=None,
            ),
        )
    if top is not None:
        ranked = ranked[:top]
    return Advice(
        schema=SCHEMA,
        source=str(run.dir),
        is_job=is_job,
        noise_ms=noises,
        model_error_pct=errors,
        items=tuple(ranked),
        notes=tuple(notes),
    )


def write(advice: Advice, *, json_out: Path | None = None) -> Path:
    """RUN_DIR/advice.json (what the report reads), and a copy at --json."""
    target = Path(advice.source) / ADVICE_JSON
    data = msgspec.to_builtins(advice)
    try:
        path = write_json_atomic(target, data, indent=1)
        if json_out is not None:
            target = Path(json_out)
            write_json_atomic(target, data, indent=1)
    except OSError as err:
        raise UserError(f"cannot write {target} ({err.strerror}): make the folder writable, or pick another --json") from None
    return path
