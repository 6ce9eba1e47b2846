"""A replayed gain is a share of the profiled step, quoted on the timed step: the profiled steps of a
run can take twice its timed ones (the profiler, or a busy minute on a shared machine), and a rerun
measures timed steps."""

from __future__ import annotations

import pytest

from profile_overlap.tools.advise import quote
from profile_overlap.tools.advise.candidates import Candidate


def _candidate(gain_us: float, **kw) -> Candidate:
    return Candidate(kind="fsdp2-group", mode="fsdp2", change="merge", flag="--fsdp-group 4", code=None, config={}, gain_us=gain_us, **kw)


def test_a_replayed_gain_from_steps_profiled_at_twice_the_timed_ones_is_halved():
    # 77 ms replayed on 200 ms profiled steps of a run timed at 100 ms: 38.5% of the step, 38.5 ms.
    q = quote(_candidate(77_000.0), error_pct=10.0, profiled_ms=200.0, timed_ms=100.0, noise=5.0)
    gain, low, high, noise = q.gain, q.low, q.high, q.noise
    assert gain == pytest.approx(38.5)
    # Still as wide as the profiled steps are unlike the timed ones: (e + p) · |gain| + n, p = |200 / 100 − 1|.
    assert (high - gain, gain - low) == (pytest.approx((0.10 + 1.0) * 38.5 + 5.0),) * 2
    assert noise == 5.0


def test_profiled_steps_like_the_timed_ones_leave_the_gain_as_replayed():
    q = quote(_candidate(-3_000.0), error_pct=0.0, profiled_ms=20.0, timed_ms=20.0, noise=1.0)
    gain, low, high = q.gain, q.low, q.high
    assert (gain, low, high) == (pytest.approx(-3.0), pytest.approx(-4.0), pytest.approx(-2.0))


def test_the_fit_error_and_the_call_costs_higher_reading_are_quoted_on_the_timed_step_too():
    c = _candidate(7_000.0, fit_error_us=2_000.0, gain_range_us=(4_000.0, 10_000.0))  # the gain midway between the readings
    q = quote(c, error_pct=0.0, profiled_ms=40.0, timed_ms=20.0, noise=0.0)
    gain, low, high = q.gain, q.low, q.high
    assert gain == pytest.approx(3.5)
    spread = 1.0 * 3.5 + 1.0  # p · |gain| + k · fit error
    # From the lower reading's gain - the spread to the higher one's + it, each on the timed step.
    assert low == pytest.approx(2.0 - spread) and high == pytest.approx(5.0 + spread)


def test_a_schedule_switch_the_run_timed_is_its_timed_difference_whatever_the_profiled_steps_took():
    c = _candidate(6_000.0, timed=True)
    q = quote(c, error_pct=50.0, profiled_ms=400.0, timed_ms=20.0, noise=2.0)
    assert (q.gain, q.low, q.high, q.noise) == (pytest.approx(6.0), pytest.approx(4.0), pytest.approx(8.0), 2.0)
