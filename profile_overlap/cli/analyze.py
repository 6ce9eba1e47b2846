"""`python -m profile_overlap analyze DIR`: overlap metrics of any folder of PyTorch profiler traces.

    python -m profile_overlap analyze runs/<run>/split
    python -m profile_overlap analyze traces/ --json overlap.json --steps 3:5 --hta-compat
    python -m profile_overlap analyze traces/ --tensorboard     # then: tensorboard --logdir traces
    python -m profile_overlap analyze traces/ --strict          # exit 1 when an integrity check fails

Prints one table per rank, then the collectives, one line counting the profiler steps (their rows
with --per-step) and the cross-rank wait/transfer split, then the integrity checks (a line per check that is not ok). Does not import torch,
except under torchrun (`torchrun --nnodes N --nproc-per-node M -m profile_overlap analyze DIR`), where
the files are spread over the job's ranks (analysis/cluster.py) and rank 0 prints and writes.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
from pathlib import Path

from profile_overlap.core.errors import UserError
from profile_overlap.core.io import write_bytes_atomic
from profile_overlap.core.rank_output import tell
from profile_overlap.core.terminal import printable


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dir", type=Path, help="folder of trace files (*.json or *.json.gz, searched recursively)")
    parser.add_argument("--json", type=Path, metavar="OUT", help="also write the metrics record to OUT (schema in docs/outputs.md)")
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
    parser.add_argument(
        "--per-rank",
        action="store_true",
        help="print the full per-rank and collective tables (by default, above 8 ranks, each number's spread "
        "over the ranks; --json OUT also writes the tables to OUT's .ranks.csv and .steps.csv)",
    )
    parser.add_argument(
        "--per-step",
        action="store_true",
        help="also print a row per rank and profiled step (by default one line counts the steps; "
        "--json OUT writes the rows to OUT's .steps.csv)",
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


def main(args: argparse.Namespace) -> int:
    """The command, with Python's cyclic garbage collector paused: the analysis builds about a million
    objects that all live to the end (the ranks' results, the record), and each of the collector's
    passes walked them to find no cycle (80 ms of the parent's 0.9 s at 1,024 ranks). The workers, forked
    from here, run paused too: a file's analysis leaves no cycle behind (gc.collect() finds none after
    512 files), and the 1 GB trace peaks the same (183 MiB against 181)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _analyze(args)
    finally:
        if collecting:
            gc.enable()


def _analyze(args: argparse.Namespace) -> int:
    from profile_overlap.analysis.folder import analyze_dir
    from profile_overlap.analysis.options import AnalysisOptions
    from profile_overlap.analysis.record import analysis_record, console_facts, record_json
    from profile_overlap.render import analysis_console
    from profile_overlap.render.console import make_console
    from profile_overlap.render.rank_tables import csv_paths, write_tables

    def warn(message: str) -> None:
        tell(f"warning: {printable(message)}")

    from profile_overlap.analysis import cluster

    # Without --tensorboard nothing draws the ranks' timelines: they are not made.
    options = AnalysisOptions(hta_compat=args.hta_compat, steps=args.steps, skip_bad=args.skip_bad, timeline=bool(args.tensorboard))
    if cluster.launched_by_torchrun():
        # Spread over the torchrun job's ranks: rank 0 prints and writes, the others stay quiet.
        leader = cluster.is_leader()
        try:
            analysis = cluster.analyze_dir_cluster(args.dir, options, warn=warn if leader else None)
        except UserError:
            if leader:
                raise
            return 2
        if analysis is None:
            return 0
    else:
        analysis = analyze_dir(args.dir, options, warn=warn)
    record = analysis_record(analysis, replay=False)  # the --json file gets the replay steps as it is written
    width = None if sys.stdout.isatty() else int(os.environ.get("COLUMNS", 140))
    tables = "in {} and {}".format(*csv_paths(args.json)) + ", or pass --per-rank" if args.json else ""
    rows_at = str(csv_paths(args.json)[1]) if args.json else ""
    console = make_console(file=sys.stdout, width=width, highlight=False)
    shown = {"per_rank": args.per_rank, "per_step": args.per_step, "tables": tables, "steps_csv": rows_at}
    analysis_console.render(record, console, facts=console_facts(analysis), **shown)
    if args.json:
        try:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            write_bytes_atomic(args.json, record_json(analysis, record))
            ranks_csv, steps_csv = write_tables(record, args.json)
        except OSError as err:
            raise UserError(f"cannot write {args.json}: {err.strerror}; pick a writable path for --json") from None
        console.print(f"wrote {args.json}, {ranks_csv.name} and {steps_csv.name}", soft_wrap=True)
    if args.tensorboard:
        from profile_overlap.analysis.record import folder_metrics, timeline_of
        from profile_overlap.tb_plugin.export import FOREIGN_MODE, write_plugin_data

        out_dir = args.dir / "overlap" if args.tensorboard is True else args.tensorboard
        out = write_plugin_data(out_dir, folder_metrics(analysis, out_dir=str(out_dir)), timeline_of({FOREIGN_MODE: analysis}))
        shown_in = f"`tensorboard --logdir {out.parent}` shows them in the Overlap tab"
        console.print(f"wrote {out}/metrics.json and timeline.json: {shown_in}", soft_wrap=True)
    errors = analysis.integrity.errors
    if args.strict and errors:
        tell(f"analyze --strict: {len(errors)} integrity check(s) failed: {', '.join(c.name for c in errors)}")
        return 1
    return 0
