"""A collective call as an object (CollectiveCall as read, CollectiveInstance once numbered for
matching across ranks) and its size (nccl-tests' S). The analysis keeps the calls as columns
(call_columns.py: the numbering and the per-kind totals with their bandwidths), read back as these."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from profile_overlap.analysis.read.trace_args import CollectiveArgs
from profile_overlap.core.dtypes import ELEMENT_BYTES

# Bytes per element, by the dtype names the profiler writes (`Input type`, kernel `dtype`).


CallKey = tuple[str, str, int]
"""(process group, kind, seq): one call, the same on every rank that makes it."""


@dataclass(frozen=True, slots=True)
class CollectiveInstance:
    """One collective call on one rank, for cross-rank matching."""

    kind: str
    pg: str
    seq: int
    """Order of this call among the rank's calls of the same kind in the same process group."""
    nbytes: int | None
    """The full array size S of nccl-tests (None when the trace does not say)."""
    dur_us: float
    start_us: float
    group_size: int | None


@dataclass(frozen=True)
class CollectiveStats:
    """All calls of one kind on one rank. nbytes and dur_us are totals; the bandwidths are
    total bytes / total time (calls without a known size are left out of both)."""

    kind: str
    count: int
    nbytes: int | None
    dur_us: float
    algbw_gbps: float | None
    busbw_gbps: float | None
    group_size: int | None


@dataclass(frozen=True, slots=True)
class CollectiveCall:
    """One collective call as read from one file, before numbering."""

    kind: str
    pg: str
    nbytes: int | None
    dur_us: float
    start_us: float
    launch_us: float
    group_size: int | None
    issued_us: float | None = None
    """When the program issued it (CPU: its c10d op on the calling thread); None: at start_us."""
    phase_hint: str | None = None
    """The phase its enclosing engine labels name (classify.phase_hint), for traces whose phase
    windows do not cover it."""


def _numel(dims: object) -> int:
    if not isinstance(dims, list) or not dims:
        return 0
    ints = [d for d in dims if isinstance(d, int)]
    if len(ints) == len(dims):
        return math.prod(ints)
    return sum(_numel(d) for d in dims)  # a TensorList: [[d0, d1], [d0]]


def _itemsize(types: Sequence[object] | None) -> int | None:
    for t in types or ():
        if isinstance(t, str) and t in ELEMENT_BYTES:
            return ELEMENT_BYTES[t]
    return None


def collective_nbytes(args: CollectiveArgs | None, fallback_types: Sequence[object] | None = None) -> int | None:
    """nccl-tests' S: the full array. For every collective that is the larger of its input and
    output (all_gather: the output; reduce_scatter: the input; the rest: equal)."""
    if args is None:
        return None
    if args.in_nelems is not None or args.out_nelems is not None:
        size = ELEMENT_BYTES.get(args.dtype or "")
        nelems = max(args.in_nelems or 0, args.out_nelems or 0)
        return nelems * size if size and nelems else None
    if args.input_dims:
        size = _itemsize(args.input_type) or _itemsize(fallback_types)
        nelems = max((_numel(d) for d in args.input_dims), default=0)
        return nelems * size if size and nelems else None
    return None
