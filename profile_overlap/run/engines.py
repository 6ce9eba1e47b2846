"""torch's own engines on the same model, data and initial weights as our pipelines.

- ddp: DistributedDataParallel (`--bucket-cap-mb`, `--first-bucket-mb`): autograd hooks all-reduce gradient buckets
  asynchronously during backward, and the step waits for them before it returns from backward.
- fsdp2: `fully_shard` on each group of `--fsdp-group` consecutive communication units and on
  the root (`--reshard-after-forward`): each group's parameters are all-gathered before its forward (prefetching the next), gathered
  again in backward when they were resharded after forward, and its gradients are
  reduce-scattered in backward; Adam then updates this rank's shards (DTensors).

Both run torch.optim.Adam with our Adam's hyperparameters, and the steps carry the same phase
labels (`forward`, `backward`, `optimizer`) as the pipelines, so the analysis attributes their
communication to phases the same way. `params` gives the full parameters in our pipelines'
layout (one flat buffer per unit, padded to a multiple of the world size), gathered first for
fsdp2, so that verify.py compares every mode with the same code.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from profile_overlap.core.modes import MODES
from profile_overlap.run import models
from profile_overlap.run.config import Config
from profile_overlap.run.pipelines import ADAM_BETAS, ADAM_EPS, Fault, maybe_fail, maybe_slow, phase_label

ENGINES = ("DistributedDataParallel", "fully_shard")
"""The torch engines build_state wraps a model in (core/modes.py: a mode's `engine`)."""


@dataclass
class EngineState:
    """One rank's wrapped model and optimizer for ddp or fsdp2."""

    mode: str
    rank: int
    world_size: int
    config: Config
    device: torch.device
    dtype: torch.dtype
    model: nn.Module
    """What the step calls: the DDP wrapper, or the model fully_shard turned into an FSDP module."""
    units: list[nn.Module]
    optimizer: torch.optim.Optimizer
    fault: Fault | None = None

    @property
    def params(self) -> list[torch.Tensor]:
        """Full parameters, one flat padded buffer per unit (fsdp2 gathers them: a collective)."""
        out = []
        for unit in self.units:
            full = [_local_or_full(p).reshape(-1) for p in unit.parameters()]
            flat = torch.cat(full)
            padded = -(-flat.numel() // self.world_size) * self.world_size
            out.append(torch.nn.functional.pad(flat, (0, padded - flat.numel())))
        return out

    def memory_bytes(self) -> dict[str, int]:
        """Bytes this rank holds, as the engine keeps them: parameters (fsdp2: its shards),
        gradients (one per parameter, the same size, between backward and the optimizer step) and
        Adam's moments (torch.optim.Adam keeps them in the parameter dtype)."""
        local = [_local(p) for p in self.model.parameters()]
        size = sum(t.numel() * t.element_size() for t in local)
        moments = [_local(t) for s in self.optimizer.state.values() for key, t in s.items() if key != "step"]
        state = sum(t.numel() * t.element_size() for t in moments)
        return {"param_bytes": size, "grad_bytes": size, "optimizer_state_bytes": state}

    def finish(self) -> None:
        """Nothing stays in flight after a step: both engines wait for their collectives in it."""

    def close(self) -> None:
        """Nothing to undo: the cycle collector frees DDP's and FSDP2's hooks with the model."""


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


def _local_or_full(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor().detach() if hasattr(t, "full_tensor") else t.detach()


def build_state(mode: str, *, config, rank: int, world_size: int, device: torch.device, dtype: torch.dtype) -> EngineState:
    net = models.build_model(config, dtype=dtype, device=device)
    units = net.units()
    engine = MODES[mode].engine if mode in MODES else None
    model: nn.Module
    if engine == "DistributedDataParallel":
        from torch.nn.parallel import DistributedDataParallel

        caps = {"bucket_cap_mb": config.engines.bucket_cap_mb}
        if config.engines.first_bucket_mb is not None:
            # torch applies the list in gradient-ready order (at the rebuild after the first step),
            # the last cap to every later bucket.
            caps = {"bucket_cap_mb_list": [config.engines.first_bucket_mb, config.engines.bucket_cap_mb]}
        model = DistributedDataParallel(net, device_ids=[device.index] if device.type == "cuda" else None, **caps)
    elif engine == "fully_shard":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh(device.type, (world_size,))
        n = config.engines.fsdp_group
        groups = [units[k : k + n] for k in range(0, len(units), n)]
        for group in groups:
            fully_shard(group if len(group) > 1 else group[0], mesh=mesh, reshard_after_forward=config.engines.reshard)
        fully_shard(net, mesh=mesh)
        model = net  # fully_shard shards in place: the same module, its class now also an FSDPModule
        set_prefetch([g[0] for g in groups], config.engines.fsdp_prefetch)
    else:
        raise ValueError(f"not an engine: {mode}")
    optimizer = torch.optim.Adam(model.parameters(), lr=config.workload.lr, betas=ADAM_BETAS, eps=ADAM_EPS)
    return EngineState(
        mode=mode,
        rank=rank,
        world_size=world_size,
        config=config,
        device=device,
        dtype=dtype,
        model=model,
        units=units,
        optimizer=optimizer,
        fault=Fault.from_env(),
    )


def set_prefetch(units: list[nn.Module], distance: int) -> None:
    """`--fsdp-prefetch N` on fsdp2's units (the first module of each fully_shard group): unit k's
    forward issues the all_gathers of units k+1..k+N, its backward
    those of units k-1..k-N (0: leave FSDP2's implicit prefetch alone)."""
    if distance <= 0:
        return
    from torch.distributed.fsdp import FSDPModule

    sharded: list[FSDPModule] = [u for u in units if isinstance(u, FSDPModule)]
    assert len(sharded) == len(units)  # fully_shard made each one an FSDPModule
    for k, unit in enumerate(sharded):
        ahead = sharded[k + 1 : k + 1 + distance]
        behind = sharded[max(k - distance, 0) : k][::-1]
        if ahead:
            unit.set_modules_to_forward_prefetch(ahead)
        if behind:
            unit.set_modules_to_backward_prefetch(behind)


def engine_step(state: EngineState, step: int) -> None:
    maybe_fail(state, step)
    data = models.batch(state.config, rank=state.rank, step=step, dtype=state.dtype, device=state.device)
    with phase_label("forward"):
        loss = models.loss(state.model, data)
    with phase_label("backward"):
        maybe_slow(state)
        loss.backward()
    with phase_label("optimizer"):
        state.optimizer.step()
        state.optimizer.zero_grad(set_to_none=True)
