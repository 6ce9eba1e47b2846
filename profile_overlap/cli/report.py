"""`python -m profile_overlap report RUN_DIR`: the report of a finished run, for a review or a PR.

    python -m profile_overlap report runs/<run>                          # report.html, report.md, timeline.png, report.json
    python -m profile_overlap report runs/<run> --format html --out /tmp/review
    python -m profile_overlap report --compare runs/<before> runs/<after>
    python -m profile_overlap report runs/<run> --fail-if "overlap_pct<60" --fail-if "speedup<1.1"   # a CI gate

A run writes its report itself when it finishes; this command rewrites it (or writes it
elsewhere, or compares two runs). `--fail-if` exits with status 1, naming the condition, when a
condition holds. Does not import torch.
"""

from __future__ import annotations

import argparse
import math
import operator
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

from profile_overlap.core.errors import UserError
from profile_overlap.core.rank_output import say, tell

_OPS = {"<=": operator.le, ">=": operator.ge, "==": operator.eq, "!=": operator.ne, "<": operator.lt, ">": operator.gt}
_CONDITION = re.compile(r"^\s*([A-Za-z_]+)\s*(<=|>=|==|!=|<|>)\s*([-+0-9.eE]+)\s*$")


@dataclass(frozen=True)
class Condition:
    name: str
    op: str
    value: float
    text: str

    def holds(self, actual: float) -> bool:
        return _OPS[self.op](actual, self.value)


def parse_condition(text: str) -> Condition:
    from profile_overlap.record.summary import HEADLINE_NAMES

    found = _CONDITION.match(text)
    if not found:
        raise argparse.ArgumentTypeError(f'{text!r} is not NAME<VALUE (also <=, >, >=, ==, !=), e.g. "overlap_pct<60"')
    name, op, value = found.groups()
    if name not in HEADLINE_NAMES:
        raise argparse.ArgumentTypeError(f"unknown metric {name!r} in {text!r}: use one of {', '.join(HEADLINE_NAMES)}")
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} in {text!r} is not a number") from None
    return Condition(name=name, op=op, value=number, text=text.strip())


def _formats(text: str) -> tuple[str, ...]:
    from profile_overlap.render.write import FORMATS

    chosen = tuple(f.strip() for f in text.split(",") if f.strip())
    bad = [f for f in chosen if f not in FORMATS]
    if bad or not chosen:
        raise argparse.ArgumentTypeError(f"{text!r}: formats are a comma-separated list of {', '.join(FORMATS)}")
    return chosen


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from profile_overlap.record.summary import HEADLINE_NAMES

    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = (
        "Examples:\n"
        "  python -m profile_overlap report runs/<run>\n"
        "  python -m profile_overlap report --compare runs/<before> runs/<after>\n"
        '  python -m profile_overlap report runs/<run> --fail-if "overlap_pct<60" --fail-if "speedup<1.1"\n\n'
        + textwrap.fill("--fail-if names: " + ", ".join(HEADLINE_NAMES), width=110)
        + '\n(defined in docs/metrics.md, "Headline names").'
    )
    parser.add_argument("run_dir", type=Path, nargs="?", metavar="RUN_DIR", help="a run folder (runs/<run>)")
    parser.add_argument(
        "--compare",
        type=Path,
        nargs=2,
        metavar=("RUN_A", "RUN_B"),
        help="before/after report of two runs (A before, B after) instead of one run's report",
    )
    parser.add_argument(
        "--format", type=_formats, default=("html", "md", "json"), metavar="html,md,json", help="which files to write (default: all three)"
    )
    parser.add_argument(
        "--out", type=Path, metavar="DIR", help="folder to write into (default: the run folder; with --compare, the current folder)"
    )
    parser.add_argument(
        "--perfetto",
        action="store_true",
        help="also write perfetto.json.gz beside the report: every rank on one clock for the Perfetto UI (see the perfetto command)",
    )
    parser.add_argument(
        "--fail-if",
        type=parse_condition,
        action="append",
        default=[],
        metavar="COND",
        help='exit 1 when COND holds, e.g. "overlap_pct<60" (repeatable; with --compare, checked on RUN_B)',
    )


def main(args: argparse.Namespace) -> int:
    from profile_overlap.record.folder import load_run
    from profile_overlap.render import write

    if args.compare and args.run_dir:
        raise UserError("give either RUN_DIR or --compare RUN_A RUN_B, not both")
    if not args.compare and not args.run_dir:
        raise UserError("no run folder given: profile_overlap report RUN_DIR (or --compare RUN_A RUN_B)")
    if args.compare and args.perfetto:
        raise UserError("--perfetto writes one run's trace: leave out --compare, or run `profile_overlap perfetto RUN` per run")
    from profile_overlap.api.job import ensure_record, report_run

    # A job profiled with profile_overlap.trace_handler gets its record built here when it has none.
    if args.compare:
        a, gated = (load_run(ensure_record(Path(p))) for p in args.compare)
        written = write.write_compare(a, gated, out=args.out, formats=args.format)
    else:
        if args.perfetto:  # first, so that the report points at it
            _write_perfetto(ensure_record(Path(args.run_dir)), args.out)
        gated = report_run(Path(args.run_dir))
        written = write.write_run(gated, out=args.out, formats=tuple(args.format))
    for path in written:
        say(f"wrote {path}")
    assert gated.metrics.summary is not None  # load_run reads records with their summary
    return gate(gated.metrics.summary.headline, args.fail_if, run_name=gated.name)


def _write_perfetto(run_dir: Path, out: Path | None) -> None:
    from profile_overlap.core.files import PERFETTO_TRACE
    from profile_overlap.tools.perfetto import write_perfetto
    from profile_overlap.tools.perfetto.source import find_source

    folder = out or run_dir
    folder.mkdir(parents=True, exist_ok=True)
    say(f"wrote {write_perfetto(find_source(run_dir), folder / PERFETTO_TRACE).path}")


def gate(values: dict[str, float | None], conditions: list[Condition], *, run_name: str) -> int:
    """1 when any condition holds (each one named on stderr), else 0. A condition on a number the
    run does not have is a user error: a gate must not pass by accident."""
    failed = 0
    for cond in conditions:
        actual = values[cond.name]
        if actual is None and cond.name == "max_error" and values.get("failed_checks"):
            actual = math.inf  # a check compared values that are not finite: larger than any bound
        if actual is None:
            raise UserError(
                f"--fail-if {cond.text!r}: run {run_name} has no {cond.name} (speedup, predicted_speedup and the overlap_yield "
                "names need a --mode compare run)"
            )
        if cond.holds(actual):
            tell(f"profile_overlap report: FAIL: {cond.text} holds for {run_name} ({cond.name} = {actual:.4g})")
            failed += 1
        else:
            # Through say: a reader gone from stdout (`report ... | head`) does not turn a pass into exit 1.
            say(f"profile_overlap report: pass: {cond.text} does not hold ({cond.name} = {actual:.4g})")
    return 1 if failed else 0
