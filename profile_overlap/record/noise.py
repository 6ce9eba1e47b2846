"""Run-to-run noise: intervals over blocks of timed steps, and the rules that decide whether two step
times differ by more than noise (definitions: `step_time_ci_ms`, `within_noise`, "Comparing two runs").

A block is `--steps` consecutive timed steps of one mode; with `--repeats R` every mode runs R blocks,
one per round. The intervals are seeded percentile bootstraps over whole blocks (steps inside a block
are not independent: they share the machine's state of the moment), so a record gives the same
intervals every time it is built. Nothing here imports torch or the rest of the record.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Sequence

import msgspec

CONFIDENCE = 0.95
"""Two-sided confidence level of every interval."""
RESAMPLES = 2000
"""Bootstrap resamples per interval. R blocks have only C(2R − 1, R) distinct resamples (126 at R = 5),
so 2000 draws estimate their distribution closely; its percentiles are mostly blocks' own values."""
SEED = 0
"""The bootstrap's seed: a record's intervals are reproducible."""
Z = 1.959964
"""The standard normal quantile of (1 + CONFIDENCE) / 2."""

P10_P90 = "p10-p90"
"""Rule of one block per mode: each median inside the other's p10-p90 range."""
PAIRED_BLOCKS = "paired blocks"
"""Rule of a run with repeats: the bootstrap interval of the speedup over rounds contains 1."""
BETWEEN_RUNS = "between runs"
"""Rule of `report --compare` when both runs have repeats (see compare_runs)."""
SINGLE_RUNS = "single runs"
"""Rule of `report --compare` when a run has one block per mode (see compare_runs)."""

RUN_TO_RUN_SD = 0.04
"""Standard deviation of the log of a run's median step time from one job to the next, beyond what its
own blocks show: a job-level effect (where the ranks landed, the machine's load in that minute) that
blocks inside one job cannot see, so the cross-run rule adds it. Measured by benchmarks/bench_aa.py on
the 2-core development machine: 0.038 over 22 A/A pairs of --repeats 5 runs at load 1 to 3 (figures and
method in benchmarks/README.md, "A/A: run-to-run noise"); rerun it on your machine to measure yours."""
SINGLE_RUN_SD = 0.07
"""The same for runs of one block per mode, beyond what the spread of their steps shows (which also
misses drift within the block): 0.069 over 22 A/A pairs of single runs, as RUN_TO_RUN_SD."""


class Interval(msgspec.Struct, frozen=True):
    """A CONFIDENCE interval of a number."""

    low: float
    high: float

    def contains(self, x: float) -> bool:
        return self.low <= x <= self.high


class NoiseSummary(msgspec.Struct, frozen=True, kw_only=True):
    """A run's noise numbers, computed once with its summary (record/summary.py)."""

    rule: str
    """How the run's within_noise verdicts were decided: P10_P90 (one block per mode) or PAIRED_BLOCKS."""
    num_blocks: int
    """Blocks of timed steps per mode (--repeats)."""
    step_time_ms: dict[str, Interval | None]
    """Per timed mode: the interval of its median step time over blocks (definitions: `step_time_ci_ms`);
    None with one block."""
    speedup_vs_first: dict[str, Interval | None]
    """Per timed mode but the first: the paired interval of its speedup_vs_first; None with one block."""
    speedup: Interval | None = None
    """The paired interval of `speedup` (sequential / split); None with one block or without both modes."""
    overlap_yield_ms: Interval | None = None
    """The paired interval of overlap_yield_ms (split-blocking − split, over rounds); None as for speedup."""


class RunDifference(msgspec.Struct, frozen=True):
    """One mode's step time in run B against run A (definitions: "Comparing two runs")."""

    ratio: float
    """B's median step time / A's."""
    interval: Interval
    """CONFIDENCE interval of the ratio."""
    rule: str
    """BETWEEN_RUNS (both runs with repeats) or SINGLE_RUNS."""
    different: bool
    """The interval excludes 1."""
    smallest_change: float
    """The least relative change these two runs can tell from noise: exp(t · s) − 1, the interval's
    half-width on the log scale (definitions: `single_run_bound`)."""


def percentile(ordered: Sequence[float], pct: float) -> float:
    """Linear interpolation between closest ranks (numpy's default method)."""
    if len(ordered) == 1:
        return ordered[0]
    pos = (len(ordered) - 1) * pct / 100
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def pooled_median(blocks: Sequence[Sequence[float]]) -> float:
    """The median of every step of the given blocks together."""
    return statistics.median([t for block in blocks for t in block])


def bootstrap(statistic: Callable[[list[int]], float], num_blocks: int, *, seed: int = SEED) -> list[float]:
    """`statistic` of RESAMPLES draws of `num_blocks` block indices with replacement, sorted."""
    rng = random.Random(seed)
    return sorted(statistic([rng.randrange(num_blocks) for _ in range(num_blocks)]) for _ in range(RESAMPLES))


def percentile_interval(draws: Sequence[float]) -> Interval:
    tail = 100 * (1 - CONFIDENCE) / 2
    return Interval(percentile(draws, tail), percentile(draws, 100 - tail))


def median_interval(blocks: Sequence[Sequence[float]], *, seed: int = SEED) -> Interval | None:
    """Interval of the pooled median step time over blocks; None with fewer than 2 blocks."""
    if len(blocks) < 2:
        return None
    return percentile_interval(bootstrap(lambda idx: pooled_median([blocks[i] for i in idx]), len(blocks), seed=seed))


def paired_ratio_interval(first: Sequence[Sequence[float]], other: Sequence[Sequence[float]], *, seed: int = SEED) -> Interval | None:
    """Interval of pooled median(first) / pooled median(other) over rounds: block i of both modes ran in
    round i, so a resample keeps the pairs and drift from round to round cancels. None unless both
    have the same 2 or more blocks."""
    if len(first) < 2 or len(first) != len(other):
        return None

    def ratio(idx: list[int]) -> float:
        return pooled_median([first[i] for i in idx]) / pooled_median([other[i] for i in idx])

    return percentile_interval(bootstrap(ratio, len(first), seed=seed))


def paired_difference_interval(base: Sequence[Sequence[float]], other: Sequence[Sequence[float]], *, seed: int = SEED) -> Interval | None:
    """Interval of pooled median(base) − pooled median(other) over rounds, pairs kept as in
    paired_ratio_interval. None unless both have the same 2 or more blocks."""
    if len(base) < 2 or len(base) != len(other):
        return None

    def difference(idx: list[int]) -> float:
        return pooled_median([base[i] for i in idx]) - pooled_median([other[i] for i in idx])

    return percentile_interval(bootstrap(difference, len(base), seed=seed))


def log_median_sd(blocks: Sequence[Sequence[float]], *, seed: int = SEED) -> float:
    """Bootstrap standard deviation of the log of the pooled median over blocks (2 or more blocks)."""
    draws = bootstrap(lambda idx: math.log(pooled_median([blocks[i] for i in idx])), len(blocks), seed=seed)
    return statistics.stdev(draws)


def single_run_bound() -> float:
    """The least change of a median step time that two single runs can ever tell from noise, when
    their own steps do not vary at all: exp(Z · √2 · SINGLE_RUN_SD) − 1."""
    return math.exp(Z * math.sqrt(2) * SINGLE_RUN_SD) - 1


def own_log_sd(blocks: Sequence[Sequence[float]], *, seed: int = SEED) -> float:
    """What a run's own step times say about the spread of the log of its median: the bootstrap over
    its blocks (2 or more), or with one block over its single steps (as blocks of one step)."""
    return log_median_sd(blocks if len(blocks) > 1 else [[t] for t in blocks[0]], seed=seed)


T_975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131)
"""Student's t quantile at 0.975 (CONFIDENCE) for 1, 2, ... 15 degrees of freedom."""


def t_quantile(df: float) -> float:
    """Student's t quantile at 0.975 for `df` (≥ 1, fractional as Welch's) degrees of freedom: the table,
    linear in 1/df between its rows, and from 15 on linear in 1/df towards Z (within 0.004 of the exact)."""
    if df >= len(T_975):
        return Z + (T_975[-1] - Z) * len(T_975) / df
    lo = max(1, int(df))
    frac = (1 / lo - 1 / df) / (1 / lo - 1 / (lo + 1))
    return T_975[lo - 1] + (T_975[lo] - T_975[lo - 1]) * frac


def difference_limit(var_a: float, units_a: int, var_b: float, units_b: int, sigma: float) -> float:
    """How far apart two runs' log medians may lie within noise: t · s, s² = var_a + var_b + 2 · sigma²,
    t at Welch–Satterthwaite's degrees of freedom, var_X estimated from units_X blocks (or steps) with
    units_X − 1 degrees of freedom and sigma taken as known: few blocks give a wider limit."""
    total = var_a + var_b + 2 * sigma**2
    if total == 0:
        return 0.0
    spread = sum(v * v / (n - 1) for v, n in ((var_a, units_a), (var_b, units_b)) if v > 0)
    df = total**2 / spread if spread else math.inf
    return (Z if math.isinf(df) else t_quantile(df)) * math.sqrt(total)


def own_units(blocks: Sequence[Sequence[float]]) -> int:
    """What own_log_sd resamples: the blocks, or with one block its steps."""
    return len(blocks) if len(blocks) > 1 else len(blocks[0])


def compare_runs(a: Sequence[Sequence[float]], b: Sequence[Sequence[float]]) -> RunDifference:
    """Run B's step times (blocks) against run A's, for one mode (definitions: `run_ratio`).

    On the log scale, d = log(median B / median A), s² = sd_A² + sd_B² + 2 · σ²: sd_X is own_log_sd of
    run X (what its own blocks, or steps, show) and σ the job-to-job part that no run can see in itself:
    RUN_TO_RUN_SD when both runs have 2 or more blocks (BETWEEN_RUNS), else SINGLE_RUN_SD (SINGLE_RUNS;
    it also covers drift inside one block, which a bootstrap over its steps misses). The interval is
    exp(d ± difference_limit); different when it excludes 1.
    """
    ratio = pooled_median(b) / pooled_median(a)
    rule, sigma = (BETWEEN_RUNS, RUN_TO_RUN_SD) if len(a) > 1 and len(b) > 1 else (SINGLE_RUNS, SINGLE_RUN_SD)
    limit = difference_limit(own_log_sd(a) ** 2, own_units(a), own_log_sd(b, seed=SEED + 1) ** 2, own_units(b), sigma)
    d = math.log(ratio)
    interval = Interval(math.exp(d - limit), math.exp(d + limit))
    return RunDifference(ratio, interval, rule, different=not interval.contains(1.0), smallest_change=math.exp(limit) - 1)
