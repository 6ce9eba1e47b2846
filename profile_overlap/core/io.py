"""Atomic writes: a temporary file in the target's folder, then a rename, so that a reader sees
the old file or the new one, never half of one (a killed run, a full disk, a reader racing us)."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from profile_overlap.core.errors import UserError


def replace_atomically(path: Path, write: Callable[[Path], None]) -> Path:
    """Call `write(tmp)` on a temporary path beside `path`, then rename it to `path`."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_text_atomic(path: Path, text: str) -> Path:
    def write(tmp: Path) -> None:
        tmp.write_text(text, encoding="utf-8")

    return replace_atomically(path, write)


def write_json_atomic(path: Path, data: Any, *, indent: int | None = 2, default: Callable[[Any], Any] | None = None) -> Path:
    """Strict JSON (NaN and infinity are refused: other tools read these files); indent None: one
    line; default: json's hook for objects it does not know (turned into JSON as they are written)."""
    if indent is None:  # json.dumps's C encoder: fast, and one line holds no more than the text
        return write_text_atomic(path, json.dumps(data, separators=(",", ":"), allow_nan=False, default=default) + "\n")

    def write(tmp: Path) -> None:
        # Indented JSON is encoded in Python either way; json.dump streams its pieces to the file
        # where json.dumps would first hold them all (millions of small strings for the record of
        # a multi-GB trace, several times the text).
        with tmp.open("w", encoding="utf-8") as f:
            json.dump(data, f, indent=indent, allow_nan=False, default=default)
            f.write("\n")

    return replace_atomically(path, write)


def ensure_writable_dir(out: Path) -> Path:
    """Create `out` (an --out folder) if needed; a one-line error when that cannot work."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(f"cannot create --out {out}: {err.strerror}; pick a writable folder") from None
    if not os.access(out, os.W_OK):
        raise UserError(f"--out {out} is not writable; pick a writable folder")
    return out
