"""Command line: `python -m profile_overlap [COMMAND] ...` (also the `profile-overlap` script).

    torchrun --standalone --nproc-per-node 4 -m profile_overlap --mode compare
    python -m profile_overlap analyze runs/<run>/split --json overlap.json
    python -m profile_overlap explain --world-size 4

Each command lives in its own module, imported only when it is chosen, so that `analyze` and
`report` start without importing torch. A module provides `add_arguments(parser)` and
`main(args) -> int`; its one-line help is its row in COMMANDS, which is both its line in the
top-level `--help` and its own parser's description.

The first word: a command; `-h`/`--help` or `--version`; a flag or nothing, which means `run` (today's
default: `run` takes flags only, so `--mode compare` alone is a run); anything else is an error that
names the closest command, since `run` takes no positional argument (no file, no folder) and
could not use it.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import os
import platform
import shutil
import sys
import textwrap
import threading
from pathlib import Path
from typing import NoReturn

from profile_overlap.core import rank_output
from profile_overlap.core.errors import UserError
from profile_overlap.core.terminal import discard_output
from profile_overlap.core.version import distribution_version, package_version

PROG = "profile_overlap"

# name -> (module, one-line help). The order is the order of `--help`; the help is also the
# command's own description (build_parser), so the two cannot say different things.
COMMANDS: dict[str, tuple[str, str]] = {
    "run": (
        "profile_overlap.cli.run",
        "Train, verify and profile one mode (sequential, split, split-blocking, ddp, fsdp2) or several in one job "
        "(compare), under torchrun or on ranks it launches; writes a run folder and its report (the default command)",
    ),
    "analyze": (
        "profile_overlap.cli.analyze",
        "Measure overlap in any folder of PyTorch profiler traces (GPU or CPU), per rank and across ranks, with integrity checks",
    ),
    "bench-collectives": (
        "profile_overlap.cli.bench_collectives",
        "Time and check all_reduce, reduce_scatter and all_gather per size, nccl-tests style",
    ),
    "report": (
        "profile_overlap.cli.report",
        "Write a finished run's report (HTML, Markdown, JSON), compare two runs (--compare), gate CI (--fail-if)",
    ),
    "sweep": (
        "profile_overlap.cli.sweep",
        "A compare run per point of a grid (--vary dim=256,512,...) in one job, and where the second mode "
        "(split by default) starts to beat the first (sequential)",
    ),
    "explain": (
        "profile_overlap.cli.explain",
        "The AllReduce == AllGather(ReduceScatter) worked example and the compare schedules as text timelines; no process group",
    ),
    "tensorboard": (
        "profile_overlap.cli.tensorboard",
        "TensorBoard on loopback over the run folders: scalars, timeline, summary, hparams",
    ),
    "perfetto": (
        "profile_overlap.cli.perfetto",
        "All ranks of a run, job or trace folder in one Perfetto trace on the aligned clock, with the overlap drawn in (--open)",
    ),
    "whatif": (
        "profile_overlap.cli.whatif",
        "Predict every mode's step at other world sizes and link bandwidths from a measured run (ring alpha-beta replay)",
    ),
    "advise": (
        "profile_overlap.cli.advise",
        "What to change in a run or job, ranked by predicted gain (whatif replay), each with its cause and the flag or code line; "
        "--verify runs the top change against the run in alternating blocks",
    ),
}


def _width() -> int:
    """The help's text width, as argparse picks it (the terminal's, or $COLUMNS)."""
    return max(shutil.get_terminal_size().columns - 2, 40)


def _top_level_help() -> str:
    width = max(len(name) for name in COMMANDS)
    indent = " " * (width + 4)
    rows = "\n".join(
        textwrap.fill(text, _width(), initial_indent=f"  {name:<{width}}  ", subsequent_indent=indent)
        for name, (_, text) in COMMANDS.items()
    )
    rule = (
        f"Without a command (nothing, or a flag first), `run` is assumed: `{PROG} --mode compare` is "
        f"`{PROG} run --mode compare`. Any other first word must be a command: `run` takes no file or "
        "folder, so an unknown word is an error that names the closest command."
    )
    return (
        f"usage: {PROG} [COMMAND] [options]\n\n"
        "Overlap profiler for PyTorch distributed training: all_reduce vs reduce_scatter + all_gather.\n\n"
        f"commands:\n{rows}\n\n"
        "options:\n"
        "  -h, --help  this list\n"
        "  --version   this package's version, torch's and the Python in use, on one line\n\n"
        f"{textwrap.fill(rule, _width())}\n"
        f"`{PROG} COMMAND --help` explains each command's options.\n"
    )


def version_line() -> str:
    python = f"Python {platform.python_version()} ({sys.executable})"
    return f"{PROG} {package_version()}, torch {distribution_version('torch')}, {python}"


def unknown_command(word: str) -> str:
    """The one-line error for a first word that is neither a command nor a flag."""
    if Path(word).exists():
        example = f"{PROG} analyze {word} (traces) or {PROG} report {word} (a run)"
        hint = f"`run` takes no file or folder; put a command before it, e.g. {example}"
    else:
        key = word.lower()
        close = [name for name in COMMANDS if key and name.startswith(key)] or difflib.get_close_matches(key, COMMANDS, n=3)
        if close:
            hint = "did you mean " + " or ".join(f"'{name}'" for name in close) + "?"
        else:
            hint = "the commands are " + ", ".join(COMMANDS)
    return f"{PROG}: error: unknown command '{word}': {hint} (see {PROG} --help)"


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad flag gets one line (problem and fix), not the whole usage block."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser(command: str) -> argparse.ArgumentParser:
    module_name, text = COMMANDS[command]
    module = importlib.import_module(module_name)
    parser = OneLineParser(prog=f"{PROG} {command}")
    module.add_arguments(parser)
    # Set after the module's own settings: the description is the help's row, whatever the module does.
    parser.description = textwrap.fill(text, _width())
    parser.set_defaults(_module=module)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("-h", "--help"):
        print(_top_level_help(), end="")
        return 0
    if argv and argv[0] == "--version":
        print(version_line())
        return 0
    if argv and argv[0] in COMMANDS:
        command = argv.pop(0)
    elif not argv or argv[0].startswith("-"):
        command = "run"
    else:
        print(unknown_command(argv[0]), file=sys.stderr)
        return 2
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
    except BrokenPipeError:
        # A plain print() found the reader gone (what the consoles print drops quietly, and the
        # command goes on): the command stopped there, as Python's recipe for SIGPIPE has it.
        discard_output(rank_output.out())
        return 1


QUICK_EXIT_COMMANDS = frozenset({"analyze"})
"""Commands that end with os._exit once their output is flushed: they leave nothing to finalize (no
atexit hook, thread, child or open file of theirs), and the interpreter's teardown of the ~460
modules they import (numpy, msgspec, rich, our own) takes 30-35 ms: 1% of `analyze` at 1,024 ranks,
a tenth of it on a small trace."""


def exit_with(argv: list[str] | None = None) -> NoReturn:
    """main(argv), then exit with its code: `python -m profile_overlap`'s entry point. A command in
    QUICK_EXIT_COMMANDS, run in a process that has no other thread and no child left, skips the
    interpreter's teardown."""
    argv = list(sys.argv[1:] if argv is None else argv)
    code = main(argv)
    if argv and argv[0] in QUICK_EXIT_COMMANDS and _nothing_left():
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # a closed or broken pipe: what Python's own exit would also lose
                pass
        os._exit(code)
    sys.exit(code)


def _nothing_left() -> bool:
    """No other thread, no multiprocessing child (its exit hook would join it), and no torch (a
    torchrun rank of `analyze`: torch's exit hooks and its threads, which `threading` cannot see)."""
    mp = sys.modules.get("multiprocessing")
    return threading.active_count() == 1 and not (mp and mp.active_children()) and "torch" not in sys.modules


if __name__ == "__main__":
    exit_with()
