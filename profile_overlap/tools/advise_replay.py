"""The replayed candidates of `advise`: each mode's measured step (tools/whatif.py) replayed with one
knob changed (tools/whatif_model.py), against the same step replayed as run.

Predicted gain = replay(as run) − replay(changed): both replays share the measured compute and
collectives, so what the model gets wrong about the run itself mostly cancels; what is left is
carried by the interval (README "What to change").
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from profile_overlap.record.config import RunConfig
from profile_overlap.tools import whatif
from profile_overlap.tools import whatif_model as model

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


@dataclass(frozen=True)
class Replayed:
    """One mode's step as the replay sees it."""

    mode: str
    graph: model.StepGraph
    step_us: float
    """The replay of the run as it ran (its knobs as configured or calibrated)."""
    profiled_ms: float | None


def unit_params(cfg: RunConfig) -> list[tuple[int, int]]:
    """(unit, nbytes) per parameter of the run's model, in model.parameters() order (DDP's buckets)."""
    import torch

    from profile_overlap.run import models
    from profile_overlap.run.config import Config
    from profile_overlap.run.dtypes import torch_dtype

    config = Config(**{k: v for k, v in cfg.items() if k != "nproc_per_node"})
    net = models.build_model(config, dtype=torch_dtype(config.dtype), device=torch.device("meta"))
    return [(u, p.numel() * p.element_size()) for u, unit in enumerate(net.units()) for p in unit.parameters()]


def units_of(params: list[tuple[int, int]], found: whatif.Units) -> whatif.Units:
    """The model's units: the measured per-unit backward cuts when the run had them, else shares by bytes."""
    num = max(u for u, _ in params) + 1
    nbytes = tuple(sum(n for u, n in params if u == k) for k in range(num))
    by_bytes = tuple(n / sum(nbytes) for n in nbytes)
    if len(found.nbytes) == num and found.measured_cuts:
        return dataclasses.replace(found, nbytes=nbytes)
    return whatif.Units(nbytes=nbytes, backward_share=by_bytes, optimizer_share=by_bytes, measured_cuts=False)


def replay_as_run(m: whatif.Measured, units: whatif.Units, cfg: RunConfig, world: int) -> Replayed:
    """The mode's graph with its measured collectives and the knobs it ran with. FSDP2's implicit
    prefetch (--fsdp-prefetch 0) is calibrated: the distances (0 or 1, forward and backward) whose
    replay comes closest to the measured profiled step."""
    graph = whatif.step_graph(m, units, durations=lambda c, n: c.dur_us, world_size=world, measured_world=world, compute_scale=1.0)
    if m.mode in ("split", "split-blocking"):
        graph = dataclasses.replace(graph, knobs=model.Knobs(split_prefetch=cfg.split_prefetch))
    if m.mode == "fsdp2":
        n = cfg.fsdp_prefetch
        options = [(n, n)] if n else [(f, b) for f in (0, 1) for b in (0, 1)]
        target = (m.profiled_ms or 0) * 1e3

        def knobs(fb):
            return model.Knobs(fsdp_forward_ahead=fb[0], fsdp_backward_ahead=fb[1])

        best = min(options, key=lambda fb: abs(model.simulate(dataclasses.replace(graph, knobs=knobs(fb))).step_us - target))
        graph = dataclasses.replace(graph, knobs=knobs(best))
    return Replayed(mode=m.mode, graph=graph, step_us=model.simulate(graph).step_us, profiled_ms=m.profiled_ms)


def _gain(r: Replayed, graph: model.StepGraph) -> float:
    return r.step_us - model.simulate(graph).step_us


def all_reduce_cost(measured: dict[str, whatif.Measured], world: int) -> Callable[[int], float]:
    """µs of one all_reduce of n bytes: the α-β fit to the run's all_reduces of several sizes; with
    one size, its time per byte (α = 0)."""
    samples = [("all_reduce", world, c.nbytes, c.dur_us) for m in measured.values() for c in m.calls if c.kind == "all_reduce" and c.nbytes]
    if len({s[2] for s in samples}) > 1:
        alpha, gbps = model.fit_alpha_beta(samples, latency_us=0.0)
    else:
        alpha, gbps = 0.0, sum(s[2] * model.bus_factor("all_reduce", world) for s in samples) / max(sum(s[3] for s in samples), 1e-9) / 1e3
    return lambda n: model.ring_cost_us("all_reduce", n, world, latency_us=alpha, link_gbps=gbps)


def ddp(r: Replayed, params: list[tuple[int, int]], cfg: RunConfig, cost: Callable[[int], float]) -> Iterator[Candidate]:
    """Bucket caps that cut the gradients into 2..K buckets (one that splits nothing is left out)."""
    now = model.ddp_buckets(params, cfg.bucket_cap_mb * MIB)
    total = sum(n for _, n in params)
    seen = {now}
    for count in range(2, len(r.graph.forward_us) + 1):
        cap_mb = math.ceil(total / count / MIB * 10) / 10
        buckets = model.ddp_buckets(params, cap_mb * MIB)
        if len(buckets) < 2 or buckets in seen:
            continue
        seen.add(buckets)
        yield Candidate(
            kind="ddp-bucket",
            mode="ddp",
            change=f"gradient buckets of {cap_mb:g} MiB: {len(buckets)} all_reduces, the first starting when unit {buckets[0][0]}'s "
            f"backward ends (now {len(now)} bucket{'s' if len(now) > 1 else ''} of at most {cfg.bucket_cap_mb:g} MiB)",
            flag=f"--bucket-cap-mb {cap_mb:g}",
            code=f"DistributedDataParallel(model, bucket_cap_mb={cap_mb:g})",
            config={"bucket_cap_mb": cap_mb},
            gain_us=_gain(r, model.rebucket(r.graph, buckets, cost)),
        )


def fsdp2(r: Replayed, cfg: RunConfig) -> Iterator[Candidate]:
    knobs = r.graph.knobs
    num_units = len(r.graph.forward_us)
    if cfg.reshard_after_forward == "true":
        yield Candidate(
            kind="fsdp2-reshard",
            mode="fsdp2",
            change="keep each unit's gathered parameters from forward to backward: no all_gather in backward (more memory)",
            flag="--reshard-after-forward false",
            code="fully_shard(unit, reshard_after_forward=False)",
            config={"reshard_after_forward": "false"},
            gain_us=_gain(r, dataclasses.replace(r.graph, knobs=dataclasses.replace(knobs, reshard=False))),
        )
    for n in range(1, num_units):
        if n == cfg.fsdp_prefetch:
            continue
        changed = dataclasses.replace(knobs, fsdp_forward_ahead=n, fsdp_backward_ahead=n)
        yield Candidate(
            kind="fsdp2-prefetch",
            mode="fsdp2",
            change=f"prefetch the next {n} unit{'s' if n > 1 else ''}' all_gathers explicitly in forward and backward",
            flag=f"--fsdp-prefetch {n}",
            code=f"units[k].set_modules_to_forward_prefetch(units[k + 1 : k + {n + 1}]) (and backward: units[k - {n} : k])",
            config={"fsdp_prefetch": n},
            gain_us=_gain(r, dataclasses.replace(r.graph, knobs=changed)),
        )


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
        )


def schedule(replayed: dict[str, Replayed]) -> Iterator[Candidate]:
    """sequential -> split, or the reverse, when the run measured both (the replay of each)."""
    if not {"sequential", "split"} <= set(replayed):
        return
    gain = replayed["sequential"].step_us - replayed["split"].step_us
    src, dst = ("sequential", "split") if gain > 0 else ("split", "sequential")
    yield Candidate(
        kind="schedule",
        mode=src,
        change=f"train with the {dst} schedule instead of {src}",
        flag=f"--mode {dst}",
        code=None,
        config={"mode": dst},
        gain_us=abs(gain),
    )
