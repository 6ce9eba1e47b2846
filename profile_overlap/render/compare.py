"""The before/after report of two runs, honest about run-to-run noise."""

from __future__ import annotations

import json

from profile_overlap.record import noise
from profile_overlap.record.analysis import as_json
from profile_overlap.record.folder import Run
from profile_overlap.record.metrics import Env
from profile_overlap.record.summary import HEADLINE_NAMES, compare_runs, median_ms, summary_of
from profile_overlap.render.document import Code, Paragraph, Ref, Report, Section, Table
from profile_overlap.render.modes import speedup_cell
from profile_overlap.render.numbers import ms, significant
from profile_overlap.render.report import reproduce_command


def build_compare(a: Run, b: Run) -> Report:
    failed = [r for r in (a, b) if r.failed]
    banner_ = (
        Paragraph(
            (f"FAILED: {', '.join(r.name for r in failed)} did not pass verification or did not finish; compare its timings with care.",),
            tone="failed",
        )
        if failed
        else None
    )
    runs = Code(f"A: {a.dir}\n   {reproduce_command(a.metrics)}\nB: {b.dir}\n   {reproduce_command(b.metrics)}")
    sections = (
        Section("verdict", "Verdict", _verdict_blocks(a, b)),
        Section("spread", "Step time and its spread", (_spread_table(a, b),)),
        Section("headline", "Headline metrics", (_headline_table(a, b),)),
        Section("differences", "What differs between the runs", _differences(a, b)),
        Section("runs", "The runs", (runs,)),
    )
    return Report(
        title="profile_overlap comparison", subtitle=f"A (before): {a.name}  ·  B (after): {b.name}", banner=banner_, sections=sections
    )


def _mode_names(a: Run, b: Run) -> list[str]:
    """A's modes in its order, then B's other modes."""
    return list(dict.fromkeys([*a.metrics.modes, *b.metrics.modes]))


def _headline_table(a: Run, b: Run) -> Table:
    ha, hb = summary_of(a.metrics).headline, summary_of(b.metrics).headline
    rows = []
    for name in HEADLINE_NAMES:
        x, y = ha.get(name), hb.get(name)
        if x is None and y is None:
            continue
        delta = "–" if x is None or y is None else f"{y - x:+,.3g}"
        ratio = "–" if not x or y is None else f"{y / x:.3f}"
        rows.append(((name,), (significant(x),), (significant(y),), (delta,), (ratio,)))
    return Table(
        header=(("headline metric",), (f"A: {a.name}",), (f"B: {b.name}",), (Ref("B − A", "delta"),), ("B / A",)),
        rows=tuple(rows),
        numeric=(False, True, True, True, True),
        caption=(
            "Names as in --fail-if (see Headline names in the definitions)."
            + (
                f" overlap_pct, exposed_comm_ms, comm_ms, compute_ms and optimizer_state_mib are of {summary_of(a.metrics).headline_mode} "
                f"in A and of {summary_of(b.metrics).headline_mode} in B."
                if summary_of(a.metrics).headline_mode != summary_of(b.metrics).headline_mode
                else ""
            ),
        ),
    )


def _verdict_blocks(a: Run, b: Run) -> tuple:
    """One statement per mode timed in both runs, and the modes only one run has."""
    sa, sb = summary_of(a.metrics).modes, summary_of(b.metrics).modes
    names = _mode_names(a, b)
    only = {side: [n for n in names if n in mine and n not in theirs] for side, mine, theirs in (("A", sa, sb), ("B", sb, sa))}
    alone = "; ".join(f"only in {side}: {', '.join(modes)}" for side, modes in only.items() if modes)
    statements = [
        _statement(mode, diff, a.metrics.modes[mode].step_time, b.metrics.modes[mode].step_time)
        for mode, diff in compare_runs(a.metrics, b.metrics).items()
    ]
    return (
        tuple(Paragraph(t, tone="verdict") for t in statements)
        or (Paragraph(("The runs share no mode with timed steps, so their step times cannot be compared.",)),)
    ) + ((Paragraph((alone[0].upper() + alone[1:] + ": nothing to compare these modes with.",)),) if alone else ())


def _spread_table(a: Run, b: Run) -> Table:
    sa, sb = summary_of(a.metrics).modes, summary_of(b.metrics).modes
    names = _mode_names(a, b)
    return Table(
        header=(("",), *((n,) for n in names)),
        rows=(
            (("A: median (p10 – p90) ms",), *((_spread(a, n),) for n in names)),
            (("B: median (p10 – p90) ms",), *((_spread(b, n),) for n in names)),
            *(
                ((f"{side}: ", Ref("95% interval", "step_time_ci_ms"), " of the median (ms)"), *((_interval(r, n),) for n in names))
                for side, r in (("A", a), ("B", b))
                if _has_blocks(r)
            ),
            (("B / A",), *((_ratio(a, b, n),) for n in names)),
            (("A: ", Ref("speedup", "speedup_vs_first"), f" vs {next(iter(sa))}"), *((_vs_first(a, n),) for n in names)),
            (("B: ", Ref("speedup", "speedup_vs_first"), f" vs {next(iter(sb))}"), *((_vs_first(b, n),) for n in names)),
        ),
        numeric=(False, *(True for _ in names)),
        caption=(
            Ref("Step time", "step_time_ms"),
            ": the median of each run's timed steps, with their p10–p90 spread; one column per mode of either run "
            "(– where a run lacks the mode). Speedup vs each run's first mode; *: within run-to-run noise of it.",
        ),
    )


def _differences(a: Run, b: Run) -> tuple:
    """The config flags and environment facts that differ (not dates, pids or folders)."""
    rows = []
    for label, da, db in (("config", a.metrics.config, b.metrics.config), ("env", _env_view(a.metrics.env), _env_view(b.metrics.env))):
        for key in sorted(set(da) | set(db)):
            if da.get(key) != db.get(key):
                rows.append(((f"{label}.{key}",), (_show(da.get(key)),), (_show(db.get(key)),)))
    if not rows:
        return (Paragraph(("Same config and environment (apart from dates, process ids and folder names).",)),)
    return (Table(header=(("setting",), ("A",), ("B",)), rows=tuple(rows), numeric=(False, False, False)),)


def _statement(mode: str, diff: noise.RunDifference, ta, tb) -> tuple:
    """One mode's step time in B against A, honest about run-to-run noise (definitions: "Comparing two runs")."""
    steps = (
        "median step ",
        Ref(f"{ms(tb.median_ms)} ms", "step_time_ms"),
        " vs ",
        Ref(f"{ms(ta.median_ms)} ms", "step_time_ms"),
        " (",
        Ref(f"{diff.ratio:.3f}× A", "run_ratio"),
    )
    word = "faster" if diff.ratio < 1 else "slower"
    if diff.rule == noise.SINGLE_RUNS:
        bound = Ref(f"{diff.smallest_change:.0%}", "single_run_bound")
        why = " (the spread between single runs measured on the development machine, with these runs' own step-to-step spread)"
        if not diff.different:
            return (
                f"{mode}: no measurable difference with one run each: ",
                *steps,
                "). One run each cannot tell a change below ",
                bound,
                " from ",
                Ref("run-to-run noise", "within_noise"),
                why,
                "; run both with --repeats 5 to tell smaller changes.",
            )
        return (
            f"{mode}: B is {word}: ",
            *steps,
            "), more than the ",
            bound,
            " one run each can tell from ",
            Ref("run-to-run noise", "within_noise"),
            why,
            "; --repeats 5 on both would give a firmer verdict.",
        )
    interval = (
        Ref(f"{diff.interval.low:.3f}–{diff.interval.high:.3f}×", "run_ratio"),
        f", from {len(ta.blocks_ms)} and {len(tb.blocks_ms)} blocks and the spread between runs",
    )
    if not diff.different:
        verdict = (", which contains 1): the difference is ", Ref("within run-to-run noise", "within_noise"), ".")
        return (f"{mode}: no measurable difference: ", *steps, "; 95% interval ", *interval, *verdict)
    verdict = (", which excludes 1), so more than ", Ref("run-to-run noise", "within_noise"), ".")
    return (f"{mode}: B is {word}: ", *steps, "; 95% interval ", *interval, *verdict)


def _spread(run: Run, mode: str) -> str:
    if mode not in run.metrics.modes:
        return "–"
    t = run.metrics.modes[mode].step_time
    return f"{ms(t.median_ms)} ({ms(t.p10_ms)} – {ms(t.p90_ms)})" if t.times_ms else "not timed"


def _has_blocks(run: Run) -> bool:
    noise = summary_of(run.metrics).noise
    return noise is not None and noise.num_blocks > 1


def _interval(run: Run, mode: str) -> str:
    noise = summary_of(run.metrics).noise
    x = noise.step_time_ms.get(mode) if noise and mode in run.metrics.modes else None
    return f"{ms(x.low)} – {ms(x.high)}" if x else "–"


def _ratio(a: Run, b: Run, mode: str) -> str:
    ta, tb = (r.metrics.modes[mode].step_time if mode in r.metrics.modes else None for r in (a, b))
    return f"{median_ms(tb) / median_ms(ta):.3f}" if ta and tb and ta.times_ms and tb.times_ms else "–"


def _vs_first(run: Run, mode: str) -> str:
    return speedup_cell(run.metrics, mode) if mode in run.metrics.modes else "–"


def _delta(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else b - a


def compare_record(a: Run, b: Run) -> dict:
    ha, hb = summary_of(a.metrics).headline, summary_of(b.metrics).headline
    return {
        "a": {"run_dir": str(a.dir), "headline": ha},
        "b": {"run_dir": str(b.dir), "headline": hb},
        "delta": {k: _delta(ha.get(k), hb.get(k)) for k in HEADLINE_NAMES},
        # Per mode timed in both: run_ratio, its interval (runs with repeats), the rule and the verdict.
        "step_time": {mode: as_json(diff) for mode, diff in compare_runs(a.metrics, b.metrics).items()},
    }


def _env_view(env: Env) -> dict[str, object]:
    """The environment facts that can explain a difference (not dates, pids or the command's folder)."""
    return {
        "python": env.python,
        "torch": env.torch,
        "cuda": env.cuda,
        "nccl": env.nccl,
        "gloo": env.gloo,
        "backend": env.backend,
        "device_type": env.device_type,
        "world_size": env.world_size,
        "num_nodes": env.num_nodes,
        "hosts": list(env.hosts),
        "devices": sorted({str(r.device) for r in env.ranks}),
    }


def _show(v) -> str:
    return "–" if v is None else v if isinstance(v, str) else json.dumps(v)
