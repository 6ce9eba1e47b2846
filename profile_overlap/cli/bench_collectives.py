"""`bench-collectives`: its flags, parsed into a BenchConfig, then launched (tools/bench_collectives.py runs it)."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from profile_overlap.cli.run import add_verbose_flag
from profile_overlap.core.errors import UserError
from profile_overlap.run.config import BACKENDS, DTYPES
from profile_overlap.tools.bench_collectives import COMMAND, BenchConfig, run_rank


def add_arguments(parser: argparse.ArgumentParser) -> None:
    d = BenchConfig()
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = (
        "Examples:\n"
        "  torchrun --standalone --nproc-per-node 4 -m profile_overlap bench-collectives\n"
        "  python -m profile_overlap bench-collectives --nproc-per-node 2 --sizes 1K:256M --dtype bfloat16"
    )
    parser.add_argument(
        "--sizes",
        default=d.sizes,
        metavar="MIN:MAX[:F]",
        help="bytes of the full array: MIN, MIN*F, ... up to MAX; K/M/G = 1024^1/2/3; F defaults to 2 (default: %(default)s)",
    )
    parser.add_argument("--dtype", default=d.dtype, choices=DTYPES, help="element type (default: %(default)s)")
    parser.add_argument("--iters", type=int, default=d.iters, help="timed iterations per size and collective (default: %(default)s)")
    parser.add_argument("--warmup", type=int, default=d.warmup, help="untimed iterations first (default: %(default)s)")
    parser.add_argument("--backend", default=d.backend, choices=BACKENDS, help="auto: nccl with CUDA, else gloo (default: %(default)s)")
    parser.add_argument(
        "--nproc-per-node",
        type=int,
        default=None,
        metavar="N",
        help="without torchrun: ranks to launch on this machine (default: one per GPU, or 4 on CPU)",
    )
    parser.add_argument(
        "--timeout",
        dest="timeout_s",
        type=float,
        default=d.timeout_s,
        metavar="SECONDS",
        help="process-group timeout (default: %(default)s)",
    )
    parser.add_argument("--out", default=d.out, help="parent folder of run folders (default: %(default)s)")
    parser.add_argument("--name", default=None, help="run folder name (default: <YYYYmmdd-HHMMSS>-bench-collectives-<backend>-w<N>)")
    parser.add_argument("--json", default=None, metavar="OUT", help="also write the record (bench.json) to OUT")
    add_verbose_flag(parser)


def main(args: argparse.Namespace) -> int:
    names = {f.name for f in dataclasses.fields(BenchConfig)}
    try:
        config = BenchConfig(**{k: v for k, v in vars(args).items() if k in names})
    except ValueError as err:
        raise UserError(str(err)) from None
    if config.json:
        parent = Path(config.json).resolve().parent
        if not parent.is_dir():
            raise UserError(f"--json {config.json}: folder {parent} does not exist; create it or pick another path")
    from profile_overlap.run import launch

    if not launch.under_torchrun():
        # Self-launched, the world size is known now: refuse bad sizes before starting any rank.
        try:
            config.check_world_size(config.nproc_per_node or launch.default_nproc())
        except ValueError as err:
            raise UserError(str(err)) from None
    return launch.launch_or_run(config, entry=run_rank, command=COMMAND)
