"""Console renderer: the run summary on rank 0, from the metrics record only."""

from __future__ import annotations

from pathlib import Path

from rich import box
from rich.console import Console
from rich.table import Table

from profile_overlap.core import rank_output
from profile_overlap.core.files import REPORT_HTML
from profile_overlap.record.metrics import RunMetrics


def _fmt(value: float | None, spec: str = ".2f", unit: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{unit}"


SUMMARY_COLUMNS = (
    "mode",
    "step median ms",
    "p10-p90 ms",
    "comm ms",
    "compute ms",
    "overlap ms",
    "exposed comm ms",
    "overlap %",
    "opt state MiB/rank",
)


def summary_rows(metrics: RunMetrics) -> list[tuple[str, ...]]:
    """The summary table's cells, one row per mode, in SUMMARY_COLUMNS order (console, TensorBoard, reports)."""
    rows = []
    for m in metrics.summary.modes.values():
        st = metrics.modes[m.mode].step_time
        spread = f"{st.p10_ms:.2f}-{st.p90_ms:.2f}" if st.p10_ms is not None else "-"
        rows.append(
            (
                m.mode,
                _fmt(st.median_ms),
                spread,
                _fmt(m.comm_ms),
                _fmt(m.compute_ms),
                _fmt(m.overlap_ms),
                _fmt(m.exposed_comm_ms),
                _fmt(m.overlap_pct, ".1f"),
                f"{m.optimizer_state_bytes / 2**20:.2f}",
            )
        )
    return rows


def summary_table(metrics: RunMetrics) -> Table:
    """Step time and overlap per mode (the same table goes to TensorBoard and the reports)."""
    table = Table(title="profile_overlap: step time and overlap per mode", box=box.SIMPLE_HEAVY)
    for header in SUMMARY_COLUMNS:
        table.add_column(header, justify="left" if header == "mode" else "right")
    for row in summary_rows(metrics):
        table.add_row(*row)
    return table


def make_console() -> Console:
    """A console that does not squeeze tables to 80 columns when output goes to a file or pipe."""
    console = Console(file=rank_output.out())
    if not console.is_terminal:
        console = Console(file=rank_output.out(), width=160)
    return console


def print_run_summary(metrics: RunMetrics, console: Console | None = None) -> None:
    console = console or make_console()
    cfg, env = metrics.config, metrics.env
    console.print(
        f"[bold]profile_overlap[/bold] {cfg['mode']} on {env['world_size']} ranks, {env['backend']} "
        f"({env['device_type']}), K={cfg['layers']} layers of {cfg['dim']}x{cfg['dim']} {cfg['dtype']}, batch {cfg['batch']}"
    )
    console.print(summary_table(metrics))

    busbw = [
        f"{name} " + ", ".join(f"{c.kind} {c.busbw_gbps.mean:.3g}" for c in s.collectives if c.busbw_gbps)
        for name, s in metrics.summary.modes.items()
        if any(c.busbw_gbps for c in s.collectives)
    ]
    if busbw:
        console.print("busbw GB/s (mean over ranks): " + "; ".join(busbw))
    if metrics.speedup:
        sp = metrics.speedup
        predicted = f"; ideal from the sequential mode's comm and compute: {sp.predicted:.2f}x" if sp.predicted else ""
        console.print(f"split speedup over sequential (median step time): [bold]{sp.measured:.2f}x[/bold]{predicted}")
    for check in metrics.all_checks():
        colour = "green" if check.passed else "red"
        console.print(f"[{colour}]{check.describe()}[/{colour}]")
    console.print(f"run folder: {metrics.run_dir}")
    run_dir = Path(metrics.run_dir)
    if (run_dir / REPORT_HTML).exists():
        console.print(f"report: {run_dir / REPORT_HTML} (self-contained; report.md beside it for pull requests)")
    console.print(f"TensorBoard: python -m profile_overlap tensorboard {run_dir.parent}")
