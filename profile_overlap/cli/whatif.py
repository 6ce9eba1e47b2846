"""`python -m profile_overlap whatif RUN_DIR`: every mode's step predicted at other world sizes and
link bandwidths, from the run's measured compute and collectives (tools/whatif/).

    python -m profile_overlap whatif runs/<run>
    python -m profile_overlap whatif runs/<run> --world-size 8,64,512 --link-gbps 50,450 --latency-us 5 --json whatif.json
    python -m profile_overlap whatif runs/<run> --fit runs/<bench-collectives run>      # α and B fitted to a benchmark
    python -m profile_overlap whatif runs/<run> --fit run                               # ... or to the run's own collectives

Prints the table, the crossovers and the self-replay error; writes RUN_DIR/whatif.json and
RUN_DIR/whatif.png, and rewrites the run's report with its "What if" section.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def _list(cast, name: str, *, least: float, strict: bool):
    def parse(text: str):
        try:
            values = tuple(cast(v) for v in text.split(",") if v.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} {text!r} is not a comma-separated list of numbers") from None
        if not values:
            raise argparse.ArgumentTypeError(f"{name} is empty: give one value or more, e.g. {name} 8,64")
        bad = [v for v in values if (v <= least if strict else v < least)]
        if bad:
            bound = f"above {least:g}" if strict else f"{least:g} or more"
            raise argparse.ArgumentTypeError(f"{name} {bad[0]:g} is out of range: every value must be {bound}")
        return tuple(sorted(set(values)))

    return parse


def _positive(name: str):
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} {text!r} is not a number") from None
        if value < 0 or (name == "--compute-scale" and value == 0):
            raise argparse.ArgumentTypeError(
                f"{name} {value:g} is out of range: give a {'positive' if name == '--compute-scale' else 'non-negative'} number"
            )
        return value

    return parse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a finished run folder (runs/<run>) with profiled steps")
    parser.add_argument(
        "--world-size",
        type=_list(int, "--world-size", least=2, strict=False),
        default=(8, 64, 512),
        metavar="N,N,...",
        help="target world sizes, 2 or more (default: 8,64,512)",
    )
    parser.add_argument(
        "--link-gbps",
        type=_list(float, "--link-gbps", least=0, strict=True),
        default=(50.0, 450.0),
        metavar="B,B,...",
        help="link (bus) bandwidths B in GB/s (default: 50,450)",
    )
    parser.add_argument(
        "--latency-us", type=_positive("--latency-us"), default=5.0, metavar="A", help="α: latency per ring step in µs (default: 5)"
    )
    parser.add_argument(
        "--compute-scale",
        type=_positive("--compute-scale"),
        default=1.0,
        metavar="X",
        help="multiply every measured compute time by X (0.5: hardware twice as fast) (default: 1)",
    )
    parser.add_argument(
        "--fit",
        metavar="BENCH|run",
        help="fit α and B to a bench-collectives result (its bench.json or run folder), or to the run's own collectives (`run`)",
    )
    parser.add_argument("--json", type=Path, metavar="OUT", help="also write the record here")


def main(args: argparse.Namespace) -> int:
    from profile_overlap.record.whatif import WHATIF_PNG
    from profile_overlap.render import whatif as render
    from profile_overlap.render.console import make_console
    from profile_overlap.render.write import write as write_report
    from profile_overlap.tools import whatif

    result = whatif.whatif(
        args.run_dir,
        world_sizes=args.world_size,
        link_gbps=args.link_gbps,
        latency_us=args.latency_us,
        compute_scale=args.compute_scale,
        fit=args.fit,
    )
    whatif.write(result, json_out=args.json)
    png = render.save_png(result, Path(result.run_dir) / WHATIF_PNG)
    render.print_result(result, make_console(), png=png)
    written = write_report(Path(result.run_dir))
    print(f"report with its What if section: {written[0]}")
    return 0
