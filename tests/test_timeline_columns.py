"""The timeline's spans built for all steps at once (analysis/rank/spans.py `_all_steps`) are the
step-by-step ones to the bit: same spans, labels and order, so timeline.json does not change."""

from __future__ import annotations

import numpy as np

from profile_overlap.analysis.file.steps import StepTable
from profile_overlap.analysis.rank import spans


def _pieces(rng: np.random.Generator, n: int, mean_us: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    start = rng.uniform(-20, 1020, n).round(1)
    return start, start + rng.exponential(mean_us, n).round(1), rng.integers(0, 30, n)


def test_all_steps_at_once_equal_step_by_step() -> None:
    rng = np.random.default_rng(3)
    fast = 0
    for trial in range(300):
        n_steps = int(rng.integers(1, 20))
        bounds = np.sort(rng.choice(np.arange(0, 1000, 1.0), size=2 * n_steps, replace=False))
        lo, hi = bounds[0::2], bounds[1::2]
        if trial % 4 == 0:  # each step ends where the next begins
            hi = np.r_[lo[1:], lo[-1] + 50]
        steps = StepTable(num=np.arange(n_steps) + 5, start_us=lo, end_us=hi)
        pieces = {
            kind: _pieces(rng, int(rng.integers(0, 600 if trial % 5 == 0 else 60)), 8 if trial % 2 else 60) for kind in ("comm", "compute")
        }
        at_once = spans._all_steps(pieces, steps)
        one_by_one = spans._step_by_step(pieces, steps.rows()[: spans.MAX_TIMELINE_STEPS])
        if at_once is not None:
            fast += 1
            for key, column in one_by_one.items():
                assert column.tobytes() == at_once[key].tobytes(), (trial, key)
    assert fast == 300


def test_a_step_over_the_span_budget_and_overlapping_steps_go_step_by_step() -> None:
    rng = np.random.default_rng(5)
    start = np.arange(0.0, 900.0, 1.5)  # 600 pieces 0.5 apart: more spans than a step keeps
    pieces = {"comm": (start, start + 1.0, rng.integers(0, 5, start.size)), "compute": _pieces(rng, 40, 20)}
    for lo, hi in ((np.array([0.0, 950.0]), np.array([940.0, 1000.0])), (np.array([0.0, 300.0]), np.array([500.0, 900.0]))):
        steps = StepTable(num=np.array([1, 2]), start_us=lo, end_us=hi)
        assert spans._all_steps(pieces, steps) is None
        built = spans.timeline_columns(pieces, ("a", "b", "c", "d", "e") + tuple(str(i) for i in range(30)), steps)
        ref = spans._step_by_step(pieces, steps.rows())
        assert built.start_us.tobytes() == ref["start"].astype(np.float64).tobytes()
        assert len(built) <= 2 * 2 * spans.MAX_SPANS_PER_STEP
