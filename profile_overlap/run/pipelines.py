"""The three schedules, one function each, with one signature: `step(state, step_index)`.

A step is a real training step of the model (run/models.py): forward, loss, autograd backward,
Adam. Each communication unit (an mlp layer; the transformer's embedding, each block, its head)
keeps its parameters as views into one flat buffer, padded to a multiple of the world size, and
its gradients are reduced as one flat bucket. Every step is labelled with its phases, as
record_function ranges named `forward`, `backward` and `optimizer`.

- sequential (the seed's all_reduce, then compute): forward; backward, then a blocking all_reduce
  of every bucket; Adam on all parameters, with full optimizer state on every rank.
- split (ZeRO-2 / FSDP): in backward, a post-accumulate-grad hook reduce-scatters each unit's
  bucket asynchronously as soon as autograd has produced all its gradients, so it overlaps the
  backward of the earlier units. In the optimizer phase, unit by unit in forward order, wait for
  its reduce_scatter, run Adam on this rank's 1/N shard (state for the shard only) and start an
  async all_gather of the updated shard, in place. The next forward pass waits for unit k's
  all_gather just before unit k runs (prefetch), so later gathers hide behind earlier units;
  `--split-prefetch N` waits there for units k..k+N instead.
- split-blocking: the same collectives and compute as split, but every collective is waited for
  at once, so nothing overlaps. Against split it measures what overlapping wins.

All three apply the same elementwise Adam to the same reduced gradients, so they end with equal
parameters; `verify.py` checks it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import torch
import torch.distributed as dist
from torch import nn
from torch.profiler import record_function

from profile_overlap.analysis.read.classify import SCHEDULE_OPTIMIZER_RANGE, SCHEDULE_WAIT_RANGES
from profile_overlap.core.modes import MODES, PHASES
from profile_overlap.run import models
from profile_overlap.run.config import Config

WAIT_REDUCE_SCATTER, WAIT_ALL_GATHER = SCHEDULE_WAIT_RANGES
# torch 2.13 renamed all_gather_into_tensor / reduce_scatter_tensor to *_single (same semantics);
# older releases only have the old names.
all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
reduce_scatter_single = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor

ADAM_BETAS = (0.9, 0.999)
ADAM_EPS = 1e-8
PHASE_LABELS_ENV = "PROFILE_OVERLAP_PHASE_LABELS"
"""Test-only: `hidden` names the phase labels `hidden:forward`, `hidden:backward` and
`hidden:optimizer`, which the analysis does not read as labels, so that it finds the phases from
torch's own ranges as in a job without labels, while a test can still tell where the labelled
phases were (tests/test_phase_inference.py). Never set in real runs."""


def phase_label(name: str) -> record_function:
    """The record_function range of one of the step's PHASES (hidden under PHASE_LABELS_ENV=hidden)."""
    assert name in PHASES
    return record_function(f"hidden:{name}" if os.environ.get(PHASE_LABELS_ENV) == "hidden" else name)


FAULT_KINDS = ("corrupt", "nan", "kill", "hang", "slow")


@dataclass
class Fault:
    """Test-only fault injection, from PROFILE_OVERLAP_FAULT=<kind>:rank=R:step=S[:layer=L] or
    PROFILE_OVERLAP_FAULT=slow:rank=R:ms=M.

    kind: corrupt (add 1 to unit L's reduce_scatter result), nan (write a NaN into it), kill (the
    process exits), hang (sleeps), slow (rank R sleeps M ms at the start of its backward, every
    step: a planted late rank).
    """

    kind: str
    rank: int
    step: int
    layer: int = 0
    ms: float = 0.0

    @classmethod
    def from_env(cls) -> Fault | None:
        spec = os.environ.get("PROFILE_OVERLAP_FAULT")
        if not spec:
            return None
        kind, *pairs = spec.split(":")
        fields = dict(pair.split("=", 1) for pair in pairs)
        if kind not in FAULT_KINDS:
            raise ValueError(f"PROFILE_OVERLAP_FAULT kind {kind!r} is not one of {', '.join(FAULT_KINDS)}")
        ms = float(fields.get("ms", 0))
        if kind == "slow" and ms <= 0:
            raise ValueError("PROFILE_OVERLAP_FAULT=slow needs ms=M > 0 (slow:rank=R:ms=M)")
        return cls(kind=kind, rank=int(fields.get("rank", 0)), step=int(fields.get("step", 0)), layer=int(fields.get("layer", 0)), ms=ms)

    def hits(self, *, rank: int, step: int, layer: int | None = None) -> bool:
        return self.rank == rank and self.step == step and (layer is None or self.layer == layer)


class FlatUnit:
    """One communication unit: its parameters become views into one flat buffer of `padded`
    elements (a multiple of the world size), so a collective moves the unit in one call."""

    def __init__(self, index: int, module: nn.Module, *, world_size: int, rank: int) -> None:
        self.index = index
        self.module = module
        self.params = list(module.parameters())
        self.numel = sum(p.numel() for p in self.params)
        self.padded = -(-self.numel // world_size) * world_size
        self.shard_numel = self.padded // world_size
        first = self.params[0]
        self.flat = torch.zeros(self.padded, dtype=first.dtype, device=first.device)
        offset = 0
        for p in self.params:
            view = self.flat[offset : offset + p.numel()]
            view.copy_(p.detach().reshape(-1))
            p.data = view.view_as(p)
            offset += p.numel()
        self.shard = self.flat[rank * self.shard_numel : (rank + 1) * self.shard_numel]
        """This rank's 1/N of the unit (a view: the all_gather runs in place)."""

    def flatten_grads(self, out: torch.Tensor | None = None) -> torch.Tensor:
        """The unit's gradients as one padded flat bucket; the parameters' own .grad are freed."""
        if out is None:
            out = self.flat.new_zeros(self.padded)
        torch.cat([_grad(p).reshape(-1) for p in self.params], out=out[: self.numel])
        for p in self.params:
            p.grad = None
        return out


def _grad(p: torch.Tensor) -> torch.Tensor:
    assert p.grad is not None, "a parameter without a gradient after backward"
    return p.grad


@dataclass
class State:
    """One rank's model, flat units, optimizer state and collective handles for one mode."""

    mode: str
    rank: int
    world_size: int
    config: Config
    device: torch.device
    dtype: torch.dtype
    lr: float
    model: models.MLP | models.Transformer
    units: list[FlatUnit]
    exp_avg: list[torch.Tensor]
    """Adam first moment, float32: the whole unit (sequential) or this rank's shard (split modes)."""
    exp_avg_sq: list[torch.Tensor]
    grads: list[torch.Tensor] = field(default_factory=list)
    """sequential: one full flat gradient bucket per unit, refilled every step."""
    shard_grads: list[torch.Tensor] = field(default_factory=list)
    """split modes: the reduce_scatter output per unit, this rank's 1/N."""
    fault: Fault | None = None
    adam_step: int = 0
    step: int = 0
    check: Callable[[int, int, torch.Tensor], None] | None = None
    """Called with (step, unit, flat gradient bucket) before the bucket is reduced (the warmup checks)."""
    pending_rs: dict[int, tuple[dist.Work, torch.Tensor]] = field(default_factory=dict)
    """unit -> (reduce_scatter handle, its input bucket), started in backward, consumed by the optimizer."""
    pending_ag: dict[int, dist.Work] = field(default_factory=dict)
    ready: list[int] = field(default_factory=list)
    """Units whose reduce_scatter was started this step, in that order."""
    hooks: list = field(default_factory=list)
    """The split modes' hook handles (see close)."""

    @property
    def params(self) -> list[torch.Tensor]:
        """The flat parameters, one per unit (what the verification compares)."""
        return [u.flat for u in self.units]

    def memory_bytes(self) -> dict[str, int]:
        """Bytes of the persistent tensors this rank holds, by role."""
        size = lambda ts: sum(t.numel() * t.element_size() for t in ts)  # noqa: E731
        return {
            "param_bytes": size(self.params),
            "grad_bytes": size(self.grads) + size(self.shard_grads),
            "optimizer_state_bytes": size(self.exp_avg) + size(self.exp_avg_sq),
        }

    def finish(self) -> None:
        """Wait for every collective still in flight (the last step's all_gathers)."""
        for handle in self.pending_ag.values():
            handle.wait()
        self.pending_ag.clear()

    def close(self) -> None:
        """Remove the split hooks once the mode is done. They hold this state, and the parameters
        hold them from C++, where the cycle collector cannot see: without this the whole mode (model,
        optimizer state, buffers) would live until the process ends."""
        for handle in self.hooks:
            handle.remove()
        self.hooks.clear()


def build_state(mode: str, *, config, rank: int, world_size: int, device: torch.device, dtype: torch.dtype) -> State:
    model = models.build_model(config, dtype=dtype, device=device)
    units = [FlatUnit(i, m, world_size=world_size, rank=rank) for i, m in enumerate(model.units())]
    split = MODES[mode].sharded
    like = [u.shard if split else u.flat for u in units]
    state = State(
        mode=mode,
        rank=rank,
        world_size=world_size,
        config=config,
        device=device,
        dtype=dtype,
        lr=config.workload.lr,
        model=model,
        units=units,
        exp_avg=[torch.zeros_like(t, dtype=torch.float32) for t in like],
        exp_avg_sq=[torch.zeros_like(t, dtype=torch.float32) for t in like],
        grads=[] if split else [torch.zeros_like(u.flat) for u in units],
        shard_grads=[torch.empty_like(u.shard) for u in units] if split else [],
        fault=Fault.from_env(),
    )
    if split:
        _install_split_hooks(state, blocking=not MODES[mode].overlaps)
    return state


def reduce_scatter(state: State, out: torch.Tensor, bucket: torch.Tensor, *, step: int, layer: int, async_op: bool = False):
    """Sum-reduce `bucket` across ranks and keep this rank's shard in `out`; returns the handle
    when async. Faults are injected into the result by `_apply_fault` once it is complete."""
    handle = reduce_scatter_single(out, bucket, op=dist.ReduceOp.SUM, async_op=async_op)
    if not async_op:
        _apply_fault(state, out, step=step, layer=layer)
    return handle


def _apply_fault(state: State, out: torch.Tensor, *, step: int, layer: int) -> None:
    fault = state.fault
    if fault and fault.hits(rank=state.rank, step=step, layer=layer):
        if fault.kind == "corrupt":
            out.add_(1.0)
        elif fault.kind == "nan":
            out.view(-1)[0] = float("nan")


def adam_(param: torch.Tensor, grad: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor, *, step: int, lr: float) -> None:
    """One elementwise Adam update, so updating a shard equals updating those elements of the whole.

    The arithmetic is torch.optim.Adam's own (its single-tensor path: lerp, then sqrt divided by
    the root of the bias correction), so in float32 our schedules and torch's engines (ddp, fsdp2)
    make bit-identical updates from equal gradients. The moments are float32 whatever the
    parameter dtype, as in mixed-precision training: in float16, eps=1e-8 and 0.001*g^2 flush to
    zero and the update divides by zero.
    """
    beta1, beta2 = ADAM_BETAS
    grad32 = grad.float()
    exp_avg.lerp_(grad32, 1 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(grad32, grad32, value=1 - beta2)
    step_size = lr / (1 - beta1 ** float(step))
    denom = (exp_avg_sq.sqrt() / (1 - beta2 ** float(step)) ** 0.5).add_(ADAM_EPS)
    if param.dtype == torch.float32:
        param.addcdiv_(exp_avg, denom, value=-step_size)
    else:
        param.copy_(param.float().addcdiv_(exp_avg, denom, value=-step_size))


class Faulty(Protocol):
    """What maybe_fail reads of a pipeline's or an engine's state."""

    rank: int
    fault: Fault | None


def maybe_fail(state: Faulty, step: int) -> None:
    fault = state.fault
    if fault is None or not fault.hits(rank=state.rank, step=step):
        return
    if fault.kind == "kill":
        os._exit(17)  # a crash, not a clean exit: no cleanup, no flush
    if fault.kind == "hang":
        import time

        time.sleep(10**6)


def maybe_slow(state) -> None:
    """The slow fault: rank R sleeps M ms, at the start of its backward."""
    fault = state.fault
    if fault is not None and fault.kind == "slow" and fault.rank == state.rank:
        import time

        time.sleep(fault.ms / 1e3)


def _forward_backward(state: State, step: int, *, after_backward: Callable[[], None] | None = None) -> None:
    state.step = step
    data = models.batch(state.config, rank=state.rank, step=step, dtype=state.dtype, device=state.device)
    with phase_label("forward"):
        loss = state.model.loss(data)
    with phase_label("backward"):
        maybe_slow(state)
        loss.backward()
        if after_backward:
            after_backward()


def sequential_step(state: State, step: int) -> None:
    maybe_fail(state, step)

    def all_reduce_buckets() -> None:
        for unit, grad in reversed(list(zip(state.units, state.grads))):
            unit.flatten_grads(grad)
            if state.check:
                state.check(step, unit.index, grad)
            with record_function("sequential/all_reduce"):
                dist.all_reduce(grad, op=dist.ReduceOp.SUM)

    _forward_backward(state, step, after_backward=all_reduce_buckets)
    state.adam_step += 1
    with record_function(SCHEDULE_OPTIMIZER_RANGE), phase_label("optimizer"):
        for unit, grad, m, v in zip(state.units, state.grads, state.exp_avg, state.exp_avg_sq):
            grad.mul_(1.0 / state.world_size)
            adam_(unit.flat, grad, m, v, step=state.adam_step, lr=state.lr)


def _install_split_hooks(state: State, *, blocking: bool) -> None:
    """Backward: reduce-scatter a unit as soon as autograd has accumulated all its gradients.
    Forward: wait for a unit's all_gather just before it runs."""

    def unit_ready(unit: FlatUnit) -> None:
        bucket = unit.flatten_grads()
        if state.check:
            state.check(state.step, unit.index, bucket)
        with record_function("split/reduce_scatter"):
            handle = reduce_scatter(state, state.shard_grads[unit.index], bucket, step=state.step, layer=unit.index, async_op=True)
        state.ready.append(unit.index)
        if blocking:
            with record_function(WAIT_REDUCE_SCATTER):
                handle.wait()
        state.pending_rs[unit.index] = (handle, bucket)  # the bucket must outlive the collective

    for unit in state.units:
        remaining = [len(unit.params)]

        def on_grad(_param, unit=unit, remaining=remaining) -> None:
            remaining[0] -= 1
            if remaining[0] == 0:
                remaining[0] = len(unit.params)
                unit_ready(unit)

        for p in unit.params:
            state.hooks.append(p.register_post_accumulate_grad_hook(on_grad))

        def before_forward(_module, _args, unit=unit) -> None:
            # --split-prefetch N: wait for units k..k+N here (0: unit k's only).
            ahead = range(unit.index, unit.index + state.config.workload.split_prefetch + 1)
            handles = [h for h in (state.pending_ag.pop(k, None) for k in ahead) if h is not None]
            if handles:
                with record_function(WAIT_ALL_GATHER):
                    for handle in handles:
                        handle.wait()

        state.hooks.append(unit.module.register_forward_pre_hook(before_forward))


def split_step(state: State, step: int) -> None:
    """split and split-blocking (the hooks installed by build_state decide which)."""
    maybe_fail(state, step)
    state.ready.clear()
    _forward_backward(state, step)
    blocking = not MODES[state.mode].overlaps
    state.adam_step += 1
    scale = 1.0 / state.world_size
    with record_function(SCHEDULE_OPTIMIZER_RANGE), phase_label("optimizer"):
        for unit in state.units:  # forward order: the next forward pass needs unit 0 first
            handle, _bucket = state.pending_rs.pop(unit.index)
            if not blocking:
                with record_function(WAIT_REDUCE_SCATTER):
                    handle.wait()
            shard_grad = state.shard_grads[unit.index]
            _apply_fault(state, shard_grad, step=step, layer=unit.index)
            with record_function("split/shard_update"):
                shard_grad.mul_(scale)
                adam_(unit.shard, shard_grad, state.exp_avg[unit.index], state.exp_avg_sq[unit.index], step=state.adam_step, lr=state.lr)
            with record_function("split/all_gather"):
                gather = all_gather_single(unit.flat, unit.shard, async_op=True)
            assert gather is not None  # async_op=True: its Work (torch 2.14 types the result Work | None)
            if blocking:
                with record_function(WAIT_ALL_GATHER):
                    gather.wait()
            else:
                state.pending_ag[unit.index] = gather


PIPELINES: dict[str, Callable[[State, int], None]] = {  # every mode of core.modes.MODES without an engine
    "sequential": sequential_step,
    "split": split_step,
    "split-blocking": split_step,
}
