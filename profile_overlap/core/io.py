"""Atomic writes: a temporary file in the target's folder, then a rename, so that a reader sees
the old file or the new one, never half of one (a killed run, a full disk, a reader racing us).

The file gets the mode a plain `open()` gives (0666 less the umask: 0644 under the usual 022), so
colleagues and a TensorBoard run by another user read it as they read any file of ours. Records
(every JSON file: metrics.json, status, marks, analyze --json, advise, whatif, sweep) are fsynced
before the rename, so a machine that loses power after the rename finds the whole new file, not an
empty one. HTML, Markdown, CSV and PNG files are not: each is drawn from a record and `report`
writes it again, and an fsync costs a disk flush per file (tens of ms on a busy or network disk)."""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from profile_overlap.core.errors import UserError


def replace_atomically(path: Path, write: Callable[[Path], None], *, durable: bool = False) -> Path:
    """Call `write(tmp)` on a temporary path beside `path`, then rename it to `path`; `durable`:
    fsync the file before the rename (records)."""
    path = Path(path)
    tmp = _create_beside(path)
    try:
        write(tmp)
        if durable:
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def _create_beside(path: Path) -> Path:
    """A new empty file `.NAME.<random>.tmp` in path's folder, created as `open()` creates one: mode
    0666 less the umask (tempfile.mkstemp's 0600 would hide every file we write from other users)."""
    while True:
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        except FileExistsError:
            continue
        return tmp


def write_text_atomic(path: Path, text: str, *, durable: bool = False) -> Path:
    def write(tmp: Path) -> None:
        tmp.write_text(text, encoding="utf-8")

    return replace_atomically(path, write, durable=durable)


def write_bytes_atomic(path: Path, chunks: Iterable[bytes], *, durable: bool = True) -> Path:
    """A file written from its pieces as they come (a record encoded part by part: core/json_text.py);
    durable (records): fsynced before the rename."""

    def write(tmp: Path) -> None:
        with tmp.open("wb") as f:
            for chunk in chunks:
                f.write(chunk)

    return replace_atomically(path, write, durable=durable)


def write_json_atomic(path: Path, data: Any, *, indent: int | None = 2, default: Callable[[Any], Any] | None = None) -> Path:
    """A record: strict JSON (NaN and infinity are refused: other tools read these files), fsynced
    before the rename; indent None: one line; default: json's hook for objects it does not know
    (turned into JSON as they are written)."""
    if indent is None:  # json.dumps's C encoder: fast, and one line holds no more than the text
        return write_text_atomic(path, json.dumps(data, separators=(",", ":"), allow_nan=False, default=default) + "\n", durable=True)

    def write(tmp: Path) -> None:
        # Indented JSON is encoded in Python either way; json.dump streams its pieces to the file
        # where json.dumps would first hold them all (millions of small strings for the record of
        # a multi-GB trace, several times the text).
        with tmp.open("w", encoding="utf-8") as f:
            json.dump(data, f, indent=indent, allow_nan=False, default=default)
            f.write("\n")

    return replace_atomically(path, write, durable=True)


def ensure_writable_dir(out: Path) -> Path:
    """Create `out` (an --out folder) if needed; a one-line error when that cannot work."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(f"cannot create --out {out}: {err.strerror}; pick a writable folder") from None
    if not os.access(out, os.W_OK):
        raise UserError(f"--out {out} is not writable; pick a writable folder")
    return out
