"""The sweep's renderers (rank 0): its figure, verdict sentences, points table (sweep.html,
sweep.md, sweep.png) and console summary. They read the sweep record (tools/sweep/ builds it)
and never recompute a number.
"""

from __future__ import annotations

import math
from pathlib import Path

from profile_overlap.core.files import SWEEP_HTML, SWEEP_MD, SWEEP_PNG
from profile_overlap.core.io import write_text_atomic
from profile_overlap.core.modes import SPEEDUP_BASELINE, SPEEDUP_MODE
from profile_overlap.tools.sweep.axes import numeric_knob, series_of, x_position
from profile_overlap.tools.sweep.record import SweepPoint, SweepRecord


def _nan(value: float | None) -> float:
    return math.nan if value is None else value


def figure(record: SweepRecord):
    """Every mode's speedup over the first, overlap % and exposed communication against the first
    knob: a colour per mode, a marker per series. A knob of names (model=mlp,transformer) is a
    categorical axis, in the order given."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    vary = list(record.vary.items())
    x_name, x_values = vary[0]
    modes = record.modes
    first = modes[0]
    tab10 = plt.get_cmap("tab10")
    colours = {mode: tab10(i) for i, mode in enumerate(modes)}
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.2), constrained_layout=True)
    panels = (
        (f"speedup vs {first} (x)", "speedup_vs_first", modes[1:]),
        ("overlap %", "overlap_pct", modes),
        ("exposed comm (ms/step)", "exposed_comm_ms", modes),
    )
    series = series_of(record.points, vary)
    markers = ("o", "s", "^", "D", "v", "<", ">", "p") * len(series)
    for (_, points), marker in zip(series, markers):
        xs = [x_position(vary, p.knobs[x_name]) for p in points]
        for ax, (_title, key, shown) in zip(axes, panels):
            for mode in shown:
                ys = [_nan(getattr(p.mode(mode), key)) for p in points]
                # Between names (mlp, transformer) the line only joins a series' points: dotted.
                ax.plot(xs, ys, color=colours[mode], linestyle="-" if numeric_knob(x_values) else ":")
                for x, y, p in zip(xs, ys, points):  # hollow: within run-to-run noise of the first mode
                    noisy = key == "speedup_vs_first" and p.mode(mode).within_noise_vs_first
                    ax.plot(x, y, marker=marker, color=colours[mode], markerfacecolor="white" if noisy else colours[mode])
    axes[0].axhline(1.0, color="0.4", linestyle="--", linewidth=1)
    note = f"above the line: faster than {first}; hollow: within noise"
    axes[0].text(0.01, 0.02, note, transform=axes[0].transAxes, fontsize=8, color="0.3")
    for c in record.crossover:
        if c.kind == "crossover" and c.at is not None:
            axes[0].axvline(x_position(vary, c.at[x_name]), color=colours[c.mode or modes[1]], linestyle=":", linewidth=1.5)
    for ax, (title, _, _) in zip(axes, panels):
        ax.set_title(title, fontsize=10)
        ax.set_xlabel(x_name)
        ax.grid(alpha=0.3)
        if not numeric_knob(x_values):
            ax.set_xticks(range(len(x_values)), [str(v) for v in x_values])
            ax.set_xlim(-0.5, len(x_values) - 0.5)
            continue
        if max(x_values) / max(1, min(x_values)) >= 8:
            ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(x_values), [str(v) for v in sorted(x_values)])
    handles = [Line2D([], [], color=colours[m], label=m) for m in modes]
    if len(series) > 1:
        for (other, _), marker in zip(series, markers):
            label = ", ".join(f"{k}={v}" for k, v in other.items())
            handles.append(Line2D([], [], color="0.3", marker=marker, linestyle="", label=label))
    fig.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 8), frameon=False, fontsize=8)
    return fig


def explain_crossover(record: SweepRecord) -> list[str]:
    """One sentence per series, from the component times of the points around the crossover: where
    the second mode (split by default) starts to beat the first (sequential)."""
    from profile_overlap.render.numbers import fixed, times

    def num(x: float | None, spec: str) -> str:
        return fixed(x, spec, missing="–")

    vary = list(record.vary.items())
    x_name = vary[0][0]
    modes = record.modes
    base, ch = modes[0], modes[1]
    by_name = {p.name: p for p in record.points}
    lines = []
    for c, (other, series) in zip(record.crossover, series_of(record.points, vary)):
        where = (" (" + ", ".join(f"{k}={v}" for k, v in other.items()) + ")") if other else ""
        if c.kind == "crossover" and c.at is not None and c.point is not None:
            p = by_name[c.point]
            pb, pc = p.mode(base), p.mode(ch)
            lines.append(
                f"{ch} starts to beat {base} at {x_name}={c.at[x_name]}{where}: {times(pc.speedup_vs_first)}; there "
                f"{base}'s step spent {num(pb.comm_ms, '.1f')} ms communicating and "
                f"{num(pb.compute_ms, '.1f')} ms computing, and {ch} hid {num(pc.overlap_pct, '.0f')}% of its "
                f"{num(pc.comm_ms, '.1f')} ms of communication."
            )
        elif c.kind == "always":
            lines.append(f"{ch} beats {base} at every {x_name} swept{where} (from {times(series[0].mode(ch).speedup_vs_first)}).")
        elif all(p.mode(ch).speedup_vs_first is None for p in series):
            lines.append(f"No point{where} has step times of both {base} and {ch}, so the sweep cannot say where {ch} wins.")
        else:
            best = max(series, key=lambda p: p.mode(ch).speedup_vs_first or 0)
            s = best.mode(base), best.mode(ch)
            beats = (s[1].speedup_vs_first or 0) > 1
            gloo = (base, ch) == (SPEEDUP_BASELINE, SPEEDUP_MODE) and (s[1].comm_ms or 0) > (s[0].comm_ms or 0)
            why = " On gloo, reduce_scatter runs as a full all_reduce, so the split pays for the all_reduce and the all_gather."
            lines.append(
                f"{ch} never beats {base}{' by more than run-to-run noise' if beats else ''} in this range{where}: at best "
                f"{times(s[1].speedup_vs_first)} at {x_name}={best.knobs[x_name]}, where {ch} communicated "
                f"{num(s[1].comm_ms, '.1f')} ms per step against {base}'s {num(s[0].comm_ms, '.1f')} ms and hid "
                f"{num(s[1].overlap_pct, '.0f')}% of it." + (why if gloo else "")
            )
    return lines


def workload(p: SweepPoint) -> str:
    """K4 d256 B8 T64: a point's resolved sizes (T: the transformer's sequence length)."""
    w = p.workload
    return f"K{w.layers} d{w.dim} B{w.batch}" + (f" T{w.seq_len}" if w.model == "transformer" else "")


def _vs_cell(p: SweepPoint, mode: str) -> str:
    """A point's speedup of `mode` over the first mode: '1.20×', '0.98×*' (within run-to-run noise) or '–'."""
    from profile_overlap.render.numbers import times

    m = p.mode(mode)
    return times(m.speedup_vs_first) + ("*" if m.within_noise_vs_first else "")


def table_columns(record: SweepRecord) -> list[str]:
    """The headers of table_rows' columns after the knobs and the workload: step time of every mode,
    every other mode's speedup over the first, the predicted speedup, overlap % of every mode."""
    modes = record.modes
    return [
        *(f"{m} step ms" for m in modes),
        *(f"{m} vs {modes[0]}" for m in modes[1:]),
        "predicted",
        *(f"{m} overlap %" for m in modes),
        "verified",
    ]


def table_rows(record: SweepRecord) -> list[tuple[str, ...]]:
    """The points table's cells (report and console), in table_columns order after the knobs."""
    from profile_overlap.render.numbers import ms, pct, times

    modes = record.modes
    rows = []
    for p in record.points:
        m = {mode: p.mode(mode) for mode in modes}
        rows.append(
            (
                *(str(v) for v in p.knobs.values()),
                workload(p),
                *(ms(m[mode].step_ms) for mode in modes),
                *(_vs_cell(p, mode) for mode in modes[1:]),
                times(p.headline.get("predicted_speedup")),
                *(pct(m[mode].overlap_pct) for mode in modes),
                "OK" if p.passed else "FAILED",
            )
        )
    return rows


def mode_rows(record: SweepRecord) -> list[tuple[str, ...]]:
    """One row per point and mode (knobs, mode, step ms, speedup vs first, overlap %, exposed comm ms): any number of modes."""
    from profile_overlap.render.numbers import ms, pct

    rows = []
    for p in record.points:
        for mode in record.modes:
            m = p.mode(mode)
            rows.append(
                (
                    *(str(v) for v in p.knobs.values()),
                    mode,
                    ms(m.step_ms),
                    _vs_cell(p, mode),
                    pct(m.overlap_pct),
                    ms(m.exposed_comm_ms),
                )
            )
    return rows


def write_reports(sweep_dir: Path, record: SweepRecord) -> None:
    from profile_overlap.render import document, timeline
    from profile_overlap.render import html as report_html
    from profile_overlap.render import markdown as report_md
    from profile_overlap.render.document import Figure, Paragraph, Ref, Section, Table
    from profile_overlap.render.numbers import times

    fig = figure(record)
    vary = list(record.vary.items())
    modes = record.modes
    knobs = tuple((k,) for k, _ in vary)
    knob_numeric = tuple(numeric_knob(values) for _, values in vary)
    # The points table: each point's speedups; every mode's own numbers go one row per mode below it.
    rows = [
        (
            *(str(v) for v in p.knobs.values()),
            workload(p),
            *(_vs_cell(p, m) for m in modes[1:]),
            times(p.headline.get("predicted_speedup")),
            "OK" if p.passed else "FAILED",
            p.name,
        )
        for p in record.points
    ]
    header = (
        *knobs,
        ("workload",),
        *((f"{m} ", Ref(f"vs {modes[0]}", "speedup_vs_first")) for m in modes[1:]),
        (Ref("predicted", "predicted_speedup"),),
        ("verification",),
        ("run folder",),
    )
    per_mode = Table(
        header=(
            *knobs,
            ("mode",),
            (Ref("step ms", "step_time_ms"),),
            (Ref(f"speedup vs {modes[0]}", "speedup_vs_first"),),
            (Ref("overlap %", "mode_overlap_pct"),),
            (Ref("exposed comm ms", "exposed_comm_ms"),),
        ),
        rows=tuple(tuple((c,) for c in r) for r in mode_rows(record)),
        numeric=(*knob_numeric, False, True, True, True, True),
        caption=(f"Every mode of every point: median step time, speedup over {modes[0]} (*: within run-to-run noise), overlap.",),
    )
    points = Table(
        header=header,
        rows=tuple(tuple((c,) for c in r) for r in rows),
        numeric=(*knob_numeric, False, *(True,) * len(modes), False, False),
        caption=(f"Speedups over {modes[0]}'s median step time; *: within run-to-run noise of it.",),
    )
    doc = document.Report(
        title=f"profile_overlap sweep: when does {modes[1]} beat {modes[0]}?",
        subtitle=f"{len(record.points)} points, varying " + ", ".join(k for k, _ in vary),
        banner=None,
        sections=(
            Section("verdict", "Verdict", tuple(Paragraph((line,), tone="verdict") for line in explain_crossover(record))),
            Section(
                "plots",
                "Speedup, overlap and exposed communication",
                (Figure(("Each point is a full compare run of " + ", ".join(modes) + "; its report is in its run folder.",)),),
            ),
            Section("points", "Points", (points, per_mode)),
        ),
    )
    write_text_atomic(sweep_dir / SWEEP_HTML, report_html.render(doc, figure_svg=timeline.to_svg(fig)))
    timeline.save_png(fig, sweep_dir / SWEEP_PNG)
    write_text_atomic(sweep_dir / SWEEP_MD, report_md.render(doc, figure_png=SWEEP_PNG))


def print_summary(record: SweepRecord, sweep_dir: Path) -> None:
    from rich.table import Table as RichTable

    from profile_overlap.render.console import make_console

    console = make_console()
    table = RichTable(title="profile_overlap sweep (overlap % per mode: sweep.html)")
    headers = [*record.vary, "workload", *table_columns(record)]
    keep = [i for i, h in enumerate(headers) if not h.endswith(" overlap %")]  # the console keeps to 160 columns
    for i in keep:
        table.add_column(headers[i], justify="right")
    for row in table_rows(record):
        table.add_row(*(row[i] for i in keep))
    console.print(table)
    for line in explain_crossover(record):
        console.print(line)
    console.print(f"sweep folder: {sweep_dir} (sweep.html, sweep.md; one run folder per point)")
