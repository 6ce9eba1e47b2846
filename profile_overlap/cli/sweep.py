"""`sweep`: the run flags plus --vary, parsed into a SweepConfig, then launched (tools/sweep/ runs it)."""

from __future__ import annotations

import argparse

from profile_overlap.cli import run as run_cli
from profile_overlap.core.errors import UserError
from profile_overlap.run import flags
from profile_overlap.run.config import JobConfig
from profile_overlap.tools.sweep import KNOBS, RUN_FLAGS, SweepConfig, parse_vary, run_rank


def add_arguments(parser: argparse.ArgumentParser) -> None:
    run_cli.add_arguments(parser)
    parser.epilog = (
        "Examples:\n"
        "  torchrun --standalone --nproc-per-node 4 -m profile_overlap sweep --vary dim=256,512,1024,2048\n"
        "  python -m profile_overlap sweep --nproc-per-node 2 --vary model=mlp,transformer --vary layers=2,4\n"
        "  python -m profile_overlap sweep --nproc-per-node 2 --vary layers=2,4 --model transformer --modes sequential,split,ddp,fsdp2"
    )
    parser.add_argument(
        "--vary",
        action="append",
        default=[],
        metavar="KNOB=V1,V2,...",
        help="a knob and its values (repeatable; the grid is their product). Knobs: "
        + ", ".join(KNOBS)
        + " (also seq-len). --layers, --dim and --batch left out follow each point's --model",
    )


def from_args(args: argparse.Namespace) -> SweepConfig:
    vary = parse_vary(args.vary)
    try:
        # The run flags as given (None: the point's model decides), not a resolved Config.
        return SweepConfig(run={name: getattr(args, name) for name in RUN_FLAGS}, vary=vary, job=flags.from_namespace(JobConfig, args))
    except ValueError as err:
        raise UserError(str(err)) from None


def main(args: argparse.Namespace) -> int:
    from profile_overlap.run import launch

    return launch.launch_or_run(from_args(args), entry=run_rank, command="sweep")
