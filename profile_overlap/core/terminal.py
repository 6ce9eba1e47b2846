"""Text from a trace (event, kernel, host and file names) made safe for a terminal: a name must show
as text, never move the cursor, retitle the window, clear the screen or ring the bell."""

from __future__ import annotations

import os
import re
from typing import IO

_ESCAPE_SEQUENCE = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor moves, clear screen
    r"|\x1b[\]PX^_][^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"  # OSC, DCS, SOS, PM, APC: window titles, hyperlinks, up to BEL or ST
    r"|\x1b[ -/]*[0-~]"  # any other two-character escape (charset switches, RIS reset)
)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
"""C0 but tab and newline (our own lines hold those), DEL and C1 (the 8-bit CSI, OSC and ST among
them), and the bidirectional embeddings, overrides and isolates, which reorder the rest of a line."""


def printable(text: str) -> str:
    """`text` without escape sequences and control characters (tab and newline kept)."""
    return _CONTROL.sub("", _ESCAPE_SEQUENCE.sub("", str(text)))


def discard_output(stream: IO[str]) -> None:
    """`stream` (the terminal's output: sys.stdout, or a rank's saved descriptor of it while its own
    descriptor 1 goes to its log) sent to the null device from here on: its reader has gone
    (`analyze DIR --json OUT | head`, `less` quit early), and what is left to print has nowhere to go,
    while the command's files still have to be written. Python's recipe for a broken pipe (its "Note
    on SIGPIPE"): later writes, and the flush at exit, then succeed instead of raising again."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):  # not a real file (a test's StringIO): nothing to redirect
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)
