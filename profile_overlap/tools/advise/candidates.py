"""The replayed candidates of `advise`: each mode's measured step (tools/whatif/) replayed with one
knob changed (tools/whatif/model.py), against the same step replayed as run.

Predicted gain = replay(as run) − replay(changed): both replays share the measured compute and
collectives, so what the model gets wrong about the run itself mostly cancels; what is left is
carried by the interval (docs/advise.md).
"""

from __future__ import annotations

import dataclasses
import math
import random
import statistics
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from profile_overlap.core.modes import MODES, SPEEDUP_BASELINE, SPEEDUP_MODE
from profile_overlap.record.analysis import AnalysisRecord
from profile_overlap.record.call_cost import BANDWIDTH, FIT, LATENCY, CallCost
from profile_overlap.record.config import RunConfig
from profile_overlap.run import flags
from profile_overlap.run.config import Config, from_record
from profile_overlap.tools import whatif
from profile_overlap.tools.whatif import model

MIB = 1024 * 1024


@dataclass(frozen=True)
class Candidate:
    """One changed setting and its replayed step."""

    kind: str
    mode: str
    change: str
    flag: str | None
    code: str | None
    config: dict
    """The run flags it sets (empty when no flag sets it)."""
    gain_us: float
    """replay(as run) − replay(changed), per step."""
    fit_error_us: float = 0.0
    """What the cost fit adds to the uncertainty: half the 95% range of the change in the step's
    collective time over the fit's bootstrap draws (`cost_draws`; 0 where the replay uses measured durations)."""
    timed: bool = False
    """The gain is the run's own timed difference between two modes (the schedule), not a replay."""
    to_mode: str | None = None
    """The schedule: the mode it switches to (whose timed steps a timed gain compares with)."""
    less_overlap: bool = False
    """The change takes communication out from under compute (fewer DDP buckets, a forward that
    waits for more all_gathers): a gain says the overlap it removes costs more than it hides."""
    call_cost: tuple[CallCost, ...] = ()
    """The per-call costs its new calls were replayed with (`call_costs`); with two, gain_us is
    midway between their replays' gains."""
    gain_range_us: tuple[float, float] | None = None
    """With two readings of the call cost: the lower and the higher of their replays' gains."""


@dataclass(frozen=True)
class Replayed:
    """One mode's step as the replay sees it."""

    mode: str
    graph: model.StepGraph
    step_us: float
    """The replay of the run as it ran (its knobs as configured or calibrated)."""
    profiled_ms: float | None


def rerun_config(cfg: RunConfig, mode: str, change: Mapping[str, object]) -> Config:
    """The run's Config for one mode with `change` applied, as a verification run takes it: a flag
    only another mode takes (ModeSpec.exclusive_flags: --first-bucket-mb, --fsdp-group) back at its
    default. ValueError: the run's own checks refuse it."""
    defaults = {f.name: f.default for f in flags.flags(Config)}
    values: dict[str, object] = {"compare_modes": None, "mode": mode, **change}
    for name, spec in MODES.items():
        if name != mode:
            values.update({flag: defaults[flag] for flag in spec.exclusive_flags})
    return from_record(cfg, **values)


def unit_params(cfg: RunConfig, recorded: tuple[tuple[int, ...], ...] = ()) -> list[tuple[int, int]]:
    """(unit, nbytes) per parameter of the run's model, in model.parameters() order (DDP's buckets):
    from the record (RunMetrics.unit_param_bytes), else, for a record before it, from the model built
    on the meta device (which imports torch: about 1.3 s of the command)."""
    if not recorded:
        from profile_overlap.run import models

        recorded = models.unit_param_bytes(from_record(cfg))
    return [(u, nbytes) for u, unit in enumerate(recorded) for nbytes in unit]


def group_units(units: whatif.Units, size: int) -> whatif.Units:
    """`units` merged into fsdp2's fully_shard groups of `size` consecutive units (`--fsdp-group`)."""
    if size <= 1:
        return units
    idx = [range(k, min(k + size, len(units.nbytes))) for k in range(0, len(units.nbytes), size)]
    return whatif.Units(
        nbytes=tuple(sum(units.nbytes[u] for u in g) for g in idx),
        backward_share=tuple(sum(units.backward_share[u] for u in g) for g in idx),
        optimizer_share=tuple(sum(units.optimizer_share[u] for u in g) for g in idx),
        measured_cuts=units.measured_cuts,
    )


def units_of(params: list[tuple[int, int]], found: whatif.Units) -> whatif.Units:
    """The model's units: the measured per-unit backward cuts when the run had them, else shares by bytes."""
    num = max(u for u, _ in params) + 1
    nbytes = tuple(sum(n for u, n in params if u == k) for k in range(num))
    by_bytes = tuple(n / sum(nbytes) for n in nbytes)
    if len(found.nbytes) == num and found.measured_cuts:
        return dataclasses.replace(found, nbytes=nbytes)
    return whatif.Units(nbytes=nbytes, backward_share=by_bytes, optimizer_share=by_bytes, measured_cuts=False)


SERIAL_OVERLAP_PCT = 5.0
"""fsdp2 measured with less of its communication overlapped than this (%) is replayed serial: its
collectives ran beside no compute, so no schedule change can hide them (docs/advise.md)."""


def replay_as_run(m: whatif.Measured, units: whatif.Units, cfg: RunConfig, world: int, *, overlap_pct: float | None = None) -> Replayed:
    """The mode's graph with its measured collectives and the knobs it ran with (fsdp2: on its
    fully_shard groups, serial when its measured overlap is under SERIAL_OVERLAP_PCT). FSDP2's
    implicit prefetch (--fsdp-prefetch 0) is calibrated: the distances (0 or 1, forward and
    backward) whose replay comes closest to the measured profiled step."""
    flags = MODES[m.mode].flags
    if "fsdp_group" in flags:
        units = group_units(units, cfg.fsdp_group)
    graph = whatif.step_graph(m, units, durations=lambda c, n: c.dur_us, world_size=world, measured_world=world, compute_scale=1.0)
    if "split_prefetch" in flags:
        graph = dataclasses.replace(graph, knobs=model.Knobs(split_prefetch=cfg.split_prefetch))
    if "fsdp_prefetch" in flags:
        n = cfg.fsdp_prefetch
        options = [(n, n)] if n else [(f, b) for f in (0, 1) for b in (0, 1)]
        target = (m.profiled_ms or 0) * 1e3

        serial = overlap_pct is not None and overlap_pct < SERIAL_OVERLAP_PCT

        def knobs(fb):
            return model.Knobs(fsdp_forward_ahead=fb[0], fsdp_backward_ahead=fb[1], serial=serial)

        best = min(options, key=lambda fb: abs(model.simulate(dataclasses.replace(graph, knobs=knobs(fb))).step_us - target))
        graph = dataclasses.replace(graph, knobs=knobs(best))
    return Replayed(mode=m.mode, graph=graph, step_us=model.simulate(graph).step_us, profiled_ms=m.profiled_ms)


def _gain(r: Replayed, graph: model.StepGraph) -> float:
    return r.step_us - model.simulate(graph).step_us


def cost_samples(
    measured: dict[str, whatif.Measured], kind: str, mode: str | None = None, *, medians: bool = False
) -> list[tuple[int, float]]:
    """(bytes, µs) of every rank's and profiled step's `kind` calls (of `mode`'s when given); with
    `medians`, of their medians per position in the step instead (`Measured.calls`)."""
    return [
        (c.nbytes, c.dur_us)
        for name, m in measured.items()
        if mode in (None, name)
        for c in (m.calls if medians else m.call_samples or m.calls)
        if c.kind == kind and c.nbytes and c.dur_us > 0
    ]


def collective_cost(samples: list[tuple[int, float]]) -> Callable[[int], float]:
    """µs of one collective of n bytes, fitted to (bytes, µs) calls of its kind (`cost_samples`): of
    several sizes, the Theil–Sen line t = a + b·n (model.robust_line: a call that waited for a late
    rank does not tilt it); of one size, its time per byte (a = 0: latency cannot be told from
    bandwidth with one size)."""
    if _several_sizes(samples):
        a, b = model.robust_line(samples)
    else:
        a, b = 0.0, sum(t for _, t in samples) / max(sum(n for n, _ in samples), 1)
    return lambda n: a + b * n


def _several_sizes(samples: list[tuple[int, float]]) -> bool:
    """Whether the calls have sizes far enough apart (model.apart) to tell latency from bandwidth."""
    return bool(samples) and model.apart(min(n for n, _ in samples), max(n for n, _ in samples))


FIT_RESAMPLES = 200
"""Bootstrap resamples of the calls behind `advice_cost_fit` (`cost_draws`)."""


def cost_draws(samples: dict[str, list[tuple[int, float]]], *, seed: int = 0) -> list[Callable[[str, int], float]]:
    """FIT_RESAMPLES fits of each kind's line, each to its calls drawn again with replacement (seeded):
    how far the calls leave the line uncertain."""
    rng = random.Random(seed)
    return [_by_kind({k: collective_cost(rng.choices(v, k=len(v)) if v else v) for k, v in samples.items()}) for _ in range(FIT_RESAMPLES)]


def _by_kind(fits: dict[str, Callable[[int], float]]) -> Callable[[str, int], float]:
    return lambda kind, n: fits[kind](n)


def call_costs(measured: dict[str, whatif.Measured], kind: str = "all_reduce", mode: str | None = None) -> tuple[CallCost, ...]:
    """What one `kind` call costs (definitions: `advice_call_cost`), from the run's calls of that kind
    (of `mode`'s when given): of several sizes, one reading, the Theil–Sen line (model.robust_line); of
    one size, two, because latency cannot be told from bandwidth there: all of the calls' time per
    byte (latency 0) and all of it per call (each call its mean time, whatever its size)."""
    samples = cost_samples(measured, kind, mode, medians=True)
    if not samples:
        return (CallCost(kind=kind, calls=0, latency_us=0.0, us_per_mib=0.0, source=BANDWIDTH),)
    if _several_sizes(samples):
        a, b = model.robust_line(samples)
        return (CallCost(kind=kind, calls=len(samples), latency_us=a, us_per_mib=b * MIB, source=FIT),)
    total_us, total_bytes = sum(t for _, t in samples), sum(n for n, _ in samples)
    return (
        CallCost(kind=kind, calls=len(samples), latency_us=0.0, us_per_mib=total_us / total_bytes * MIB, source=BANDWIDTH),
        CallCost(kind=kind, calls=len(samples), latency_us=total_us / len(samples), us_per_mib=0.0, source=LATENCY),
    )


def cost_words(costs: tuple[CallCost, ...]) -> str:
    """'each all_reduce 120 µs + 3.1 ms/MiB (fit to 8 calls)', or for one size its two readings."""
    if len(costs) == 1:
        c = costs[0]
        return f"each {c.kind} {c.latency_us:.3g} µs + {c.us_per_mib / 1e3:.3g} ms/MiB (fit to {c.calls} calls)"
    by_byte, by_call = costs
    return (
        f"the run's {by_byte.kind}s have one size: each new call replayed at {by_byte.us_per_mib / 1e3:.3g} ms/MiB "
        f"(all bandwidth) and at {by_call.latency_us / 1e3:.3g} ms whatever its size (all latency); the gain is midway between them"
    )


def _rebucket_gain(r: Replayed, buckets: tuple[tuple[int, int], ...], costs: tuple[CallCost, ...]) -> dict:
    """The Candidate fields of a rebucketing: its gain under each reading of the call cost (with two,
    the middle of their replays' gains as gain_us and both as gain_range_us: either reading can hold)."""
    gains = [_gain(r, model.rebucket(r.graph, buckets, c.us)) for c in costs]
    return {
        "gain_us": (min(gains) + max(gains)) / 2,
        "call_cost": costs,
        "gain_range_us": (min(gains), max(gains)) if len(gains) > 1 else None,
    }


def ddp(r: Replayed, params: list[tuple[int, int]], cfg: RunConfig, cost: tuple[CallCost, ...]) -> Iterator[Candidate]:
    """Bucket caps that cut the gradients into 2..K buckets (one that splits nothing is left out), each
    bucket's all_reduce costed by each reading of `cost` (call_costs)."""
    first = cfg.first_bucket_mb * MIB if cfg.first_bucket_mb is not None else None
    now = model.ddp_buckets(params, cfg.bucket_cap_mb * MIB, first)
    total = sum(n for _, n in params)
    seen = {now}
    # One bucket (no all_reduce under the backward) only as a way back from several.
    for count in range(1 if len(now) > 1 else 2, len(r.graph.forward_us) + 1):
        cap_mb = math.ceil(total / count / MIB * 10) / 10
        buckets = model.ddp_buckets(params, cap_mb * MIB, first)
        if (len(buckets) < 2 and len(now) < 2) or buckets in seen:
            continue
        seen.add(buckets)
        yield Candidate(
            kind="ddp-bucket",
            mode=r.mode,
            change=f"gradient buckets of {cap_mb:g} MiB: {len(buckets)} all_reduces, the first starting when unit {buckets[0][0]}'s "
            f"backward ends (now {len(now)} bucket{'s' if len(now) > 1 else ''} of at most {cfg.bucket_cap_mb:g} MiB; {cost_words(cost)})",
            flag=f"--bucket-cap-mb {cap_mb:g}",
            code=f"DistributedDataParallel(model, bucket_cap_mb={cap_mb:g})",
            config={"bucket_cap_mb": cap_mb},
            less_overlap=len(buckets) < len(now),
            **_rebucket_gain(r, buckets, cost),
        )
    yield from ddp_first_bucket(r, params, cfg, cost, now)


def ddp_first_bucket(
    r: Replayed, params: list[tuple[int, int]], cfg: RunConfig, cost: tuple[CallCost, ...], now: tuple[tuple[int, int], ...]
) -> Iterator[Candidate]:
    """A first bucket (the gradients ready first) that closes when each of the last units' backward
    ends, the others at the run's --bucket-cap-mb: its all_reduce starts under the rest of backward."""
    num, seen = max(u for u, _ in params) + 1, {now}
    for last in range(num - 1, 0, -1):
        first_mb = math.floor(sum(n for u, n in params if u >= last) / MIB * 100) / 100
        if first_mb <= 0 or first_mb == cfg.first_bucket_mb or first_mb >= cfg.bucket_cap_mb:
            continue
        buckets = model.ddp_buckets(params, cfg.bucket_cap_mb * MIB, first_mb * MIB)
        if len(buckets) < 2 or buckets in seen:
            continue
        seen.add(buckets)
        yield Candidate(
            kind="ddp-first-bucket",
            mode=r.mode,
            change=f"a first gradient bucket of {first_mb:g} MiB ({buckets[0][1] / MIB:.3g} MiB, all_reduced when unit "
            f"{buckets[0][0]}'s backward ends), the others at most {cfg.bucket_cap_mb:g} MiB: {len(buckets)} all_reduces "
            f"({cost_words(cost)})",
            flag=f"--first-bucket-mb {first_mb:g}",
            code=f"DistributedDataParallel(model, bucket_cap_mb_list=[{first_mb:g}, {cfg.bucket_cap_mb:g}])",
            config={"first_bucket_mb": first_mb},
            **_rebucket_gain(r, buckets, cost),
        )


@dataclass(frozen=True)
class FsdpCosts:
    """What FSDP2 costs on the training thread besides its collectives (the record's per-rank `fsdp`,
    analysis/file/fsdp_units.py): the median over the mode's ranks; zeros and empty on GPU or in a record without it."""

    backward_gathers_us: float = 0.0
    """µs per step of the backward gathers' own work: issuing, prefetching and copying them."""
    unit_busy_us: tuple[float, ...] = ()
    """Per fully_shard unit of the run (forward order), µs per step of busy time in the FSDP:: ranges naming it."""


def fsdp_costs(analysis: AnalysisRecord) -> FsdpCosts:
    """The mode's FsdpCosts from its record's ranks."""
    found = [r.fsdp for r in analysis.ranks if r.fsdp is not None]
    busy = [tuple(u.busy_us for u in x.units) for x in found]
    same = bool(busy) and len({len(b) for b in busy}) == 1
    return FsdpCosts(
        backward_gathers_us=statistics.median(x.backward_gathers_us for x in found) if found else 0.0,
        unit_busy_us=tuple(statistics.median(b[k] for b in busy) for k in range(len(busy[0]))) if same else (),
    )


def fsdp2_reshard(r: Replayed, cfg: RunConfig, *, backward_gathers_us: float = 0.0) -> Iterator[Candidate]:
    """Resharding (its gain: the backward gathers in the replay, and their work on the training thread, measured)."""
    knobs = r.graph.knobs
    if cfg.reshard_after_forward == "true":
        yield Candidate(
            kind="fsdp2-reshard",
            mode=r.mode,
            change="keep each unit's gathered parameters from forward to backward: no all_gather in backward (more memory)"
            + (
                f": their whole time comes off the step (the run overlapped under {SERIAL_OVERLAP_PCT:g}% of its communication)"
                if knobs.serial
                else ""
            )
            + f", and none of FSDP2's work for them: issuing, prefetching, copying ({backward_gathers_us / 1e3:.3g} ms per step measured)",
            flag="--reshard-after-forward false",
            code="fully_shard(unit, reshard_after_forward=False)",
            config={"reshard_after_forward": "false"},
            gain_us=_gain(r, dataclasses.replace(r.graph, knobs=dataclasses.replace(knobs, reshard=False))) + backward_gathers_us,
        )


def fsdp2_prefetch(r: Replayed, cfg: RunConfig) -> Iterator[Candidate]:
    """Explicit prefetch distances."""
    knobs = r.graph.knobs
    why = (
        f" (replayed serial: the run overlapped under {SERIAL_OVERLAP_PCT:g}% of its communication, so its all_gathers "
        "ran beside no compute and moving them earlier hides nothing)"
        if knobs.serial
        else ""
    )
    for n in range(1, len(r.graph.forward_us)):
        if n == cfg.fsdp_prefetch:
            continue
        changed = dataclasses.replace(knobs, fsdp_forward_ahead=n, fsdp_backward_ahead=n)
        yield Candidate(
            kind="fsdp2-prefetch",
            mode=r.mode,
            change=f"prefetch the next {n} unit{'s' if n > 1 else ''}' all_gathers explicitly in forward and backward{why}",
            flag=f"--fsdp-prefetch {n}",
            code=f"units[k].set_modules_to_forward_prefetch(units[k + 1 : k + {n + 1}]) (and backward: units[k - {n} : k])",
            config={"fsdp_prefetch": n},
            gain_us=_gain(r, dataclasses.replace(r.graph, knobs=changed)),
        )


def unit_cost_us(units: whatif.Units, cfg: RunConfig, busy: tuple[float, ...]) -> float:
    """µs each fully_shard unit costs whatever its size: a of the Theil–Sen line busy = a + b·bytes
    through the run's units (FsdpCosts.unit_busy_us); 0 when the trace did not give one per unit."""
    nbytes = group_units(units, cfg.fsdp_group).nbytes
    return model.robust_line(list(zip(nbytes, busy)))[0] if busy and len(busy) == len(nbytes) else 0.0


def _with_unit_cost(g: model.StepGraph, us: float) -> model.StepGraph:
    """`g` with `us` more compute in each unit, split between its forward and backward as theirs is."""
    f, b = g.forward_us, g.backward_us
    share = [x / (x + y) if x + y > 0 else 0.5 for x, y in zip(f, b)]
    return dataclasses.replace(
        g, forward_us=tuple(x + us * s for x, s in zip(f, share)), backward_us=tuple(y + us * (1 - s) for y, s in zip(b, share))
    )


def fsdp2_groups(
    r: Replayed,
    units: whatif.Units,
    cfg: RunConfig,
    cost: Callable[[str, int], float],
    *,
    draws: Sequence[Callable[[str, int], float]] = (),
    unit_us: float = 0.0,
) -> Iterator[Candidate]:
    """Other fully_shard groupings (`--fsdp-group N`): the run's step on per-unit compute, its
    collectives one per group of the group's bytes, costed by the run's fit; each group pays
    `unit_us` (unit_cost_us: FSDP2's hooks), which the run paid once per unit it had. The gain is
    against the run's own grouping costed the same way (so the fit's error mostly cancels); its
    fit error is half the 95% range of the change in collective time under the fit's bootstrap
    draws (`cost_draws`)."""
    g, total = r.graph, sum(units.nbytes)
    before = -(-len(units.nbytes) // cfg.fsdp_group)
    body = sum(g.forward_us) + sum(g.backward_us)
    unit_us = min(unit_us, body / before) if body > 0 else 0.0
    keep = 1 - unit_us * before / body if body > 0 else 1.0  # the compute without the run's per-unit cost
    per_unit = dataclasses.replace(  # regroup takes the collectives' kinds and phases from it
        g,
        forward_us=tuple(sum(g.forward_us) * keep * x for x in units.backward_share),
        backward_us=tuple(sum(g.backward_us) * keep * x for x in units.backward_share),
        optimizer_us=tuple(sum(g.optimizer_us) * x for x in units.optimizer_share),
    )
    now = _with_unit_cost(model.regroup(per_unit, units.nbytes, cfg.fsdp_group, cost), unit_us)
    base = model.simulate(now).step_us
    for n in range(1, len(units.nbytes) + 1):
        if n == cfg.fsdp_group or total == 0:
            continue
        changed = _with_unit_cost(model.regroup(per_unit, units.nbytes, n, cost), unit_us)
        calls = -(-len(units.nbytes) // n)
        what = "the whole model in one call" if calls == 1 else f"{n} consecutive units per call"
        trade = (
            "fewer, larger calls: less latency and hook work, each unit waits for a larger gather"
            if n > cfg.fsdp_group
            else ("more, smaller calls: more latency and hook work, each gather hides under less compute")
        )
        yield Candidate(
            kind="fsdp2-group",
            mode=r.mode,
            change=f"fully_shard {what}: {calls} all_gather{'s' if calls > 1 else ''} per pass instead of {before} ({trade}; "
            f"{unit_us / 1e3:.3g} ms of FSDP2 hook work per unit measured)",
            flag=f"--fsdp-group {n}",
            code=f"for k in range(0, len(units), {n}): fully_shard(units[k : k + {n}])",
            config={"fsdp_group": n},
            gain_us=base - model.simulate(changed).step_us,
            fit_error_us=_half_range(
                [_comm_us(per_unit, units.nbytes, n, d) - _comm_us(per_unit, units.nbytes, cfg.fsdp_group, d) for d in draws]
            ),
        )


def _comm_us(g: model.StepGraph, nbytes: Sequence[int], size: int, cost: Callable[[str, int], float]) -> float:
    """The step's collective time with its units in groups of `size`, costed by `cost`."""
    return sum(c.dur_us for c in model.regroup(g, nbytes, size, cost).comms)


def _half_range(values: list[float]) -> float:
    """Half the central 95% range of `values` (0 for none)."""
    if not values:
        return 0.0
    q = statistics.quantiles(values, n=40, method="inclusive")
    return (q[-1] - q[0]) / 2


def split(r: Replayed, cfg: RunConfig) -> Iterator[Candidate]:
    for n in range(len(r.graph.forward_us)):
        if n == cfg.split_prefetch:
            continue
        yield Candidate(
            kind="split-prefetch",
            mode=r.mode,
            change=f"wait for the all_gathers of units k to k+{n} before unit k's forward",
            flag=f"--split-prefetch {n}",
            code=None,
            config={"split_prefetch": n},
            gain_us=_gain(r, dataclasses.replace(r.graph, knobs=model.Knobs(split_prefetch=n))),
            less_overlap=n > cfg.split_prefetch,
        )


def schedule(replayed: dict[str, Replayed], medians: dict[str, float | None]) -> Iterator[Candidate]:
    """sequential -> split, or the reverse, when the run measured both. When the run timed both, the gain
    is what its timed steps measured (median against median: the direct evidence; the replay of the
    profiled steps leaves out what overlap costs compute, e.g. gloo's threads on the cores); else the replay's."""
    base, mode = SPEEDUP_BASELINE, SPEEDUP_MODE
    if not {base, mode} <= set(replayed):
        return
    replay_gain = replayed[base].step_us - replayed[mode].step_us
    times = {m: t for m in (base, mode) if (t := medians.get(m)) is not None}
    timed = len(times) == 2
    gain = (times[base] - times[mode]) * 1e3 if timed else replay_gain
    src, dst = (base, mode) if gain > 0 else (mode, base)
    change = f"train with the {dst} schedule instead of {src}"
    if timed:
        replayed_gain = replay_gain if src == base else -replay_gain
        change += (
            f": this run timed {src} at {times[src]:.3g} ms and {dst} at {times[dst]:.3g} ms per step "
            f"(the replay of the profiled steps gives {replayed_gain / 1e3:.3g} ms)"
        )
    yield Candidate(
        kind="schedule",
        mode=src,
        change=change,
        flag=f"--mode {dst}",
        code=None,
        config={"mode": dst},
        gain_us=abs(gain),
        timed=timed,
        to_mode=dst,
    )


@dataclass(frozen=True)
class Context:
    """What a mode's candidates are made from besides its replay: the run's config, every mode's measured
    step, the world size, the model's parameters and units, and each mode's analysis record."""

    cfg: RunConfig
    measured: dict[str, whatif.Measured]
    world: int
    params: list[tuple[int, int]]
    units: whatif.Units
    analysis: Callable[[str], AnalysisRecord]


def _ddp_buckets(r: Replayed, ctx: Context) -> Iterator[Candidate]:
    return ddp(r, ctx.params, ctx.cfg, call_costs(ctx.measured, "all_reduce"))


def _fsdp2_reshard(r: Replayed, ctx: Context) -> Iterator[Candidate]:
    return fsdp2_reshard(r, ctx.cfg, backward_gathers_us=fsdp_costs(ctx.analysis(r.mode)).backward_gathers_us)


def _fsdp2_group(r: Replayed, ctx: Context) -> Iterator[Candidate]:
    samples = {k: cost_samples(ctx.measured, k, r.mode) for k in ("all_gather", "reduce_scatter")}
    fits = {k: collective_cost(v) for k, v in samples.items()}
    unit_us = unit_cost_us(ctx.units, ctx.cfg, fsdp_costs(ctx.analysis(r.mode)).unit_busy_us)
    items = fsdp2_groups(r, ctx.units, ctx.cfg, _by_kind(fits), draws=cost_draws(samples), unit_us=unit_us)
    # A kind whose calls have one size cannot tell latency from bandwidth: its line is all bandwidth
    # (a merge saves none of it). The other reading, each call its mean time whatever its size (all
    # latency), is replayed too, as ddp's advice_call_cost does, and the gain is midway between them.
    one_size = {k for k, v in samples.items() if v and not _several_sizes(v)}
    if not one_size:
        return items
    latency = {k: (_flat(samples[k]) if k in one_size else f) for k, f in fits.items()}
    by_latency = fsdp2_groups(r, ctx.units, ctx.cfg, _by_kind(latency), unit_us=unit_us)
    return (_two_readings(c, other, one_size) for c, other in zip(items, by_latency))


def _flat(samples: list[tuple[int, float]]) -> Callable[[int], float]:
    """Each call the mean time of `samples`, whatever its size (all latency)."""
    mean = statistics.fmean(t for _, t in samples)
    return lambda n: mean


def _two_readings(c: Candidate, other: Candidate, kinds: set[str]) -> Candidate:
    """`c` (its one-size kinds all bandwidth) with `other`'s gain (all latency) as the second reading."""
    low, high = sorted((c.gain_us, other.gain_us))
    return dataclasses.replace(
        c,
        gain_us=(low + high) / 2,
        gain_range_us=(low, high),
        change=c.change[:-1] + f"; the {' and '.join(sorted(kinds))} calls have one size: the gain is midway between "
        "replaying them all bandwidth and all latency)",
    )


CANDIDATES: dict[str, Callable[[Replayed, Context], Iterator[Candidate]]] = {
    "ddp-buckets": _ddp_buckets,
    "fsdp2-reshard": _fsdp2_reshard,
    "fsdp2-prefetch": lambda r, ctx: fsdp2_prefetch(r, ctx.cfg),
    "fsdp2-group": _fsdp2_group,
    "split-prefetch": lambda r, ctx: split(r, ctx.cfg),
}
"""The replayed changes a mode's ModeSpec.advise names: each the mode's replay as run -> its candidates."""
