"""Step timing: CUDA events on GPU (no host sync in the loop), barrier + perf_counter on CPU."""

from __future__ import annotations

import time

import torch
import torch.distributed as dist


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed_steps(step_fn, state, *, first_step: int, num_steps: int, device: torch.device, after_step=None) -> list[float]:
    """This rank's step times in ms. GPU: CUDA events, no host sync inside the loop. CPU: a
    barrier before each step so all ranks start together, perf_counter around it.
    `after_step` (the profiler's step(), in the overhead benchmark) is timed with the step."""
    if device.type == "cuda":
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(num_steps)]
        for i, (start, end) in enumerate(events):
            start.record()
            step_fn(state, first_step + i)
            if after_step:
                after_step()
            end.record()
        torch.cuda.synchronize(device)
        return [start.elapsed_time(end) for start, end in events]
    times = []
    for i in range(num_steps):
        dist.barrier()
        t0 = time.perf_counter()
        step_fn(state, first_step + i)
        if after_step:
            after_step()
        times.append((time.perf_counter() - t0) * 1e3)
    dist.barrier()
    return times
