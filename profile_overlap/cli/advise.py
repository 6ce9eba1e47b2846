"""`python -m profile_overlap advise RUN_OR_JOB_DIR`: what to change, ranked by predicted gain, each
prediction checked by running it with --verify (our runs).

    python -m profile_overlap advise runs/<run>
    python -m profile_overlap advise runs/<run> --top 5 --json advice.json
    python -m profile_overlap advise runs/<run> --verify --repeats 5      # run the top item against the run
    python -m profile_overlap advise runs/<run> --calibrate               # measure the interference a change pays

Prints the top items; writes RUN_DIR/advice.json and rewrites the report with its "What to change"
section.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def _count(name: str, least: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} {text!r} is not a whole number") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"{name} {value} is out of range: give {least} or more")
        return value

    return parse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "run_dir", type=Path, metavar="RUN_OR_JOB_DIR", help="a finished run folder (runs/<run>) or a job folder with traces"
    )
    parser.add_argument("--top", type=_count("--top", 1), metavar="N", help="keep the N best items (default: all)")
    parser.add_argument("--json", type=Path, metavar="OUT", help="also write the record here")
    parser.add_argument(
        "--calibrate",
        action="store_true",
        help="our runs: where a mode measured no interference, measure it in one profiled run of its best change that adds overlap",
    )
    parser.add_argument(
        "--verify", action="store_true", help="our runs: run the top verifiable item against the run's config in alternating blocks"
    )
    parser.add_argument(
        "--verify-items", type=_count("--verify-items", 1), default=1, metavar="K", help="with --verify: how many items to run (default: 1)"
    )
    parser.add_argument(
        "--repeats", type=_count("--repeats", 2), default=5, metavar="R", help="with --verify: blocks per side, alternating (default: 5)"
    )


def main(args: argparse.Namespace) -> int:
    from profile_overlap.render.advice import print_advice
    from profile_overlap.render.console import make_console
    from profile_overlap.render.write import write as write_report
    from profile_overlap.tools import advise

    result = advise.advise(args.run_dir, top=args.top, calibrate=args.calibrate)
    if args.verify:
        from profile_overlap.tools.advise import verify as advise_verify

        result = advise_verify.verify(result, repeats=args.repeats, items=args.verify_items)
    advise.write(result, json_out=args.json)
    print_advice(result, make_console())
    if result.is_job:
        from profile_overlap.api.job import write_report as write_job_report

        job = write_job_report(Path(result.source))
        assert job is not None  # advise found a job record there
        written = job[1]
    else:
        from profile_overlap.render.tensorboard import write_run

        written = write_report(Path(result.source))
        write_run(Path(result.source))
    print(f"report with its What to change section: {written[0]}")
    return 0
