"""Dimensions and pipeline stages, typed: the `dimensions` and `pipeline` keys of the analysis
record (definitions: docs/metrics.md "Dimensions" and "Pipeline stages"). The analysis
(analysis/rank/dimensions.py, analysis/rank/pipeline.py) builds these structs once; the record stores them
and the renderers read them by attribute."""

from __future__ import annotations

import msgspec


class DimensionStep(msgspec.Struct, frozen=True, kw_only=True):
    """One dimension's communication in one step window of one rank."""

    step: int
    comm_us: float
    hidden_us: float
    exposed_us: float


class DimensionPhase(msgspec.Struct, frozen=True, kw_only=True):
    """One dimension's communication inside one phase's windows of one rank, summed over its steps."""

    phase: str
    comm_us: float
    hidden_us: float
    exposed_us: float


class DimensionRank(msgspec.Struct, frozen=True, kw_only=True):
    """One dimension's calls on one rank, inside the step windows (the whole trace without steps)."""

    calls: int
    bytes: int | None
    """Sum of the calls' sizes; None when no call is sized."""
    comm_us: float
    """|∪ of the dimension's calls|."""
    hidden_us: float
    """|∪ calls ∩ ∪ compute|."""
    exposed_us: float
    """comm_us − hidden_us."""
    wait_us: float | None
    """Cross-rank wait of the dimension's calls (as the rank's `wait_us`); None when none was matched."""
    transfer_us: float | None
    busbw_gbps: float | None
    """Σ bytes · busbw factor(kind, the group's own size) / Σ duration, over its sized calls."""
    steps: tuple[DimensionStep, ...] = ()
    phases: tuple[DimensionPhase, ...] = ()
    """Per phase present (forward, backward, optimizer), inside its windows; empty without phases."""


class Dimension(msgspec.Struct, frozen=True, kw_only=True):
    """The process groups of one kind (one `pg_desc`, else one size and stride) over the job."""

    pg_names: tuple[str, ...]
    group_size: int | None
    """The size of its groups (the most common one if they differ)."""
    found_by: str
    """How the groups were collected: "pg_desc" or "size and stride"."""
    ranks: dict[str, DimensionRank]
    exposed_per_step_us: float | None = None
    """Its exposed time per profiled step, the mean over its ranks (what the verdict compares)."""
    steps: tuple[DimensionStep, ...] = ()
    """Per profiled step, the mean over its ranks that have the step (the TensorBoard scalars)."""


class PipelineRank(msgspec.Struct, frozen=True, kw_only=True):
    """One pipeline stage (rank), summed over its steps (definitions: `bubble_us`)."""

    stage: int
    bubble_us: float
    """Σ over steps of |step window − ∪ compute|."""
    bubble_pct: float | None
    """100 · bubble_us / Σ step_us."""
    p2p_exposed_us: float
    """The part of the bubble covered by point-to-point communication."""
    idle_us: float
    """bubble_us − p2p_exposed_us."""


class Pipeline(msgspec.Struct, frozen=True, kw_only=True):
    """The pipeline stages of ranks that send/recv, and their bubble beside the ideal."""

    stages: tuple[int, ...]
    """The ranks in stage order (ties: rank order)."""
    microbatches: int | None
    """Forward sends of the first stage per step (the median over steps)."""
    ideal_bubble_pct: float | None
    """100 · (p − 1) / (m + p − 1) for p stages and m microbatches (GPipe, 1F1B)."""
    ranks: dict[str, PipelineRank]
    bubble_pct: float | None = None
    """The mean over its stages of their bubble_pct (the TensorBoard scalar `pipeline/bubble_pct`)."""
