"""Collective bandwidth, with nccl-tests' definitions (NVIDIA/nccl-tests doc/PERFORMANCE.md).

algbw = S / t, with S the full array size in bytes (the input of all_reduce, reduce_scatter,
broadcast and all_to_all; the output of all_gather) and t the duration.
busbw = algbw · factor(kind, n): the bandwidth each link of a ring would need, comparable to the
hardware's peak whatever the collective and the group size n.
"""

from __future__ import annotations

from collections.abc import Callable

# kind -> busbw factor as a function of the group size n (PyTorch's collective names).
_BUS_FACTOR: dict[str, Callable[[int], float]] = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "send_recv": lambda n: 1.0,
    "send": lambda n: 1.0,
    "recv": lambda n: 1.0,
}


def algbw_gbps(nbytes: float, dur_us: float) -> float | None:
    """S / t in GB/s (1 GB = 1e9 bytes). None when the duration is 0."""
    if dur_us <= 0:
        return None
    return nbytes / (dur_us * 1e3)


def bus_factor(kind: str, group_size: int) -> float | None:
    """nccl-tests' busbw / algbw ratio; None for an unknown kind or group size."""
    factor = _BUS_FACTOR.get(kind)
    if factor is None or group_size is None or group_size < 1:
        return None
    return factor(group_size)


def busbw_gbps(kind: str, nbytes: float, dur_us: float, group_size: int | None) -> float | None:
    """algbw · bus_factor(kind, n) in GB/s; None when either is unknown."""
    alg = algbw_gbps(nbytes, dur_us)
    factor = bus_factor(kind, group_size) if group_size is not None else None
    if alg is None or factor is None:
        return None
    return alg * factor
