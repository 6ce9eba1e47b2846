"""The before/after report of two runs, honest about run-to-run noise."""

from __future__ import annotations

import json

from profile_overlap.record.folder import Run
from profile_overlap.record.summary import HEADLINE_NAMES, MODE_ORDER, within_noise
from profile_overlap.render.document import Code, Paragraph, Ref, Report, Section, Table, ms
from profile_overlap.render.report import reproduce_command


def build_compare(a: Run, b: Run) -> Report:
    ha, hb = a.metrics.summary.headline, b.metrics.summary.headline
    sa, sb = a.metrics.summary.modes, b.metrics.summary.modes
    rows = []
    for name in HEADLINE_NAMES:
        x, y = ha[name], hb[name]
        if x is None and y is None:
            continue
        delta = "–" if x is None or y is None else f"{y - x:+,.3g}"
        ratio = "–" if not x or y is None else f"{y / x:.3f}"
        rows.append(((name,), (_num(x),), (_num(y),), (delta,), (ratio,)))
    headline_table = Table(
        header=(("headline metric",), (f"A: {a.name}",), (f"B: {b.name}",), (Ref("B − A", "delta"),), ("B / A",)),
        rows=tuple(rows),
        numeric=(False, True, True, True, True),
        caption=("Names as in --fail-if (see Headline names in the definitions).",),
    )
    spread_rows, statements = [], []
    for mode in [m for m in MODE_ORDER if m in sa and m in sb]:
        ta, tb = a.metrics.modes[mode].step_time, b.metrics.modes[mode].step_time
        if not ta.times_ms or not tb.times_ms:
            continue
        spread_rows.append(
            (
                (mode,),
                (f"{ms(ta.median_ms)} ({ms(ta.p10_ms)} – {ms(ta.p90_ms)})",),
                (f"{ms(tb.median_ms)} ({ms(tb.p10_ms)} – {ms(tb.p90_ms)})",),
                (f"{tb.median_ms / ta.median_ms:.3f}",),
            )
        )
        if within_noise(ta, tb):
            statements.append(
                (
                    f"{mode}: no measurable difference. B's median step ",
                    Ref(f"{ms(tb.median_ms)} ms", "step_time_ms"),
                    f" lies inside A's p10–p90 ({ms(ta.p10_ms)} – {ms(ta.p90_ms)} ms) and A's median ",
                    Ref(f"{ms(ta.median_ms)} ms", "step_time_ms"),
                    f" inside B's ({ms(tb.p10_ms)} – {ms(tb.p90_ms)} ms): the difference is ",
                    Ref("within run-to-run noise", "within_noise"),
                    ".",
                )
            )
        else:
            word = "faster" if tb.median_ms < ta.median_ms else "slower"
            statements.append(
                (
                    f"{mode}: B is {word}: median step ",
                    Ref(f"{ms(tb.median_ms)} ms", "step_time_ms"),
                    " vs ",
                    Ref(f"{ms(ta.median_ms)} ms", "step_time_ms"),
                    f" ({tb.median_ms / ta.median_ms:.3f}× A), outside each other's p10–p90 range, so more than ",
                    Ref("run-to-run noise", "within_noise"),
                    ".",
                )
            )
    spread = Table(
        header=(("mode",), ("A median (p10 – p90) ms",), ("B median (p10 – p90) ms",), ("B / A",)),
        rows=tuple(spread_rows),
        numeric=(False, True, True, True),
        caption=(Ref("Step time", "step_time_ms"), ": the median of each run's timed steps, with their p10–p90 spread."),
    )
    diff_rows = []
    for label, da, db in (("config", a.metrics.config, b.metrics.config), ("env", _env_view(a.metrics.env), _env_view(b.metrics.env))):
        for key in sorted(set(da) | set(db)):
            if da.get(key) != db.get(key):
                diff_rows.append(((f"{label}.{key}",), (_show(da.get(key)),), (_show(db.get(key)),)))
    failed = [r for r in (a, b) if r.failed]
    banner_ = (
        Paragraph(
            (f"FAILED: {', '.join(r.name for r in failed)} did not pass verification or did not finish; compare its timings with care.",),
            tone="failed",
        )
        if failed
        else None
    )
    sections = (
        Section(
            "verdict",
            "Verdict",
            tuple(Paragraph(t, tone="verdict") for t in statements)
            or (Paragraph(("The runs share no mode with timed steps, so their step times cannot be compared.",)),),
        ),
        Section("spread", "Step time and its spread", (spread,)),
        Section("headline", "Headline metrics", (headline_table,)),
        Section(
            "differences",
            "What differs between the runs",
            (Table(header=(("setting",), ("A",), ("B",)), rows=tuple(diff_rows), numeric=(False, False, False)),)
            if diff_rows
            else (Paragraph(("Same config and environment (apart from dates, process ids and folder names).",)),),
        ),
        Section(
            "runs", "The runs", (Code(f"A: {a.dir}\n   {reproduce_command(a.metrics)}\nB: {b.dir}\n   {reproduce_command(b.metrics)}"),)
        ),
    )
    return Report(
        title="profile_overlap comparison", subtitle=f"A (before): {a.name}  ·  B (after): {b.name}", banner=banner_, sections=sections
    )


def compare_record(a: Run, b: Run) -> dict:
    ha, hb = a.metrics.summary.headline, b.metrics.summary.headline
    return {
        "a": {"run_dir": str(a.dir), "headline": ha},
        "b": {"run_dir": str(b.dir), "headline": hb},
        "delta": {k: (hb[k] - ha[k] if ha[k] is not None and hb[k] is not None else None) for k in HEADLINE_NAMES},
    }


def _env_view(env: dict) -> dict:
    """The environment keys that can explain a difference (not dates, pids or the command's folder)."""
    keep = ("python", "torch", "cuda", "nccl", "gloo", "backend", "device_type", "world_size", "num_nodes", "hosts")
    view = {k: env.get(k) for k in keep}
    view["devices"] = sorted({r["device"] for r in env.get("ranks", [])})
    return view


def _show(v) -> str:
    return "–" if v is None else v if isinstance(v, str) else json.dumps(v)


def _num(x: float | None) -> str:
    return "–" if x is None else f"{x:,.4g}"
