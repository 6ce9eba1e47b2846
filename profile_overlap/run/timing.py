"""Timing on every rank: CUDA events on GPU (no host sync in the loop), barrier + perf_counter on CPU.

One timer (`time_calls`) serves the pipeline steps of `run` (timed_steps) and the collectives of
`bench-collectives`.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable

import torch
import torch.distributed as dist


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_calls(call: Callable[[], object], *, count: int, device: torch.device, warmup: int = 0, before=None) -> list[float]:
    """This rank's time of each of `count` calls of `call()`, in ms, after `warmup` untimed calls.

    `before` (if given) runs before every call, warmup included, outside the timing. GPU: ranks
    start the loop together (a barrier), then CUDA events around each call and no host sync
    inside the loop. CPU: a barrier before each call so all ranks start it together, perf_counter
    around it, and a barrier after the last.
    """
    for _ in range(warmup):
        if before:
            before()
        call()
    if device.type == "cuda":
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(count)]
        dist.barrier()
        for start, end in events:
            if before:
                before()
            start.record()
            call()
            end.record()
        torch.cuda.synchronize(device)
        return [start.elapsed_time(end) for start, end in events]
    times = []
    for _ in range(count):
        if before:
            before()
        dist.barrier()
        t0 = time.perf_counter()
        call()
        times.append((time.perf_counter() - t0) * 1e3)
    dist.barrier()
    return times


def timed_steps(step_fn, state, *, first_step: int, num_steps: int, device: torch.device, after_step=None) -> list[float]:
    """This rank's step times in ms, steps first_step, first_step + 1, ... (see time_calls).
    `after_step` (the profiler's step(), in the overhead benchmark) is timed with the step."""
    steps = itertools.count(first_step)

    def step() -> None:
        step_fn(state, next(steps))
        if after_step:
            after_step()

    return time_calls(step, count=num_steps, device=device)
