"""Why communication is exposed: the typed record of analysis/world/causes.py (`analyze --json`'s
top-level "exposed", and each mode's `exposed` in metrics.json). Every field is defined in the
docs/metrics.md ("Why exposed"); times in µs unless the name says otherwise."""

from __future__ import annotations

from typing import Any

import msgspec

TOP_CALLS = 10
"""Rows of `Exposed.top`: the calls with the most exposed time."""


class RankExposed(msgspec.Struct, frozen=True):
    """One rank's exposed communication inside the step windows, split instant by instant."""

    exposed_us: float
    """Communication not covered by compute (the rank's exposed_comm_us)."""
    wait_us: float | None
    """Exposed instants where a call in flight here had not yet started on some peer (aligned
    clock); None without peers (one rank) or when this rank's clock could not be aligned."""
    transfer_us: float | None
    """exposed_us − wait_us: every peer had started, data moved and nothing computed beside it."""


class ExposedCall(msgspec.Struct, frozen=True):
    """One collective call, or one that recurs every step (same kind, phase and index in the
    step), summed over ranks and profiled steps."""

    kind: str
    phase: str
    """Phase of its issue: forward, backward, optimizer or other."""
    call: int
    """Index among the step's calls of this kind in this phase (0 = first)."""
    bytes: int | None
    """nccl-tests' S of one call (None when the trace does not say)."""
    exposed_us: float
    wait_us: float | None
    transfer_us: float | None
    slack_us: float | None
    """Median over ranks and steps of: issue → the moment compute first waited for its result (0:
    waited at once; to the end of the step window when nothing waited); None without issue times
    or step windows."""
    required_gbps: float | None
    """Bus bandwidth (GB/s) at which the call fits in its slack: S · bus_factor / slack; None when
    the slack is 0 (waited at once: no bandwidth hides it) or the size or group is unknown."""
    late_rank: int | None
    """The peer the others waited for most often at this call (None when nobody waited)."""


class Straggler(msgspec.Struct, frozen=True):
    """What one late rank did longer than the median of its peers in the windows before the calls
    it arrived last at (per profiled step)."""

    rank: int
    phase: str
    """Where the extra time lies: forward, backward, optimizer or other (outside every phase)."""
    extra_ms: float
    """Its time in (phase, what) minus its peers' median, summed over those windows, per step."""
    extra_pct: float | None
    """100 · extra_ms / the peers' median time in that phase in the same windows."""
    what: str
    """compute, idle (neither compute nor communication) or exposed comm (its own earlier calls)."""


class CriticalPath(msgspec.Struct, frozen=True):
    """The chain across ranks that ends the median profiled step last."""

    length_us: float
    compute_pct: float
    transfer_pct: float
    wait_pct: float
    """The rest of the path (100 − the three) is idle: nothing ran on the rank it was on."""
    ranks: tuple[int, ...]
    """Ranks it passes through, in time order (consecutive repeats dropped)."""


class Exposed(msgspec.Struct, frozen=True):
    """The causes of one trace set's exposed communication."""

    ranks: dict[int, RankExposed]
    top: tuple[ExposedCall, ...]
    stragglers: tuple[Straggler, ...]
    critical_path: CriticalPath | None
    """None with one rank, without step windows or without aligned clocks."""

    @property
    def wait_us(self) -> float | None:
        """Sum over ranks (None when any rank's split is unknown)."""
        return _total([r.wait_us for r in self.ranks.values()])

    @property
    def transfer_us(self) -> float | None:
        return _total([r.transfer_us for r in self.ranks.values()])

    @property
    def exposed_us(self) -> float:
        return sum(r.exposed_us for r in self.ranks.values())

    @property
    def wait_pct(self) -> float | None:
        """100 · wait_us / exposed_us (None when the split is unknown or nothing is exposed)."""
        wait = self.wait_us
        return None if wait is None or self.exposed_us <= 0 else 100 * wait / self.exposed_us

    @property
    def transfer_pct(self) -> float | None:
        wait = self.wait_pct
        return None if wait is None else 100 - wait

    def per_rank_step_ms(self, num_steps: int) -> tuple[float | None, float | None]:
        """(wait, transfer) in ms per rank and profiled step: the TensorBoard scalars exposed/wait_ms
        and exposed/transfer_ms (comparable with exposed_comm_ms, a rank mean per step)."""
        wait, transfer = self.wait_us, self.transfer_us
        if wait is None or transfer is None or not self.ranks or num_steps <= 0:
            return None, None
        scale = 1e3 * len(self.ranks) * num_steps
        return wait / scale, transfer / scale


def to_builtins(exposed: Exposed) -> dict[str, Any]:
    """The JSON form: rank keys as strings, lists for tuples (what reading a JSON file gives back)."""
    plain: dict[str, Any] = msgspec.json.decode(msgspec.json.encode(exposed))
    return plain


def from_builtins(data: dict[str, Any]) -> Exposed:
    """Read back what `to_builtins` wrote."""
    return msgspec.convert(data, Exposed, strict=False)


def _total(values: list[float | None]) -> float | None:
    """Their sum; None when there are none or any is unknown."""
    known = [v for v in values if v is not None]
    return sum(known) if values and len(known) == len(values) else None
