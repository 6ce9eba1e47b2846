"""Console renderer: the run summary on rank 0, from the metrics record only."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table

from profile_overlap.metrics import RunMetrics


def _fmt(value: float | None, spec: str = ".2f", unit: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{unit}"


def summary_table(metrics: RunMetrics) -> Table:
    """Step time and overlap per mode (the same table goes to TensorBoard and the reports)."""
    table = Table(title="profile_overlap: step time and overlap per mode", box=box.SIMPLE_HEAVY)
    for header in ("mode", "step median ms", "p10-p90 ms", "comm ms", "compute ms", "overlap ms",
                   "exposed comm ms", "overlap %", "opt state MB/rank"):
        table.add_column(header, justify="left" if header == "mode" else "right")
    for name, mode in metrics.modes.items():
        st = mode.step_time
        comm = compute = overlap = exposed = pct = None
        if mode.analysis:
            # Per profiled step, averaged over ranks: the analysis record's per-rank totals cover all profiled steps.
            ranks = mode.analysis["ranks"]
            steps = max(len(r["steps"]) for r in ranks) or 1
            comm, compute, overlap, exposed = (
                sum(r[k] for r in ranks) / len(ranks) / steps / 1e3 for k in ("comm_us", "compute_us", "overlap_us", "exposed_comm_us")
            )
            pct = 100 * overlap / comm if comm else None
        opt_mb = max(m.optimizer_state_bytes for m in mode.memory) / 2**20
        spread = f"{st.p10_ms:.2f}-{st.p90_ms:.2f}" if st.times_ms else "-"
        table.add_row(name, _fmt(st.median_ms), spread, _fmt(comm), _fmt(compute),
                      _fmt(overlap), _fmt(exposed), _fmt(pct, ".1f"), f"{opt_mb:.2f}")
    return table


def make_console() -> Console:
    """A console that does not squeeze tables to 80 columns when output goes to a file or pipe."""
    console = Console()
    if not console.is_terminal:
        console = Console(width=160)
    return console


def print_run_summary(metrics: RunMetrics, console: Console | None = None) -> None:
    console = console or make_console()
    cfg, env = metrics.config, metrics.env
    console.print(
        f"[bold]profile_overlap[/bold] {cfg['mode']} on {env['world_size']} ranks, {env['backend']} "
        f"({env['device_type']}), K={cfg['layers']} layers of {cfg['dim']}x{cfg['dim']} {cfg['dtype']}, batch {cfg['batch']}"
    )
    console.print(summary_table(metrics))
    if metrics.speedup:
        sp = metrics.speedup
        predicted = f"; ideal from the sequential mode's comm and compute: {sp.predicted:.2f}x" if sp.predicted else ""
        console.print(f"split speedup over sequential (median step time): [bold]{sp.measured:.2f}x[/bold]{predicted}")
    for check in metrics.all_checks():
        colour = "green" if check.passed else "red"
        console.print(f"[{colour}]{check.describe()}[/{colour}]")
    console.print(f"run folder: {metrics.run_dir}")
