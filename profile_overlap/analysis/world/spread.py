"""Each per-rank number's distribution over the ranks, its worst and best ranks and its outliers
(record/spread.py; definitions: docs/metrics.md "Over ranks"). Computed once from the rank records."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from profile_overlap.record.analysis import RankRecord
from profile_overlap.record.spread import SHOWN, Spread

METRICS = (
    ("step_us", "high"),
    ("comm_us", "high"),
    ("compute_us", "high"),
    ("overlap_us", "low"),
    ("exposed_comm_us", "high"),
    ("overlap_pct", "low"),
    ("wait_us", "high"),
    ("transfer_us", "high"),
)
"""The numbers summarised, and which end of each is worse."""
MAD_SIGMAS = 3.0
MAD_SCALE = 1.4826
"""MAD x this estimates the standard deviation of normally distributed values."""
MIN_RELATIVE = 0.05
"""An outlier differs from the median by at least this fraction of it (no flags on near-equal ranks)."""


def _value(r: RankRecord, metric: str) -> float | None:
    if metric == "step_us":
        steps = [s.step_us for s in r.steps if s.step_us is not None]
        return sum(steps) / len(steps) if steps else None
    value: float | None = getattr(r, metric)
    return value


def spread(ranks: Sequence[RankRecord]) -> tuple[Spread, ...]:
    """One Spread per metric that at least two ranks have."""
    out = []
    for metric, worse in METRICS:
        pairs = [(r.rank, v) for r in ranks if (v := _value(r, metric)) is not None]
        if len(pairs) < 2:
            continue
        rank = np.array([p[0] for p in pairs])
        x = np.array([p[1] for p in pairs], dtype=float)
        p = np.percentile(x, [0, 10, 50, 90, 100])
        med = float(p[2])
        mad = float(np.median(np.abs(x - med)))
        limit = max(MAD_SIGMAS * MAD_SCALE * mad, MIN_RELATIVE * abs(med))
        sign = -1.0 if worse == "high" else 1.0
        same = p[0] == p[4]  # nobody is worse or better than the rest
        order = np.lexsort((rank, sign * x))  # worst first, the lower rank on a tie
        back = np.lexsort((rank, -sign * x))
        out.append(
            Spread(
                metric=metric,
                worse=worse,
                ranks=len(pairs),
                min=round(float(p[0]), 3),
                p10=round(float(p[1]), 3),
                median=round(med, 3),
                p90=round(float(p[3]), 3),
                max=round(float(p[4]), 3),
                worst=() if same else tuple(int(r) for r in rank[order[:SHOWN]]),
                best=() if same else tuple(int(r) for r in rank[back[:SHOWN]]),
                outliers=tuple(int(r) for r in rank[np.abs(x - med) > limit]) if limit > 0 else (),
            )
        )
    return tuple(out)
