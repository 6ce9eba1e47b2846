"""`sweep`: the run flags plus --vary, parsed into a SweepConfig, then launched (tools/sweep.py runs it)."""

from __future__ import annotations

import argparse

from profile_overlap.cli import run as run_cli
from profile_overlap.core.errors import UserError
from profile_overlap.run import config as run_config
from profile_overlap.tools.sweep import KNOBS, SweepConfig, parse_vary, run_rank


def add_arguments(parser: argparse.ArgumentParser) -> None:
    run_cli.add_arguments(parser)
    parser.description = "Run the sequential/split compare for each point of a grid in one job, and report where the split starts to win."
    parser.epilog = (
        "Examples:\n"
        "  torchrun --standalone --nproc-per-node 4 -m profile_overlap sweep --vary dim=256,512,1024,2048\n"
        "  python -m profile_overlap sweep --nproc-per-node 2 --vary dim=128,256 --vary layers=4,8"
    )
    parser.add_argument(
        "--vary",
        action="append",
        default=[],
        metavar="KNOB=V1,V2,...",
        help="a knob and its values (repeatable; the grid is their product). Knobs: " + ", ".join(KNOBS),
    )


def from_args(args: argparse.Namespace) -> SweepConfig:
    vary = parse_vary(args.vary)
    if args.mode != "compare":
        raise UserError(f"a sweep always compares both modes: drop --mode {args.mode}")
    try:
        sweep = SweepConfig(base=run_config.from_args(args, run_config.Config), vary=vary)
        sweep.point_configs()  # a bad value (say dim=0) fails here, before any rank starts
    except ValueError as err:
        raise UserError(str(err)) from None
    if not sweep.base.profile:
        raise UserError("a sweep needs the profiler for overlap and exposed communication: drop --no-profile")
    return sweep


def main(args: argparse.Namespace) -> int:
    from profile_overlap.run import launch

    return launch.launch_or_run(from_args(args), entry=run_rank, command="sweep")
