"""`python -m profile_overlap perfetto RUN_OR_JOB_OR_TRACE_DIR`: one trace file of all ranks for Perfetto.

    python -m profile_overlap perfetto runs/<run>                  # runs/<run>/perfetto.json.gz, every mode
    python -m profile_overlap perfetto runs/<run> --mode split --steps 3:5 --out /tmp/split.json.gz
    python -m profile_overlap perfetto logs/                        # the latest job of a trace_handler log_dir
    python -m profile_overlap perfetto traces/ --open               # serve it with a local Perfetto UI

Every rank is a process "rank R (host)" on the clock the analysis aligned the ranks to, with tracks
for its steps, phases, collective calls, compute and hidden and exposed communication, a counter of
collectives in flight, and arrows joining each call across ranks. Does not import torch.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from profile_overlap.cli.analyze import parse_steps
from profile_overlap.core.errors import UserError
from profile_overlap.core.rank_output import tell
from profile_overlap.core.terminal import printable


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "dir", type=Path, metavar="RUN_OR_JOB_OR_TRACE_DIR", help="a run folder, a job folder (or its log_dir), or a folder of traces"
    )
    parser.add_argument("--mode", metavar="M", help="only this mode of a run (default: every mode, one after the other)")
    parser.add_argument(
        "--steps", metavar="A:B", type=parse_steps, help="only ProfilerStep#A up to but excluding #B, as in analyze (a smaller file)"
    )
    parser.add_argument(
        "--out",
        type=Path,
        metavar="FILE",
        help="where to write (default: perfetto.json.gz in a run or job folder; ./<dir>.perfetto.json.gz for traces)",
    )
    parser.add_argument(
        "--open", action="store_true", help="then serve it with a local Perfetto UI on 127.0.0.1 and print the URL (Ctrl+C stops)"
    )


def main(args: argparse.Namespace) -> int:
    from profile_overlap.tools.perfetto import write_perfetto
    from profile_overlap.tools.perfetto.source import find_source

    source = find_source(args.dir, mode=args.mode)
    out = args.out or source.default_out(args.mode)
    _check_writable(out)

    def warn(message: str) -> None:
        tell(f"warning: {printable(message)}")

    result = write_perfetto(source, out, steps=args.steps, warn=warn)
    ratio = result.size_bytes / result.traces_bytes if result.traces_bytes else float("nan")
    print(
        f"wrote {result.path} ({_size(result.size_bytes)}, {ratio:.2f}x the {_size(result.traces_bytes)} of traces): "
        f"{len(result.ranks)} ranks, modes {', '.join(result.modes)}, {result.slices:,} slices "
        f"({result.moved:,} moved to extra tracks so none is dropped), {result.arrows:,} arrows"
        + (f", {result.dropped_flows:,} of the traces' flows left out (an end missing)" if result.dropped_flows else "")
    )
    if args.open:
        from profile_overlap.tools.perfetto.serve import serve

        return serve(result.path)
    print(f"open it: python -m profile_overlap perfetto {args.dir} --open, or drag it onto https://ui.perfetto.dev")
    return 0


def _size(nbytes: int) -> str:
    return f"{nbytes / 1e6:,.1f} MB" if nbytes >= 1e6 else f"{nbytes / 1e3:,.1f} kB"


def _check_writable(out: Path) -> None:
    """One line before any work when the file cannot be written."""
    if out.is_dir():
        raise UserError(f"--out {out} is a folder: give a file name, e.g. {out / 'perfetto.json.gz'}")
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():
        raise UserError(f"cannot write {out}: {parent} does not exist; create it or pick another --out")
    import os

    if not os.access(parent, os.W_OK) or (out.exists() and not os.access(out, os.W_OK)):
        raise UserError(f"cannot write {out}: permission denied; pick a writable --out")
    from profile_overlap.tools.perfetto import is_merged

    if out.exists() and not is_merged(out):
        raise UserError(f"{out} exists and is not a merged trace of ours: it is left as it is; remove it or pick another --out")
