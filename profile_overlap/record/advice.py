"""The `advise` record: changes ranked by predicted gain, each with the cause it addresses, the exact
flag or code line, and (after `advise --verify`) the gain measured in alternating blocks. Built once
by tools/advise/ and stored as RUN_DIR/advice.json; the console, the report's "What to change"
section, the Overlap tab and TensorBoard only read it. Every number is defined in
docs/metrics.md ("Advice"); times in ms."""

from __future__ import annotations

from pathlib import Path

import msgspec

from profile_overlap.core.errors import UserError
from profile_overlap.core.files import ADVICE_JSON
from profile_overlap.record.call_cost import CallCost
from profile_overlap.record.interference_used import UsedInterference

SCHEMA = 1
SHOWN = 3
"""Items the console, the report and the Overlap tab show (TensorBoard's text has them all)."""

NOTHING = "nothing"
"""The kind of the item that says no change beats the run-to-run noise."""


class Verification(msgspec.Struct, frozen=True):
    """One change run against the original configuration in alternating blocks (`advise --verify`)."""

    run_dir: str
    """The verification's own folder (its original and changed runs inside)."""
    repeats: int
    """Blocks per side, alternating original, changed, original, ..."""
    baseline_ms: float
    """Median step time of the original configuration over its blocks."""
    changed_ms: float
    measured_gain_ms: float
    """baseline_ms − changed_ms (positive: the change is faster)."""
    gain_low_ms: float
    """95% interval of the gain: the paired bootstrap over rounds of the blocks' median differences."""
    gain_high_ms: float
    hit: bool
    """The predicted gain quoted on these blocks (predicted_here_ms) lies inside [gain_low_ms, gain_high_ms]."""
    sign_agrees: bool
    """The measured gain has the predicted sign, or its interval contains 0 (a predicted gain under 1e-9 ms
    predicts no change: it agrees only when the interval contains 0)."""
    changed_overlap_pct: float | None = None
    """Overlap % of the changed run's profiled steps (None without traces)."""
    predicted_here_ms: float | None = None
    """The item's predicted gain quoted on these original blocks: predicted_gain_ms × baseline_ms / the
    mode's timed median in the run (a gain is a share of its step; None in records from before it)."""


class AdviceItem(msgspec.Struct, frozen=True):
    """One change and what it is predicted to buy."""

    kind: str
    """ddp-bucket, ddp-bucket-view, fsdp2-reshard, fsdp2-prefetch, split-prefetch, schedule, straggler,
    bandwidth or NOTHING."""
    mode: str
    """The mode (or "job") it applies to."""
    cause: str
    """The cause it addresses, as "Where the exposed time goes" names it."""
    change: str
    """The change in words."""
    flag: str | None
    """The run flag that applies it (our runs); None when no flag does."""
    code: str | None
    """The line of training code that applies it (anyone's job)."""
    baseline_ms: float | None
    """The mode's measured median step time."""
    predicted_ms: float | None
    """baseline_ms − predicted_gain_ms; None when the change is not replayed."""
    predicted_gain_ms: float | None
    gain_low_ms: float | None
    """Interval of the predicted gain: gain ± (model error · gain + noise); docs/advise.md."""
    gain_high_ms: float | None
    worth_it: bool
    """predicted_gain_ms exceeds the run-to-run noise of the mode's step time."""
    verifiable: bool
    """`advise --verify` can run it (a flag of our runs changes it)."""
    verification: Verification | None = None
    interference: tuple[UsedInterference, ...] | None = None
    """Replayed items: per phase, the interference the replay charged the mode's compute beside
    communication and where it came from (definitions: `interference_used`); None for the others
    and in records before it."""
    call_cost: tuple[CallCost, ...] | None = None
    """Items that change the number of calls (ddp buckets): the per-call cost the replay charged
    their new calls (definitions: `advice_call_cost`), one reading, or the two a single call size
    leaves open (the gain is the middle of their replays' gains); None for the others and in records before it."""
    less_overlap: bool = False
    """The change takes communication out from under compute (fewer DDP buckets, a forward that waits
    for more all_gathers); False for the others and in records before it."""


class Advice(msgspec.Struct, frozen=True):
    schema: int
    source: str
    """The run or job folder advised."""
    is_job: bool
    noise_ms: dict[str, float]
    """Per mode: the step-time change its noise hides (half the 95% interval of its median step)."""
    model_error_pct: dict[str, float]
    """Per replayed mode: |self-replay − measured profiled step| / measured, in %."""
    items: tuple[AdviceItem, ...]
    """Ranked: changes worth making first, by predicted gain; NOTHING first when none is."""
    notes: tuple[str, ...]
    """What the predictions assumed, and how to try the advice on a job."""

    @property
    def hits(self) -> tuple[int, int]:
        """(hits, verified items)."""
        done = [i.verification for i in self.items if i.verification is not None]
        return sum(v.hit for v in done), len(done)


def encode(advice: Advice) -> bytes:
    return msgspec.json.encode(advice)


def load_advice(run_dir: Path) -> Advice | None:
    """RUN_DIR/advice.json read back; None when `advise` was never run on the folder."""
    path = Path(run_dir) / ADVICE_JSON
    if not path.is_file():
        return None
    try:
        data = path.read_bytes()
    except OSError as err:
        raise UserError(f"cannot read {path}: {err.strerror}") from None
    return decode_advice(data, path=path)


def decode_advice(data: bytes, *, path: Path | str) -> Advice:
    """An advice record from its JSON bytes (read by the caller); UserError (one line) for one this version cannot read."""
    try:
        return msgspec.json.decode(data, type=Advice)
    except msgspec.DecodeError as err:  # ValidationError is a DecodeError
        raise UserError(f"{path} is not an advice record this version can read ({err}): rerun `advise`") from None
    except RecursionError:
        raise UserError(f"{path} nests deeper than any advice record: it is not an advice.json; rerun `advise`") from None
