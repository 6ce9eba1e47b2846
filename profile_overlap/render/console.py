"""Console renderer: the run summary on rank 0, from the metrics record only."""

from __future__ import annotations

from pathlib import Path

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from profile_overlap.core import rank_output
from profile_overlap.core.files import REPORT_HTML
from profile_overlap.core.terminal import discard_output, printable
from profile_overlap.record.config import RunConfig
from profile_overlap.record.metrics import RunMetrics
from profile_overlap.record.summary import summary_of
from profile_overlap.render import exposed, integrity, modes
from profile_overlap.render.numbers import fixed

SUMMARY_COLUMNS = (
    "mode",
    "step median ms",
    "p10-p90 ms",
    "speedup vs first",
    "comm ms",
    "compute ms",
    "overlap ms",
    "exposed comm ms",
    "overlap %",
    "opt state MiB/rank",
)
"""The summary table's headers; summary_columns names the first mode in the speedup's."""


def summary_columns(metrics: RunMetrics) -> tuple[str, ...]:
    first = next(iter(summary_of(metrics).modes))
    return tuple(f"speedup vs {first}" if c == "speedup vs first" else c for c in SUMMARY_COLUMNS)


def summary_rows(metrics: RunMetrics) -> list[tuple[str, ...]]:
    """The summary table's cells, one row per mode in the run's order, in SUMMARY_COLUMNS order (console, TensorBoard)."""
    rows: list[tuple[str, ...]] = []
    for m in summary_of(metrics).modes.values():
        st = metrics.modes[m.mode].step_time
        spread = f"{st.p10_ms:.2f}-{st.p90_ms:.2f}" if st.p10_ms is not None else "-"
        rows.append(
            (
                m.mode,
                fixed(st.median_ms),
                spread,
                modes.speedup_cell(metrics, m.mode).replace("×", "x").replace("–", "-"),
                fixed(m.comm_ms),
                fixed(m.compute_ms),
                fixed(m.overlap_ms),
                fixed(m.exposed_comm_ms),
                fixed(m.overlap_pct, ".1f"),
                f"{m.optimizer_state_bytes / 2**20:.2f}",
            )
        )
    return rows


def summary_table(metrics: RunMetrics) -> Table:
    """Step time and overlap per mode (the same table goes to TensorBoard and the reports)."""
    table = Table(title="profile_overlap: step time and overlap per mode", box=box.SIMPLE_HEAVY)
    for header in summary_columns(metrics):
        table.add_column(header, justify="left" if header == "mode" else "right")
    for row in summary_rows(metrics):
        table.add_row(*row)
    if any(x.within_noise for x in summary_of(metrics).speedup_vs_first):
        noise = summary_of(metrics).noise
        rule = "each median inside the other's p10-p90"
        if noise and noise.num_blocks > 1:
            rule = f"the speedup's 95% interval over {noise.num_blocks} paired blocks contains 1"
        table.caption = f"*: within run-to-run noise of {next(iter(summary_of(metrics).modes))}'s step time ({rule})"
    return table


PHASE_COLUMNS = ("mode", "phase", "window ms", "comm ms", "hidden ms", "exposed comm ms", "compute ms")


def phase_rows(metrics: RunMetrics) -> list[tuple[str, ...]]:
    """The per-phase table's cells, one row per mode and phase, in PHASE_COLUMNS order (console, TensorBoard)."""
    return [
        (m.mode, p.phase, fixed(p.window_ms), fixed(p.comm_ms), fixed(p.hidden_ms), fixed(p.exposed_comm_ms), fixed(p.compute_ms))
        for m in summary_of(metrics).modes.values()
        for p in m.phases
    ]


def phase_table(metrics: RunMetrics) -> Table | None:
    """Each profiled mode's communication per phase: hidden behind the phase's compute, or exposed in its window."""
    rows = phase_rows(metrics)
    if not rows:
        return None
    table = Table(title="communication per phase (ms per profiled step, mean over ranks)", box=box.SIMPLE_HEAVY)
    for header in PHASE_COLUMNS:
        table.add_column(header, justify="left" if header in ("mode", "phase") else "right")
    for i, row in enumerate(rows):
        last = i + 1 == len(rows) or rows[i + 1][0] != row[0]
        first = i == 0 or rows[i - 1][0] != row[0]
        table.add_row(row[0] if first else "", *row[1:], end_section=last)
    return table


def noise_line(metrics: RunMetrics) -> str | None:
    """With --repeats: the 95% intervals over the blocks of each mode's median step time and speedup; else None."""
    noise = summary_of(metrics).noise
    if not noise or noise.num_blocks < 2:
        return None
    steps = ", ".join(f"{mode} {x.low:.2f}-{x.high:.2f}" for mode, x in noise.step_time_ms.items() if x)
    line = f"95% intervals over {noise.num_blocks} blocks per mode: median step ms {steps}"
    first = next(iter(summary_of(metrics).modes))
    speedups = ", ".join(f"{mode} {x.low:.3f}-{x.high:.3f}x" for mode, x in noise.speedup_vs_first.items() if x)
    return line + (f"; speedup vs {first} (paired by round) {speedups}" if speedups else "")


def yield_line(metrics: RunMetrics) -> str | None:
    """The overlap yield and the interference per phase, in one line; None without split and split-blocking."""
    s = summary_of(metrics)
    y = s.overlap_yield
    if y is None and not s.interference:
        return None
    parts = []
    if y is not None:
        share = f", {y.pct_of_comm:.1f}% of the comm" if y.pct_of_comm is not None else ""
        parts.append(f"overlap yield {y.ms:.2f} ms/step{share} ({y.mode} vs {y.baseline}{', within noise' if y.within_noise else ''})")
    if s.interference:
        parts.append("interference: " + ", ".join(f"{x.phase} {fixed(x.pct, '+.1f', '%')}" for x in s.interference))
    return "; ".join(parts)


def attribution_lines(metrics: RunMetrics) -> list[str]:
    """Each mode's collectives by the phase that issued them, one line per mode, then their bytes
    against the model's parameters; empty when no mode has the attribution."""
    if not any(x.phase_collectives for x in summary_of(metrics).modes.values()):
        return []
    lines = ["collectives by the phase that issued them (per profiled step, mean over ranks):"]
    lines += [f"  {modes.describe(x)}" for x in summary_of(metrics).modes.values()]
    line = modes.bytes_console_line(metrics)
    return lines + ([line] if line else [])


def workload_text(cfg: RunConfig) -> str:
    """The workload in a few words (records before --model were all mlp)."""
    if cfg.model == "transformer":
        return (
            f"transformer of K={cfg.layers} blocks, width {cfg.dim}, {cfg.heads} heads, sequence {cfg.seq_len}, "
            f"{cfg.dtype}, batch {cfg.batch}"
        )
    return f"K={cfg.layers} layers of {cfg.dim}x{cfg.dim} {cfg.dtype}, batch {cfg.batch}"


class TraceConsole(Console):
    """The console of every command: names read from traces reach the terminal as text. Markup and
    emoji codes are off (a kernel named `[/x]` or `:fire:` is shown, not parsed: `[/x]` used to end
    `analyze` with a MarkupError), and every string it renders, table cells and titles included,
    goes through core.terminal.printable (escape sequences and control characters stripped). Our own
    styling is given as style= or Text, never as markup."""

    def __init__(self, **kwargs) -> None:
        super().__init__(markup=False, emoji=False, **kwargs)

    def render_str(self, text: str, **kwargs) -> Text:
        return super().render_str(printable(text), **kwargs)

    def on_broken_pipe(self) -> None:
        """The reader of our output went away (`analyze DIR --json OUT | head`, `less` quit early): the
        rest of the text is dropped and the command goes on to write its files and ends as it would
        have. rich's own handler ends the process with 1 at once (before `--json` was written, or a
        run's folder finished), and redirects sys.stdout, which on a run's rank is its log."""
        self.quiet = True
        discard_output(self.file)


def make_console(*, file=None, width: int | None = None, highlight: bool = True) -> Console:
    """A TraceConsole on our output (`file`: rank_output.out()), that does not squeeze tables to
    80 columns when output goes to a file or pipe (`width`, default 160 there)."""
    file = file or rank_output.out()
    console = TraceConsole(file=file, width=width, highlight=highlight)
    if width is None and not console.is_terminal:
        console = TraceConsole(file=file, width=160, highlight=highlight)
    return console


def print_run_summary(metrics: RunMetrics, console: Console | None = None) -> None:
    console = console or make_console()
    cfg, env = metrics.config, metrics.env
    where = f"{env.world_size} ranks, {env.backend} ({env.device_type})"
    console.print(Text.assemble(("profile_overlap", "bold"), f" {cfg.mode} on {where}, {workload_text(cfg)}"))
    console.print(summary_table(metrics))

    busbw = [
        f"{name} " + ", ".join(f"{c.kind} {c.busbw_gbps.mean:.3g}" for c in s.collectives if c.busbw_gbps)
        for name, s in summary_of(metrics).modes.items()
        if any(c.busbw_gbps for c in s.collectives)
    ]
    if busbw:
        console.print("busbw GB/s (mean over ranks): " + "; ".join(busbw))
    if metrics.speedup:
        sp = metrics.speedup
        predicted = f"; ideal from the sequential mode's comm and compute: {sp.predicted:.2f}x" if sp.predicted else ""
        console.print(Text.assemble("split speedup over sequential (median step time): ", (f"{sp.measured:.2f}x", "bold"), predicted))
    line = noise_line(metrics)
    if line:
        console.print(line)
    phases = phase_table(metrics)
    if phases is not None:
        console.print(phases)
    for line in attribution_lines(metrics):
        console.print(line)
    line = yield_line(metrics)
    if line:
        console.print(line)
    for line in exposed.run_console_lines(metrics):
        console.print(line, highlight=False, markup=False)
    for check in metrics.all_checks():
        colour = "green" if check.passed else "red"
        console.print(check.describe(), style=colour)
    integrity.print_console(metrics, console)
    console.print(f"run folder: {metrics.run_dir}")
    run_dir = Path(metrics.run_dir)
    if (run_dir / REPORT_HTML).exists():
        console.print(f"report: {run_dir / REPORT_HTML} (self-contained; report.md beside it for pull requests)")
    console.print(f"TensorBoard: python -m profile_overlap tensorboard {run_dir.parent}")
