"""`run`: its flags (from the Config fields), parsed into a Config, then launched: as this rank under torchrun,
or as local ranks started by torch's elastic launcher."""

from __future__ import annotations

import argparse
import dataclasses

from profile_overlap.run.config import BACKENDS, DTYPES, MODE_CHOICES, Config

VERBOSE_HELP = (
    "show everything every rank prints (torch, gloo and profiler logging included) instead of "
    "our lines only; by default it goes to <run folder>/logs/rank<r>.log (also: PROFILE_OVERLAP_DEBUG=1)"
)


def add_verbose_flag(parser) -> None:
    """--verbose, shared by the job commands; it is not part of any config (it changes no result)."""
    parser.add_argument("--verbose", action="store_true", help=VERBOSE_HELP)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    d = Config()
    parser.epilog = (
        "Examples:\n"
        "  torchrun --standalone --nproc-per-node 4 -m profile_overlap --mode compare\n"
        "  python -m profile_overlap --nproc-per-node 2 --layers 16 --dim 1024   # launches its own ranks"
    )
    parser.formatter_class = argparse.RawDescriptionHelpFormatter

    wl = parser.add_argument_group("pipeline and workload (K layers of d x d weights, an Adam step, a forward pass)")
    wl.add_argument(
        "--mode",
        default=d.mode,
        choices=MODE_CHOICES,
        help="sequential: all_reduce then compute; split: reduce_scatter, shard update, async all_gather "
        "overlapped with the forward pass; compare: both on the same data (default: %(default)s)",
    )
    wl.add_argument("--layers", type=int, default=d.layers, metavar="K", help="layers, one gradient bucket each (default: %(default)s)")
    wl.add_argument("--dim", type=int, default=d.dim, metavar="d", help="layer width; must divide by the world size (default: %(default)s)")
    wl.add_argument("--batch", type=int, default=d.batch, metavar="B", help="forward-pass rows (default: %(default)s)")
    wl.add_argument("--dtype", default=d.dtype, choices=DTYPES, help="parameter/gradient dtype (default: %(default)s)")
    wl.add_argument("--lr", type=float, default=d.lr, help="Adam learning rate (default: %(default)s)")
    wl.add_argument("--seed", type=int, default=d.seed, help="seed for weights, batch and gradients (default: %(default)s)")

    st = parser.add_argument_group("steps and profiling")
    st.add_argument(
        "--warmup-steps", type=int, default=d.warmup_steps, help="untimed steps per mode; verification runs on them (default: %(default)s)"
    )
    st.add_argument("--steps", type=int, default=d.steps, help="timed, unprofiled steps per mode (default: %(default)s)")
    st.add_argument("--profile-steps", type=int, default=d.profile_steps, help="profiled steps per mode (default: %(default)s)")
    st.add_argument(
        "--profile",
        action=argparse.BooleanOptionalAction,
        default=d.profile,
        help="record torch.profiler traces; --no-profile times steps only (default: on)",
    )
    st.add_argument("--gzip", action=argparse.BooleanOptionalAction, default=d.gzip, help="gzip the traces (default: on)")

    dist = parser.add_argument_group("distributed")
    dist.add_argument("--backend", default=d.backend, choices=BACKENDS, help="auto: nccl with CUDA, else gloo (default: %(default)s)")
    dist.add_argument(
        "--nproc-per-node",
        type=int,
        default=None,
        metavar="N",
        help="without torchrun: ranks to launch on this machine (default: one per GPU, or 4 on CPU)",
    )
    dist.add_argument(
        "--timeout",
        dest="timeout_s",
        type=float,
        default=d.timeout_s,
        metavar="SECONDS",
        help="process-group timeout; a dead or hung rank ends the job within about this long (default: %(default)s)",
    )

    out = parser.add_argument_group("output")
    out.add_argument("--out", default=d.out, help="parent folder of run folders (default: %(default)s)")
    out.add_argument("--name", default=None, help="run folder name (default: <YYYYmmdd-HHMMSS>-<mode>-<backend>-w<N>)")
    add_verbose_flag(out)


def from_args(args: argparse.Namespace) -> Config:
    names = {f.name for f in dataclasses.fields(Config)}
    return Config(**{k: v for k, v in vars(args).items() if k in names})


def main(args: argparse.Namespace) -> int:
    from profile_overlap.core.errors import UserError

    try:
        config = from_args(args)
    except ValueError as err:
        raise UserError(str(err)) from None
    from profile_overlap.run import launch

    return launch.launch_or_run(config)
