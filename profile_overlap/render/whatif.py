"""Renderers of the `whatif` record (record/whatif.py): the console table, the speedup plot
(whatif.png) and the report's "What if" section. They format the record; nothing is recomputed."""

from __future__ import annotations

from pathlib import Path

from profile_overlap.record.whatif import WHATIF_PNG, WhatifResult, load_whatif
from profile_overlap.render.document import Paragraph, Ref, Section, Table
from profile_overlap.render.numbers import ms, pct, times


def _gbps(x: float) -> str:
    return f"{x:g}"


def _err(x: float | None) -> str:
    return "–" if x is None else f"{x:+.1f}"


def self_replay_lines(r: WhatifResult) -> list[str]:
    """One line per mode: `self-replay: <mode> measured X ms, predicted Y ms (error Z %)`."""
    lines = []
    for s in r.self_replay:
        profiled = f"; profiled steps {ms(s.profiled_ms)} ms, error {_err(s.profiled_error_pct)} %" if s.profiled_ms else ""
        error = f"error {_err(s.error_pct)} %{profiled}"
        lines.append(f"self-replay: {s.mode} measured {ms(s.measured_ms)} ms, predicted {ms(s.predicted_ms)} ms ({error})")
    return lines


def model_line(r: WhatifResult) -> str:
    source = {None: "from the flags", "run": "fitted to the run's own collectives"}.get(r.fit, f"fitted to {r.fit}")
    bws = ", ".join(_gbps(b) for b in r.link_gbps)
    return (
        f"ring α-β model: α = {r.latency_us:.3g} µs per ring step, B = {bws} GB/s ({source}); compute × {r.compute_scale:g}; "
        f"measured on {r.measured_world_size} ranks"
    )


def crossover_lines(r: WhatifResult) -> list[str]:
    """Per mode after the first: where it starts to beat the first, along each axis."""
    out = []
    for mode in r.modes[1:]:
        mine = [c for c in r.crossovers if c.mode == mode]
        by_n = ", ".join(f"{c.value} at {_gbps(c.at)} GB/s" for c in mine if c.axis == "world_size")
        by_bw = ", ".join(f"{c.value} at {int(c.at)} ranks" for c in mine if c.axis == "link_gbps")
        out.append(f"{mode} beats {r.modes[0]}: by world size {by_n}; by link GB/s {by_bw}")
    return out


def console_table(r: WhatifResult):
    from rich import box
    from rich.table import Table as RichTable

    first = r.modes[0]
    table = RichTable(title="profile_overlap whatif: predicted step per mode", box=box.SIMPLE_HEAVY)
    for header in ("ranks", "link GB/s", "mode", "step ms", "exposed comm ms", "overlap %", f"speedup vs {first}"):
        table.add_column(header, justify="left" if header == "mode" else "right")
    for n in r.world_sizes:
        for bw in r.link_gbps:
            for mode in r.modes:
                p = r.point(mode, n, bw)
                table.add_row(str(n), _gbps(bw), mode, ms(p.step_ms), ms(p.exposed_comm_ms), pct(p.overlap_pct), times(p.speedup_vs_first))
            table.add_section()
    return table


def print_result(r: WhatifResult, console, *, png: Path | None) -> None:
    console.print(model_line(r))
    console.print(console_table(r))
    for line in crossover_lines(r):
        console.print(line)
    for line in self_replay_lines(r):
        console.print(line)
    for note in r.notes:
        console.print(f"note: {note}")
    if png is not None:
        console.print(f"plot: {png}")


def figure(r: WhatifResult):
    """Speedup over the first mode against world size, one line per link bandwidth; a panel per mode."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    others = r.modes[1:] or r.modes
    fig, axes = plt.subplots(1, len(others), figsize=(4.6 * len(others), 3.8), constrained_layout=True, squeeze=False)
    for ax, mode in zip(axes[0], others):
        for bw in r.link_gbps:
            ys = [r.point(mode, n, bw).speedup_vs_first for n in r.world_sizes]
            ax.plot(r.world_sizes, ys, marker="o", label=f"{_gbps(bw)} GB/s")
        ax.axhline(1.0, color="0.4", linestyle="--", linewidth=1)
        ax.set_title(f"{mode} vs {r.modes[0]} (predicted)", fontsize=10)
        ax.set_xlabel("world size (ranks)")
        ax.set_ylabel("speedup (x)")
        if len(r.world_sizes) > 1 and max(r.world_sizes) / min(r.world_sizes) >= 8:
            ax.set_xscale("log", base=2)
        ax.set_xticks(list(r.world_sizes), [str(n) for n in r.world_sizes])
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, frameon=False)
    return fig


def save_png(r: WhatifResult, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig = figure(r)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def report_sections(run_dir: Path) -> tuple[Section, ...]:
    """The report's "What if" section, when `whatif` has stored its record in the run folder."""
    r = load_whatif(run_dir)
    if r is None:
        return ()
    first = r.modes[0]
    replay = Table(
        header=(
            ("mode",),
            (Ref("measured ms", "step_time_ms"),),
            (Ref("predicted ms", "whatif_step_ms"),),
            (Ref("error %", "self_replay_error_pct"),),
            ("profiled steps ms",),
            (Ref("error vs profiled %", "self_replay_error_pct"),),
        ),
        rows=tuple(
            (
                (s.mode,),
                (ms(s.measured_ms),),
                (ms(s.predicted_ms),),
                (_err(s.error_pct),),
                (ms(s.profiled_ms),),
                (_err(s.profiled_error_pct),),
            )
            for s in r.self_replay
        ),
        numeric=(False, True, True, True, True, True),
        caption=(
            "Self-replay: the run's own world size, each collective with its measured share of the busy communication time; "
            "profiled steps: the ranks' mean ProfilerStep window, the steps the traces come from.",
        ),
    )
    rows = []
    for n in r.world_sizes:
        for bw in r.link_gbps:
            for mode in r.modes:
                p = r.point(mode, n, bw)
                rows.append(
                    (
                        (str(n),),
                        (_gbps(bw),),
                        (mode,),
                        (ms(p.step_ms),),
                        (ms(p.exposed_comm_ms),),
                        (pct(p.overlap_pct),),
                        (times(p.speedup_vs_first),),
                    )
                )
    points = Table(
        header=(
            ("ranks",),
            ("link GB/s",),
            ("mode",),
            (Ref("step ms", "whatif_step_ms"),),
            (Ref("exposed comm ms", "whatif_exposed_comm_ms"),),
            (Ref("overlap %", "whatif_overlap_pct"),),
            (Ref(f"speedup vs {first}", "whatif_speedup"),),
        ),
        rows=tuple(rows),
        numeric=(True, True, False, True, True, True, True),
    )
    crossings = tuple(Paragraph((line, " (", Ref("crossover", "whatif_crossover"), ")")) for line in crossover_lines(r))
    blocks = (
        Paragraph(
            (model_line(r), ". Predicted by replaying each mode's dependency graph (", Ref("the model", "whatif_model"), ")."),
        ),
        replay,
        points,
        *crossings,
        *(Paragraph((f"Note: {n}.",)) for n in r.notes),
        Paragraph((f"The plot of speedup against world size is {WHATIF_PNG} in the run folder.",)),
    )
    return (Section("whatif", "What if: other world sizes and bandwidths", blocks),)
