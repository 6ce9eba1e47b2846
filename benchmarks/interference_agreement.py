"""Do the two interference figures of a compare run agree (issue 36)? For each compare run folder, per
(phase, rank) of its split mode, and per phase over its ranks: the per-operator `interference_slowdown_pct` (re-analysed from the
split traces with this checkout's code) and the run's split vs split-blocking `interference_pct` of the
phase (from metrics.json), each with its 95% interval, and whether the intervals overlap; then the count.

    PYTHONPATH=$PWD python benchmarks/interference_agreement.py [--reanalyze] /work/notes/i36runs/cmp1 ...

A folder may be a run folder (metrics.json in it) or hold run folders. `--reanalyze`: the split vs
split-blocking figure recomputed, by the run's own summary code, from both modes' traces analysed with
this checkout's code (to score a change of the analysis on stored runs), not read from metrics.json.

Measured (2026-12-04, 2 shared cores, torch 2.13 CPU, gloo; six compare runs made for it: 4 ranks
default twice, 4 ranks `--profile-steps 6` twice, 2 ranks twice). Before gloo's reduce_scatter finish
inside our waits (`aten::chunk`, `aten::copy_`) was left out of compute (`--reanalyze` on the old
code): 49 of 58 agree, the figures a median 60.7 points apart, the same sign in 44 of 58. After (as the
runs wrote it): 55 of 58, 52.2 points apart, the same sign in 44 of 58. Of the three apart, the split's
optimizer on one rank reads -28% per operator (faster beside communication) against +59% split vs
split-blocking: that rank's alone calls there come from one or two stretches of calls (a unit's update
while no collective of its rank was in flight), so their mean is one moment of the host. Resampling
such stretches instead of calls (tried: 1 to 3 of them per phase and rank, so the interval collapses
to no width) does not give an honest interval either. A forward with 14 pairs reads -92% (one alone
call descheduled) and a backward -1% against +88%. At the level the run's figure is measured, a phase
over all ranks (each rank's per-operator terms of the phase added, as the top level adds them): 16
of 17 agree; the one apart is that forward (-57% [-71, -43] over 56 pairs against +78% [+34, +123]).
Four more runs with `--profile-steps 6`: 35 of 36 and 11 of 12; ten runs in all, 90 of 94 and 27 of 29
(benchmarks/README.md, "Six compare runs, 4 December"). Since an operator counts only when it ran at
least twice each way (MIN_CALLS_EACH_WAY; that forward's -92% came from one alone call, with an interval
of no width): 75 of 78 and 25 of 27 on the same ten runs, the forwards of 2 profiled steps now too few pairs.

Earlier (2026-12-02, 2 shared cores, torch 2.13 CPU, gloo; runs in /work/notes/i36runs: cmp1/cmp4
4 ranks default, cmp2/cmp5 4 ranks `--profile-steps 6`, cmp3/cmp6 2 ranks). Medians of each
operator's calls (before): 15 of 29 and 14 of 30 agree, the optimizer 0 of 20 (per-operator −2% to
−36%, split vs split-blocking +45% to +211%); ratio of means (now): 22 of 29 and 27 of 30, the
optimizer 17 of 20. Same sign 7 → 18 of 29 and 13 → 23 of 30; the median distance between the two
figures barely moved (50 → 61 and 60 → 63 points): the intervals widened (median per-operator width
22 → 122 and 22 → 233 points), as a mean of rare descheduled calls is uncertain on so few steps. Each line also gives split vs
split-blocking per rank over the same operators (no interval): the split's optimizer runs operators
split-blocking's does not (copy_, chunk: 7-39% of its time), which the run's figure counts as
interference; over the same operators the two figures are 40 points apart (median; 46 with medians)
and of the same sign in 40 of 59 cases (25 with medians).
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import msgspec
import numpy as np

from profile_overlap.analysis.file.events import extract
from profile_overlap.analysis.folder import analyze_dir, trace_paths
from profile_overlap.analysis.options import IN_STEPS
from profile_overlap.analysis.read.trace import load_trace
from profile_overlap.analysis.record import analysis_record
from profile_overlap.analysis.world.cross_rank import TraceAnalysis
from profile_overlap.core.modes import PHASES, YIELD_BASELINE, YIELD_MODE
from profile_overlap.record.analysis import AnalysisRecord
from profile_overlap.record.interference import InterferenceEstimate
from profile_overlap.record.load import load_metrics
from profile_overlap.record.metrics import PhaseInterference
from profile_overlap.record.summary import interference, summarize_mode


def _runs(folder: Path) -> list[Path]:
    if (folder / "metrics.json").is_file():
        return [folder]
    return sorted(p.parent for p in folder.glob("*/metrics.json"))


def _fmt(x: float | None, lo: float | None, hi: float | None) -> str:
    if x is None:
        return "–"
    return f"{x:+7.1f} [{lo:+7.1f}, {hi:+7.1f}]" if lo is not None and hi is not None else f"{x:+7.1f} [–]"


Calls = dict[tuple[int, str], dict[str, list[float]]]
"""(rank, phase) -> operator -> its calls' durations, µs."""


def _calls(mode: Path) -> Calls:
    """Each rank's outermost compute calls per phase (by their start) inside its profiled steps."""
    out: Calls = {}
    for path in trace_paths(mode):
        f = extract(load_trace(path))
        ops = f.operators
        inside = np.zeros(ops.start.size, dtype=bool)
        for lo, hi in zip(f.step_start.tolist(), f.step_end.tolist()):
            inside |= (ops.start >= lo) & (ops.end <= hi)
        for index, phase in enumerate(PHASES):
            mine = np.zeros(ops.start.size, dtype=bool)
            for lo, hi in zip(f.phases.start[f.phases.phase == index].tolist(), f.phases.end[f.phases.phase == index].tolist()):
                mine |= (ops.start >= lo) & (ops.start < hi)
            calls = out.setdefault((f.rank or 0, phase), {})
            for k, d in zip(ops.key[inside & mine].tolist(), (ops.end - ops.start)[inside & mine].tolist()):
                calls.setdefault(ops.keys[k], []).append(d)
    return out


def same_operators(split: dict[str, list[float]], blocking: dict[str, list[float]]) -> tuple[float | None, float]:
    """Split vs split-blocking over the operators both modes ran in the phase, as the per-operator
    figure weighs them: Σ n_k · mean(split_k) / Σ n_k · mean(blocking_k) − 1, n_k split's calls; and
    the share of split's time in operators split-blocking did not run there, %."""
    both = set(split) & set(blocking)
    num = sum(sum(split[k]) for k in both)
    den = sum(len(split[k]) * float(np.mean(blocking[k])) for k in both)
    total = sum(sum(v) for v in split.values())
    return (100 * (num / den - 1) if den else None), (100 * (1 - num / total) if total else 0.0)


def _gap(a: tuple[float, float], b: tuple[float, float]) -> float:
    """How far apart two intervals are (0 when they overlap), points."""
    return max(0.0, max(a[0], b[0]) - min(a[1], b[1]))


Case = tuple[float, float, float]
"""(per-operator figure, split vs split-blocking figure, per-operator interval width), %."""


def _run_figure(run: Path, record: AnalysisRecord, *, reanalyze: bool) -> dict[str, PhaseInterference]:
    """The run's split vs split-blocking interference per phase: as its metrics.json holds it, or
    (`reanalyze`) recomputed by the run's own summary code from both modes' traces analysed with
    this checkout's code, as the run would have measured them."""
    metrics = load_metrics(run / "metrics.json")
    if reanalyze:
        redone = {YIELD_MODE: record, YIELD_BASELINE: analysis_record(analyze_dir(run / YIELD_BASELINE, IN_STEPS), replay=False)}
        modes = {n: msgspec.structs.replace(m, analysis=redone[n]) if n in redone else m for n, m in metrics.modes.items()}
        metrics = msgspec.structs.replace(metrics, modes=modes)
        rows = interference({n: summarize_mode(m) for n, m in metrics.modes.items()}, metrics)
    else:
        rows = metrics.summary.interference if metrics.summary is not None else ()
    return {row.phase: row for row in rows}


@dataclass
class Tally:
    """Cases that agree, of all, per (phase, rank) and per phase over the ranks."""

    agree: int = 0
    total: int = 0
    phase_agree: int = 0
    phase_total: int = 0


def _pooled(analysis: TraceAnalysis, phase: str) -> InterferenceEstimate | None:
    """The per-operator figure of one phase over all ranks, as the top level sums ranks: the ranks'
    samples of the phase added term by term (the level split vs split-blocking is measured at)."""
    parts = [s for r in analysis.ranks if r.interference is not None for name, s in r.interference.phases if name == phase]
    return sum(parts[1:], parts[0]).estimate() if parts else None


def agreement(run: Path, cases: list[Case], tally: Tally, *, reanalyze: bool = False) -> list[str]:
    analysis = analyze_dir(run / YIELD_MODE, IN_STEPS)
    record = analysis_record(analysis, replay=False)
    split = _run_figure(run, record, reanalyze=reanalyze)
    ours, theirs = _calls(run / "split"), _calls(run / "split-blocking")
    lines = [f"{run}"]
    agree = total = 0
    if record.interference is None:
        return [*lines, "  no per-operator interference"]
    for phase in PHASES:
        op, sp = _pooled(analysis, phase), split.get(phase)
        if op is None or sp is None or op.slowdown_pct is None or sp.pct is None or sp.low_pct is None or sp.high_pct is None:
            continue
        assert op.low_pct is not None and op.high_pct is not None
        gap = _gap((op.low_pct, op.high_pct), (sp.low_pct, sp.high_pct))
        tally.phase_total += 1
        tally.phase_agree += gap == 0
        lines.append(
            f"  all ranks {phase:9s} per-operator {_fmt(op.slowdown_pct, op.low_pct, op.high_pct)} ({op.pairs:4d} pairs)"
            f"   split vs split-blocking {_fmt(sp.pct, sp.low_pct, sp.high_pct)}   {'agree' if gap == 0 else f'apart by {gap:.1f} pt'}"
        )
    for rank, r in sorted(record.interference.ranks.items(), key=lambda x: int(x[0])):
        for phase in PHASES:
            op, sp = r.phases.get(phase), split.get(phase)
            if op is None or sp is None or op.slowdown_pct is None or sp.pct is None or sp.low_pct is None or sp.high_pct is None:
                continue
            assert op.low_pct is not None and op.high_pct is not None
            gap = _gap((op.low_pct, op.high_pct), (sp.low_pct, sp.high_pct))
            total += 1
            cases.append((op.slowdown_pct, sp.pct, op.high_pct - op.low_pct))
            agree += gap == 0
            verdict = "agree" if gap == 0 else f"apart by {gap:.1f} pt (figures {sp.pct - op.slowdown_pct:+.1f} pt)"
            common, only = same_operators(ours.get((int(rank), phase), {}), theirs.get((int(rank), phase), {}))
            lines.append(
                f"  rank {rank} {phase:9s} per-operator {_fmt(op.slowdown_pct, op.low_pct, op.high_pct)} ({op.pairs:4d} pairs)"
                f"   split vs split-blocking {_fmt(sp.pct, sp.low_pct, sp.high_pct)}"
                f"   {verdict}; split vs split-blocking over the same operators {'–' if common is None else f'{common:+.1f}'}"
                f" ({only:.0f}% of split's time in operators split-blocking did not run there)"
            )
    lines.append(f"  {agree} of {total} (phase, rank) cases agree")
    tally.agree += agree
    tally.total += total
    return lines


def main(argv: list[str]) -> int:
    reanalyze = "--reanalyze" in argv
    argv = [a for a in argv if a != "--reanalyze"]
    if not argv:
        print("usage: interference_agreement.py [--reanalyze] RUN_FOLDER...", file=sys.stderr)
        return 2
    tally = Tally()
    cases: list[Case] = []
    for arg in argv:
        for run in _runs(Path(arg)):
            print("\n".join(agreement(run, cases, tally, reanalyze=reanalyze)))
    print(f"all: {tally.agree} of {tally.total} (phase, rank) cases agree")
    print(f"per phase over the ranks (the level split vs split-blocking is measured at): {tally.phase_agree} of {tally.phase_total}")
    if cases:
        gap = statistics.median(abs(s - p) for p, s, _ in cases)
        sign = sum((p > 0) == (s > 0) for p, s, _ in cases)
        width = statistics.median(w for _, _, w in cases)
        print(f"median |split vs split-blocking − per-operator| {gap:.1f} pt; same sign {sign} of {len(cases)}")
        print(f"median per-operator interval width {width:.1f} pt")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
