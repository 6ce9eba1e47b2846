"""`run`: its flags (generated from the Config sections' fields by run/flags.py), parsed into a Config
(flags.build, the one place flat flags become a config), then launched: as this rank under torchrun,
or as local ranks started by torch's elastic launcher."""

from __future__ import annotations

import argparse
from typing import TypeVar

from profile_overlap.core.errors import UserError
from profile_overlap.run import flags
from profile_overlap.run.config import OUTPUT, Config, JobSection, from_args

T = TypeVar("T", bound=JobSection)

VERBOSE_HELP = (
    "show everything every rank prints (torch, gloo and profiler logging included) instead of "
    "our lines only; by default it goes to <run folder>/logs/rank<r>.log (also: PROFILE_OVERLAP_DEBUG=1)"
)


def add_verbose_flag(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """--verbose, shared by the job commands; it is not part of any config (it changes no result)."""
    parser.add_argument("--verbose", action="store_true", help=VERBOSE_HELP)


def add_job_arguments(parser: argparse.ArgumentParser, cls: type[JobSection], *, examples: tuple[str, ...]) -> None:
    """The flags of a job command's config class (declared once, in its fields), --verbose, and examples."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = "Examples:\n" + "\n".join(f"  {line}" for line in examples)
    groups = flags.add_arguments(parser, cls)
    add_verbose_flag(groups[OUTPUT])


def parse_config(args: argparse.Namespace, cls: type[T]) -> T:
    """The config of `cls` from parsed flags; a bad value is a one-line error."""
    try:
        return from_args(args, cls)
    except ValueError as err:
        raise UserError(str(err)) from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_job_arguments(
        parser,
        Config,
        examples=(
            "torchrun --standalone --nproc-per-node 4 -m profile_overlap --mode compare",
            "python -m profile_overlap --nproc-per-node 2 --layers 16 --dim 1024   # launches its own ranks",
        ),
    )


def main(args: argparse.Namespace) -> int:
    from profile_overlap.run import launch

    return launch.launch_or_run(parse_config(args, Config))
