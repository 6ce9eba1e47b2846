"""`bench-collectives`: its flags (generated from the BenchConfig fields by run/flags.py), parsed into a
BenchConfig, then launched (tools/bench/collectives.py runs it on every rank)."""

from __future__ import annotations

import argparse
from pathlib import Path

from profile_overlap.cli.run import add_job_arguments, parse_config
from profile_overlap.core.errors import UserError
from profile_overlap.tools.bench.config import COMMAND, BenchConfig


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_job_arguments(
        parser,
        BenchConfig,
        examples=(
            "torchrun --standalone --nproc-per-node 4 -m profile_overlap bench-collectives",
            "python -m profile_overlap bench-collectives --nproc-per-node 2 --sizes 1K:256M --dtype bfloat16",
        ),
    )


def main(args: argparse.Namespace) -> int:
    config = parse_config(args, BenchConfig)
    if config.json:
        parent = Path(config.json).resolve().parent
        if not parent.is_dir():
            raise UserError(f"--json {config.json}: folder {parent} does not exist; create it or pick another path")
    from profile_overlap.run import launch
    from profile_overlap.tools.bench.collectives import run_rank  # imports torch: not needed for --help

    if not launch.under_torchrun():
        # Self-launched, the world size is known now: refuse bad sizes before starting any rank.
        try:
            config.check_world_size(config.job.nproc_per_node or launch.default_nproc())
        except ValueError as err:
            raise UserError(str(err)) from None
    return launch.launch_or_run(config, entry=run_rank, command=COMMAND)
