"""Where a rank's output goes: our lines to the terminal, everything else to the run folder's log.

By default each rank points its file descriptors 1 and 2 at its own log, so that whatever torch,
gloo, Kineto (its `USDT: ... profiler_start` lines) and Python warnings print lands in
`<run folder>/logs/rank<r>.log`, and the terminal shows only what this package writes through
`out()` and `err()`: progress, the summary, where the outputs are, and one-line errors.
`--verbose` (or PROFILE_OVERLAP_DEBUG=1) leaves the descriptors alone and shows everything.

Until the run folder exists the log is a temporary file; `attach(folder, rank)` moves it there.
A rank that fails before any folder exists replays its log to the terminal, so nothing is lost.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from profile_overlap.core.errors import UserError
from profile_overlap.core.files import LOGS_DIR
from profile_overlap.core.terminal import discard_output, printable

VERBOSE_ENV = "PROFILE_OVERLAP_VERBOSE"


@dataclass
class _Capture:
    """This rank's descriptors 1 and 2, pointed at its log: the terminal's own, saved, and the log."""

    console_out: TextIO
    console_err: TextIO
    log_fd: int
    log_path: Path
    attached: bool = False
    """The log is the run folder's (attach), not a temporary file."""


_capture: _Capture | None = None


def verbose() -> bool:
    return bool(os.environ.get(VERBOSE_ENV) or os.environ.get("PROFILE_OVERLAP_DEBUG"))


def capturing() -> bool:
    return _capture is not None


def capture() -> None:
    """Send this process's descriptors 1 and 2 to a log (a temporary file until `attach`).
    Call once per rank, before anything noisy runs; a no-op under --verbose."""
    global _capture
    if verbose() or capturing():
        return
    sys.stdout.flush()
    sys.stderr.flush()
    saved_out, saved_err = os.dup(1), os.dup(2)
    fd, path = tempfile.mkstemp(prefix="profile_overlap-rank-", suffix=".log")
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    _capture = _Capture(
        console_out=os.fdopen(saved_out, "w", buffering=1, encoding="utf-8", errors="replace"),
        console_err=os.fdopen(saved_err, "w", buffering=1, encoding="utf-8", errors="replace"),
        log_fd=fd,
        log_path=Path(path),
    )


def log_path(folder: Path, rank: int) -> Path:
    return Path(folder) / LOGS_DIR / f"rank{rank}.log"


def attach(folder: Path, rank: int) -> None:
    """Move this rank's log to `<folder>/logs/rank<rank>.log` and keep writing there. Once per job:
    a sweep's points share the sweep folder's log."""
    c = _capture
    if c is None or c.attached:
        return
    target = log_path(folder, rank)
    target.parent.mkdir(exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    with open(c.log_path, "rb") as src, os.fdopen(os.dup(fd), "wb") as dst:
        shutil.copyfileobj(src, dst)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(c.log_fd)
    c.log_path.unlink(missing_ok=True)
    c.log_fd, c.log_path, c.attached = fd, target, True


def release(*, failed: bool) -> None:
    """At the end of a rank. A log that never reached a run folder is replayed to the terminal
    when the rank failed (it may hold the only trace of why), then removed. An attached log stays
    attached: what torch prints while the interpreter shuts down still belongs in it."""
    c = _capture
    if c is None or c.attached:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    if failed and c.log_path.stat().st_size:
        err().write(c.log_path.read_text(errors="replace"))
        err().flush()
    c.log_path.unlink(missing_ok=True)


def out() -> TextIO:
    """The terminal's standard output (sys.stdout under --verbose)."""
    return _capture.console_out if _capture else sys.stdout


def err() -> TextIO:
    """The terminal's standard error (sys.stderr under --verbose)."""
    return _capture.console_err if _capture else sys.stderr


def say(line: str) -> None:
    """One progress line on the terminal; nothing once the terminal's reader has gone (`... | head`):
    the run goes on to its end, and its folder says how it went."""
    try:
        print(line, file=out(), flush=True)
    except BrokenPipeError:
        discard_output(out())


def tell(line: str) -> None:
    """One line on the terminal's standard error (a warning, a failed gate); nothing once its reader
    has gone (`... 2>&1 | head`): the command goes on to its files and its own exit status."""
    try:
        print(line, file=err(), flush=True)
    except BrokenPipeError:
        discard_output(err())


def where_logs(folder: Path) -> str:
    """Where to read every rank's full output, for error messages ('' under --verbose)."""
    return f"; every rank's full output is in {Path(folder) / LOGS_DIR}/" if capturing() else ""


def record_error(message: str) -> None:
    """Hand our one-line error to torchrun's agent (TORCHELASTIC_ERROR_FILE), which prints it as
    the root cause at the bottom of its failure summary, the last thing a user sees."""
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path:
        return
    data = {"message": {"message": message, "extraInfo": {"py_callstack": message, "timestamp": str(int(time.time()))}}}
    try:
        Path(path).write_text(json.dumps(data))
    except OSError:
        pass  # the agent then shows its own summary without our line; the line was printed anyway


def report_user_error(command: str, error: UserError) -> None:
    """One line on the terminal's stderr. Under torchrun every rank usually hits the same error,
    so only each node's local rank 0 prints it; every rank hands it to torchrun's agent, which
    repeats it as the root cause at the bottom of its failure summary."""
    line = f"profile_overlap {command}: error: {printable(str(error))}"
    # A rank that this process's own launcher started leaves the printing to the launcher, which
    # prints the first failure's line once, last.
    self_launched_rank = "RANK" in os.environ and os.environ.get("PROFILE_OVERLAP_SELF_LAUNCHED")
    if os.environ.get("LOCAL_RANK", "0") == "0" and not self_launched_rank:
        print(line, file=err(), flush=True)
    record_error(line)
