"""The two pipelines, one function each, with one signature: `step(state, step_index)`.

Workload (shared/DESIGN.md): K layers of d x d weights, P = K*d^2 parameters, a batch of B rows.
Each step makes deterministic gradients (the "backward"), reduces them, runs Adam, then a forward
pass through all K layers.

- sequential (DDP-like): blocking all_reduce of every bucket, Adam on all P parameters with full
  optimizer state on every rank, then the forward pass.
- split (ZeRO-2 / FSDP-like): per bucket, reduce_scatter, Adam on this rank's 1/N shard (state
  for the shard only), then an async all_gather of the updated shard. The forward pass waits for
  layer k's gather just before layer k, so later gathers overlap earlier layers' compute (FSDP's
  forward prefetch).

Both modes apply the same elementwise arithmetic to the same reduced gradient, so they end with
equal parameters; `verify.py` checks it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch.profiler import record_function

# torch 2.13 renamed all_gather_into_tensor / reduce_scatter_tensor to *_single (same semantics);
# older releases only have the old names.
all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
reduce_scatter_single = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor

ADAM_BETAS = (0.9, 0.999)
ADAM_EPS = 1e-8


FAULT_KINDS = ("corrupt", "nan", "kill", "hang")


@dataclass
class Fault:
    """Test-only fault injection, from PROFILE_OVERLAP_FAULT=<kind>:rank=R:step=S[:layer=L].

    kind: corrupt (add 1 to the reduce_scatter result), nan (write a NaN into it), kill (the
    process exits), hang (sleeps).
    """

    kind: str
    rank: int
    step: int
    layer: int = 0

    @classmethod
    def from_env(cls) -> Fault | None:
        spec = os.environ.get("PROFILE_OVERLAP_FAULT")
        if not spec:
            return None
        kind, *pairs = spec.split(":")
        fields = dict(pair.split("=", 1) for pair in pairs)
        if kind not in FAULT_KINDS:
            raise ValueError(f"PROFILE_OVERLAP_FAULT kind {kind!r} is not one of {', '.join(FAULT_KINDS)}")
        return cls(kind=kind, rank=int(fields.get("rank", 0)), step=int(fields.get("step", 0)), layer=int(fields.get("layer", 0)))

    def hits(self, *, rank: int, step: int, layer: int | None = None) -> bool:
        return self.rank == rank and self.step == step and (layer is None or self.layer == layer)


@dataclass
class State:
    """One rank's model, optimizer state and buffers for one mode."""

    mode: str
    rank: int
    world_size: int
    device: torch.device
    dtype: torch.dtype
    seed: int
    lr: float
    params: list[torch.Tensor]
    """K full d x d weights (every rank needs them all for the forward pass)."""
    grads: list[torch.Tensor]
    """K full d x d gradient buckets, refilled every step."""
    batch: torch.Tensor
    exp_avg: list[torch.Tensor]
    """Adam first moment, float32: full d x d (sequential) or this rank's d/N x d shard (split)."""
    exp_avg_sq: list[torch.Tensor]
    shards: list[torch.Tensor] = field(default_factory=list)
    """split only: this rank's master copy of its d/N x d rows of each layer."""
    shard_grads: list[torch.Tensor] = field(default_factory=list)
    """split only: reduce_scatter output, d/N x d per layer."""
    fault: Fault | None = None
    adam_step: int = 0

    def bytes_of(self, tensors: list[torch.Tensor]) -> int:
        return sum(t.numel() * t.element_size() for t in tensors)

    def memory_bytes(self) -> dict[str, int]:
        """Bytes of the persistent tensors this rank holds, by role."""
        return {
            "param_bytes": self.bytes_of(self.params) + self.bytes_of(self.shards),
            "grad_bytes": self.bytes_of(self.grads) + self.bytes_of(self.shard_grads),
            "optimizer_state_bytes": self.bytes_of(self.exp_avg) + self.bytes_of(self.exp_avg_sq),
        }


def initial_params(*, layers: int, dim: int, seed: int, dtype: torch.dtype, device: torch.device) -> list[torch.Tensor]:
    """The same initial weights on every rank and in every mode (seeded on the CPU)."""
    gen = torch.Generator().manual_seed(seed)
    return [(torch.randn(dim, dim, generator=gen) / dim**0.5).to(device=device, dtype=dtype) for _ in range(layers)]


def build_state(mode: str, *, config, rank: int, world_size: int, device: torch.device, dtype: torch.dtype) -> State:
    params = initial_params(layers=config.layers, dim=config.dim, seed=config.seed, dtype=dtype, device=device)
    gen = torch.Generator().manual_seed(config.seed + 1)
    batch = torch.randn(config.batch, config.dim, generator=gen).to(device=device, dtype=dtype)
    rows = config.dim // world_size
    if mode == "split":
        shards = [p[rank * rows : (rank + 1) * rows].clone() for p in params]
        state_like = shards
    else:
        shards = []
        state_like = params
    return State(
        mode=mode,
        rank=rank,
        world_size=world_size,
        device=device,
        dtype=dtype,
        seed=config.seed,
        lr=config.lr,
        params=params,
        grads=[torch.empty_like(p) for p in params],
        batch=batch,
        exp_avg=[torch.zeros_like(t, dtype=torch.float32) for t in state_like],
        exp_avg_sq=[torch.zeros_like(t, dtype=torch.float32) for t in state_like],
        shards=shards,
        shard_grads=[torch.empty_like(s) for s in shards],
        fault=Fault.from_env(),
    )


def fill_gradients(state: State, step: int) -> None:
    """Deterministic gradients per (seed, rank, step, layer): both modes see the same data."""
    with record_function("backward/gradients"):
        for layer, grad in enumerate(state.grads):
            seed = hash((state.seed, state.rank, step, layer)) & 0x7FFF_FFFF_FFFF
            gen = torch.Generator(device=state.device).manual_seed(seed)
            torch.randn(grad.shape, generator=gen, device=state.device, dtype=grad.dtype, out=grad)


def reduce_scatter(state: State, out: torch.Tensor, grad: torch.Tensor, *, step: int, layer: int) -> None:
    """Sum-reduce `grad` across ranks and keep this rank's rows in `out`. Faults are injected here."""
    reduce_scatter_single(out, grad, op=dist.ReduceOp.SUM)
    fault = state.fault
    if fault and fault.hits(rank=state.rank, step=step, layer=layer):
        if fault.kind == "corrupt":
            out.add_(1.0)
        elif fault.kind == "nan":
            out.view(-1)[0] = float("nan")


def adam_(param: torch.Tensor, grad: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor, *, step: int, lr: float) -> None:
    """One elementwise Adam update, so updating a shard equals updating those rows of the full tensor.

    The moments are float32 whatever the parameter dtype, as in mixed-precision training: in
    float16, eps=1e-8 and 0.001*g^2 flush to zero and the update divides by zero.
    """
    beta1, beta2 = ADAM_BETAS
    grad32 = grad.float()
    exp_avg.mul_(beta1).add_(grad32, alpha=1 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(grad32, grad32, value=1 - beta2)
    denom = (exp_avg_sq / (1 - beta2**step)).sqrt_().add_(ADAM_EPS)
    if param.dtype == torch.float32:
        param.addcdiv_(exp_avg, denom, value=-lr / (1 - beta1**step))
    else:
        param.copy_(param.float().addcdiv_(exp_avg, denom, value=-lr / (1 - beta1**step)))


def forward(state: State, wait: Callable[[int], None] | None = None) -> torch.Tensor:
    x = state.batch
    for layer, weight in enumerate(state.params):
        if wait is not None:
            wait(layer)
        with record_function(f"forward/layer{layer}"):
            x = torch.tanh(x @ weight)
    return x


def _maybe_fail(state: State, step: int) -> None:
    fault = state.fault
    if fault is None or not fault.hits(rank=state.rank, step=step):
        return
    if fault.kind == "kill":
        os._exit(17)  # a crash, not a clean exit: no cleanup, no flush
    if fault.kind == "hang":
        import time

        time.sleep(10**6)


def sequential_step(state: State, step: int) -> None:
    _maybe_fail(state, step)
    fill_gradients(state, step)
    scale = 1.0 / state.world_size
    for grad in state.grads:
        with record_function("sequential/all_reduce"):
            dist.all_reduce(grad, op=dist.ReduceOp.SUM)
    state.adam_step += 1
    with record_function("sequential/update"):
        for param, grad, m, v in zip(state.params, state.grads, state.exp_avg, state.exp_avg_sq):
            grad.mul_(scale)
            adam_(param, grad, m, v, step=state.adam_step, lr=state.lr)
    forward(state)


def split_step(state: State, step: int) -> None:
    _maybe_fail(state, step)
    fill_gradients(state, step)
    scale = 1.0 / state.world_size
    state.adam_step += 1
    handles = []
    for layer, (grad, shard_grad) in enumerate(zip(state.grads, state.shard_grads)):
        with record_function("split/reduce_scatter"):
            reduce_scatter(state, shard_grad, grad, step=step, layer=layer)
        with record_function("split/shard_update"):
            shard_grad.mul_(scale)
            adam_(state.shards[layer], shard_grad, state.exp_avg[layer], state.exp_avg_sq[layer], step=state.adam_step, lr=state.lr)
        with record_function("split/all_gather"):
            handles.append(all_gather_single(state.params[layer], state.shards[layer], async_op=True))

    def wait(layer: int) -> None:
        # On GPU this makes the compute stream wait for the NCCL stream; no host sync.
        with record_function("split/wait_all_gather"):
            handles[layer].wait()

    forward(state, wait)


PIPELINES: dict[str, Callable[[State, int], None]] = {
    "sequential": sequential_step,
    "split": split_step,
}
