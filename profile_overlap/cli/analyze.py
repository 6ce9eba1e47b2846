"""`python -m profile_overlap analyze DIR`: overlap metrics of any folder of PyTorch profiler traces.

    python -m profile_overlap analyze runs/<run>/split
    python -m profile_overlap analyze traces/ --json overlap.json --steps 3:5 --hta-compat
    python -m profile_overlap analyze traces/ --tensorboard     # then: tensorboard --logdir traces
    python -m profile_overlap analyze traces/ --strict          # exit 1 when an integrity check fails

Prints one table per rank, then the collectives, the profiler steps and the cross-rank
wait/transfer split, then the integrity checks (a line per check that is not ok). Does not import torch,
except under torchrun (`torchrun --nnodes N --nproc-per-node M -m profile_overlap analyze DIR`), where
the files are spread over the job's ranks (analysis/cluster.py) and rank 0 prints and writes.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from profile_overlap.core.errors import UserError
from profile_overlap.core.io import write_json_atomic
from profile_overlap.render.integrity import console_lines as integrity_lines


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dir", type=Path, help="folder of trace files (*.json or *.json.gz, searched recursively)")
    parser.add_argument("--json", type=Path, metavar="OUT", help="also write the metrics record to OUT (schema in the README)")
    parser.add_argument(
        "--steps",
        metavar="A:B",
        type=parse_steps,
        help="only ProfilerStep#A up to but excluding #B (like a Python slice; A: or :B leave an end open; A alone is one step)",
    )
    parser.add_argument(
        "--hta-compat",
        action="store_true",
        help="drop the last profiler step of each rank, as Holistic Trace Analysis's get_comm_comp_overlap does by default",
    )
    parser.add_argument("--skip-bad", action="store_true", help="warn about unreadable or non-trace files and analyze the rest")
    parser.add_argument(
        "--strict",
        action="store_true",
        help="exit with status 1 when any integrity check is an error (after the normal output), for CI pipelines",
    )
    parser.add_argument(
        "--tensorboard",
        type=Path,
        nargs="?",
        const=True,
        metavar="OUT",
        help="also write the Overlap tab's data (metrics.json, timeline.json) to OUT (default: DIR/overlap), "
        "for `tensorboard --logdir DIR`",
    )


def parse_steps(text: str) -> tuple[int | None, int | None]:
    try:
        if ":" not in text:
            step = int(text)
            return step, step + 1
        lo, hi = text.split(":", 1)
        return (int(lo) if lo.strip() else None, int(hi) if hi.strip() else None)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not A:B with whole step numbers (e.g. 3:5, 3:, :5 or 4)") from None


def _fmt(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def _bytes(n: int | None) -> str:
    if n is None:
        return "-"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:,.2f} {unit}"
    return f"{n} B"


def render(analysis, console) -> None:
    """Tables from the analysis record; nothing is recomputed here."""
    from rich.table import Table

    waits = {w.rank: w for w in analysis.waits}
    title = f"Overlap per rank: {analysis.source} (world size {analysis.world_size})"
    if analysis.hta_compat:
        title += ", HTA-compatible (last step dropped)"
    t = Table(title=title, title_justify="left")
    for col in ("rank", "device", "comm_us", "compute_us", "overlap_us", "exposed_comm_us", "overlap %", "wait_us", "transfer_us"):
        t.add_column(col, justify="left" if col == "device" else "right")
    for r in analysis.ranks:
        w = waits.get(r.rank)
        mark = " (slowest)" if r.rank == analysis.slowest_rank else ""
        t.add_row(
            f"{r.rank}{mark}",
            r.device,
            _fmt(r.comm_us),
            _fmt(r.compute_us),
            _fmt(r.overlap_us),
            _fmt(r.exposed_comm_us),
            _fmt(r.overlap_pct, 2),
            _fmt(w.wait_us if w and w.matched else None),
            _fmt(w.transfer_us if w and w.matched else None),
        )
    console.print(t)

    t = Table(title="Collectives per rank (totals; algbw = S/t, busbw = algbw * factor(kind, n), as nccl-tests)", title_justify="left")
    for col in ("rank", "kind", "count", "n", "bytes", "dur_us", "algbw GB/s", "busbw GB/s"):
        t.add_column(col, justify="left" if col == "kind" else "right")
    for r in analysis.ranks:
        for c in r.collectives:
            t.add_row(
                str(r.rank),
                c.kind,
                str(c.count),
                str(c.group_size or "-"),
                _bytes(c.nbytes),
                _fmt(c.dur_us),
                _fmt(c.algbw_gbps, 2),
                _fmt(c.busbw_gbps, 2),
            )
    console.print(t)

    t = Table(title="Profiler steps (each metric clipped to the ProfilerStep#N window)", title_justify="left")
    for col in ("rank", "step", "step_us", "comm_us", "compute_us", "overlap_us", "exposed_comm_us", "overlap %"):
        t.add_column(col, justify="right")
    for r in analysis.ranks:
        for s in r.steps:
            t.add_row(
                str(r.rank),
                str(s.step),
                _fmt(s.step_us),
                _fmt(s.comm_us),
                _fmt(s.compute_us),
                _fmt(s.overlap_us),
                _fmt(s.exposed_comm_us),
                _fmt(s.overlap_pct, 2),
            )
    if t.row_count:
        console.print(t)
    else:
        console.print("No ProfilerStep#N annotations: per-step metrics need prof.step() in the training loop.")

    if analysis.slowest_rank is not None:
        console.print(
            f"Wait vs transfer: each collective call is matched across ranks by process group, kind and order; "
            f"transfer = the fastest rank's duration, wait = the rest. Rank {analysis.slowest_rank} waits least: "
            f"the others wait for it."
        )
    if analysis.exposed is not None:
        from profile_overlap.render.exposed import console_lines

        for line in console_lines("these traces", analysis.exposed):
            console.print(line, markup=False)
    for r in analysis.ranks:
        for note in r.notes:
            console.print(f"note: {note}", style="yellow")
    styles = {"error": "bold red", "warning": "yellow"}
    for line in integrity_lines(analysis.integrity.checks):
        status = next((s for s in styles if line.startswith(f"integrity: {s.upper()}")), None)
        console.print(line, style=styles.get(status, ""), markup=False)


def main(args: argparse.Namespace) -> int:
    from rich.console import Console

    from profile_overlap.analysis.folder import analyze_dir
    from profile_overlap.analysis.record import to_json

    def warn(message: str) -> None:
        print(f"warning: {message}", file=sys.stderr)

    from profile_overlap.analysis import cluster

    options = {"hta_compat": args.hta_compat, "steps": args.steps, "skip_bad": args.skip_bad}
    if cluster.launched_by_torchrun():
        # Spread over the torchrun job's ranks: rank 0 prints and writes, the others stay quiet.
        leader = cluster.is_leader()
        try:
            analysis = cluster.analyze_dir_cluster(args.dir, warn=warn if leader else None, **options)
        except UserError:
            if leader:
                raise
            return 2
        if analysis is None:
            return 0
    else:
        analysis = analyze_dir(args.dir, warn=warn, **options)
    width = None if sys.stdout.isatty() else int(os.environ.get("COLUMNS", 140))
    render(analysis, Console(width=width, highlight=False))
    if args.json:
        try:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            write_json_atomic(args.json, to_json(analysis), indent=1)
        except OSError as err:
            raise UserError(f"cannot write {args.json}: {err.strerror}; pick a writable path for --json") from None
        print(f"wrote {args.json}")
    if args.tensorboard:
        from profile_overlap.tb_plugin.export import write_plugin_data

        out = write_plugin_data(args.dir / "overlap" if args.tensorboard is True else args.tensorboard, analysis)
        print(f"wrote {out}/metrics.json and timeline.json: `tensorboard --logdir {out.parent}` shows them in the Overlap tab")
    errors = analysis.integrity.errors
    if args.strict and errors:
        print(f"analyze --strict: {len(errors)} integrity check(s) failed: {', '.join(c.name for c in errors)}", file=sys.stderr)
        return 1
    return 0
