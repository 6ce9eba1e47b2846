"""Correctness beside speed: AllReduce(X) == AllGather(ReduceScatter(X)) on real gradients, and
equal final parameters between modes and across ranks.

Tolerances are relative to the largest magnitude involved (at least 1), per dtype. On gloo,
reduce_scatter runs as an all_reduce, so the float32 results are usually bit-identical; NCCL's
ring reduce_scatter may sum in another order, and torch.optim.Adam takes its foreach path on CUDA
(its single-tensor path on CPU, whose arithmetic our adam_ copies), so on CUDA equal final
parameters hold within the tolerance, not bit for bit.

Every tensor these checks pass to a collective lives on the device the process group serves (the
run's device: an NCCL group has no CPU backend); only the gathered errors come back to the host.
"""

from __future__ import annotations

import msgspec
import torch
import torch.distributed as dist

from profile_overlap.record.metrics import CheckResult
from profile_overlap.run.pipelines import State, all_gather_single, reduce_scatter

# Relative tolerance: |a - b| <= TOLERANCE[dtype] * max(1, max|a|).
TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float16: 2e-3}


def _worst_over_ranks(errors: torch.Tensor, bounds: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """All ranks' per-item errors and bounds, gathered to every rank on the device they were
    computed on (the group's), then brought to the host: shape [world, items]."""
    world = dist.get_world_size()
    both = torch.stack([errors, bounds]).to(torch.float64)
    gathered = [torch.empty_like(both) for _ in range(world)]
    dist.all_gather(gathered, both)
    stacked = torch.stack(gathered).cpu()  # [world, 2, items]
    return stacked[:, 0], stacked[:, 1]


def _reduce_check(
    name: str, errors: torch.Tensor, bounds: torch.Tensor, *, steps: list[int | None], layers: list[int | None], tolerance: float
) -> CheckResult:
    all_errors, all_bounds = _worst_over_ranks(errors, bounds)
    # NaN/inf (a diverged update) fail the check; nan_to_num keeps argmax meaningful.
    finite = bool(torch.isfinite(all_errors).all())
    all_errors = torch.nan_to_num(all_errors, nan=float("inf"))
    excess = all_errors - all_bounds
    passed = finite and bool((excess <= 0).all())
    # Name the worst offender when failing, else the largest error.
    flat = int(torch.argmax(all_errors if passed else excess))
    rank, item = divmod(flat, all_errors.shape[1])
    return CheckResult(
        name=name,
        passed=passed,
        max_abs_err=float(all_errors.max()) if finite else None,
        tolerance=tolerance,
        num_checked=all_errors.numel(),
        worst_rank=rank,
        worst_step=steps[item],
        worst_layer=layers[item],
    )


class DecompositionChecker:
    """Accumulates AllReduce vs AllGather(ReduceScatter) errors over the warmup steps.

    Two comparisons per (step, layer): this rank's reduce_scatter shard against its rows of the
    all_reduce result (this names the rank that went wrong), and the all_gather of every shard
    against the whole all_reduce result (what the split pipeline actually uses).
    """

    def __init__(self, state: State) -> None:
        self.state = state
        self.tolerance = TOLERANCE[state.dtype]
        self.shard_errors: list[torch.Tensor] = []
        self.gathered_errors: list[torch.Tensor] = []
        self.bounds: list[torch.Tensor] = []
        self.steps: list[int | None] = []
        self.layers: list[int | None] = []

    def check_bucket(self, step: int, unit: int, bucket: torch.Tensor) -> None:
        """Compare both reductions of one unit's flat gradient bucket (the pipelines call this
        before they reduce it, on the warmup steps)."""
        state = self.state
        rows = bucket.shape[0] // state.world_size
        reduced = bucket.clone()
        dist.all_reduce(reduced, op=dist.ReduceOp.SUM)
        shard = torch.empty(rows, dtype=bucket.dtype, device=bucket.device)
        reduce_scatter(state, shard, bucket, step=step, layer=unit)
        gathered = torch.empty_like(bucket)
        all_gather_single(gathered, shard)
        mine = reduced[state.rank * rows : (state.rank + 1) * rows]
        self.shard_errors.append((mine.float() - shard.float()).abs().max())
        self.gathered_errors.append((reduced.float() - gathered.float()).abs().max())
        self.bounds.append(self.tolerance * reduced.float().abs().max().clamp(min=1.0))
        self.steps.append(step)
        self.layers.append(unit)

    def result(self) -> CheckResult:
        bounds = torch.stack(self.bounds)
        name = "AllReduce == AllGather(ReduceScatter)"
        shard, gathered = (
            _reduce_check(name, torch.stack(errors), bounds, steps=self.steps, layers=self.layers, tolerance=self.tolerance)
            for errors in (self.shard_errors, self.gathered_errors)
        )
        # A bad shard shows up on every rank after the all_gather; the shard check names its owner.
        worst = shard if not shard.passed else gathered
        return msgspec.structs.replace(
            worst,
            passed=shard.passed and gathered.passed,
            max_abs_err=_larger(shard.max_abs_err, gathered.max_abs_err),
            num_checked=shard.num_checked + gathered.num_checked,
        )


def _larger(a: float | None, b: float | None) -> float | None:
    """The larger error; None (not finite) when either is."""
    return None if a is None or b is None else max(a, b)


def compare_params(a: list[torch.Tensor], b: list[torch.Tensor], *, name: str, dtype: torch.dtype, device: torch.device) -> CheckResult:
    """Max error between two parameter lists on each rank, reduced over ranks. The lists may be
    kept on the host (the harness moves each finished mode's parameters off the GPU): each pair
    is compared on `device`, the group's, one unit at a time."""
    tolerance = TOLERANCE[dtype]
    errors, bounds = [], []
    for x, y in zip(a, b):
        x, y = x.to(device).float(), y.to(device).float()
        errors.append((x - y).abs().max())
        bounds.append(tolerance * x.abs().max().clamp(min=1.0))
    return _reduce_check(
        name, torch.stack(errors), torch.stack(bounds), steps=[None] * len(a), layers=list(range(len(a))), tolerance=tolerance
    )


def ranks_agree(params: list[torch.Tensor], *, name: str, dtype: torch.dtype) -> CheckResult:
    """Every rank ends with the same parameters: compare each layer with rank 0's copy."""
    tolerance = TOLERANCE[dtype]
    errors, bounds = [], []
    for param in params:
        reference = param.clone()
        dist.broadcast(reference, src=0)
        errors.append((param.float() - reference.float()).abs().max())
        bounds.append(tolerance * reference.float().abs().max().clamp(min=1.0))
    return _reduce_check(
        name, torch.stack(errors), torch.stack(bounds), steps=[None] * len(params), layers=list(range(len(params))), tolerance=tolerance
    )
