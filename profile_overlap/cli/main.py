"""Command line: `python -m profile_overlap [COMMAND] ...` (also the `profile-overlap` script).

    torchrun --standalone --nproc-per-node 4 -m profile_overlap --mode compare
    python -m profile_overlap analyze runs/<run>/split --json overlap.json
    python -m profile_overlap explain --world-size 4

Each command lives in its own module, imported only when it is chosen, so that `analyze` and
`report` start without importing torch. A module provides `add_arguments(parser)` and
`main(args) -> int`. Without a command, `run` is assumed.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from profile_overlap.core import rank_output
from profile_overlap.core.errors import UserError

PROG = "profile_overlap"

# name -> (module, one-line help). The order is the order of `--help`.
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("profile_overlap.cli.run", "run sequential and/or split under torchrun, verify and profile them (default)"),
    "analyze": ("profile_overlap.cli.analyze", "measure overlap in any folder of PyTorch profiler traces"),
    "bench-collectives": (
        "profile_overlap.cli.bench_collectives",
        "time and check all_reduce, reduce_scatter and all_gather per size, nccl-tests style",
    ),
    "report": ("profile_overlap.cli.report", "the report of a finished run (HTML, Markdown, JSON), --compare two runs, --fail-if gates"),
    "sweep": (
        "profile_overlap.cli.sweep",
        "a compare run per point of a grid (--vary dim=256,512,...) in one job: where does the split pay?",
    ),
    "explain": ("profile_overlap.cli.explain", "the AllReduce == AllGather(ReduceScatter) worked example, no process group"),
    "tensorboard": ("profile_overlap.cli.tensorboard", "TensorBoard on loopback over the run folders: scalars, timeline, summary, hparams"),
    "perfetto": (
        "profile_overlap.cli.perfetto",
        "all ranks of a run, job or trace folder in one Perfetto trace on the aligned clock, with the overlap drawn in (--open)",
    ),
    "whatif": (
        "profile_overlap.cli.whatif",
        "predict every mode's step at other world sizes and link bandwidths from a measured run (ring alpha-beta replay)",
    ),
}


def _top_level_help() -> str:
    width = max(len(name) for name in COMMANDS)
    rows = "\n".join(f"  {name:<{width}}  {text}" for name, (_, text) in COMMANDS.items())
    return (
        f"usage: {PROG} [COMMAND] [options]\n\n"
        "Overlap profiler for PyTorch distributed training: all_reduce vs reduce_scatter + all_gather.\n\n"
        f"commands:\n{rows}\n\n"
        f"Without a command, `run` is assumed. `{PROG} COMMAND --help` explains each command's options.\n"
    )


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad flag gets one line (problem and fix), not the whole usage block."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser(command: str) -> argparse.ArgumentParser:
    module_name, text = COMMANDS[command]
    module = importlib.import_module(module_name)
    parser = OneLineParser(prog=f"{PROG} {command}", description=text[0].upper() + text[1:] + ".")
    module.add_arguments(parser)
    parser.set_defaults(_module=module)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("-h", "--help"):
        print(_top_level_help(), end="")
        return 0
    command = argv.pop(0) if argv and argv[0] in COMMANDS else "run"
    parser = build_parser(command)
    args = parser.parse_args(argv)
    if getattr(args, "verbose", False):
        os.environ[rank_output.VERBOSE_ENV] = "1"  # read by every rank, including those this process launches
    try:
        return int(args._module.main(args) or 0)
    except UserError as err:
        rank_output.report_user_error(command, err)
        return err.exit_code
    except KeyboardInterrupt:
        if os.environ.get("LOCAL_RANK", "0") == "0":
            print(f"{PROG} {command}: interrupted", file=rank_output.err(), flush=True)
        return 130


if __name__ == "__main__":
    sys.exit(main())
