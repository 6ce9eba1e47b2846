"""A trace file -> its `traceEvents`, one decoded chunk at a time (for `trace.load_trace`).

The file is decompressed in chunks (gzip recognised by content, not by name), each chunk is cut
at an event boundary and decoded, and the events are handed on before the next chunk is read,
so the whole document is never held in memory at once.
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec

_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_ARRAY_END = re.compile(rb"\}\s*\]")
_MAX_SPLIT_TRIES = 16

Decode = Callable[[bytes], list[Any]]
"""Decodes one JSON array of events (bytes) into a list."""


class NotATrace(Exception):
    """JSON, but not a trace: it has no `traceEvents` array."""


def read_chunks(path: Path, chunk_bytes: int) -> Iterator[bytes]:
    """Decompressed content in chunks; gzip is recognised by its magic number, not the name."""
    with open(path, "rb") as raw:
        magic = raw.read(2)
        raw.seek(0)
        if magic == b"\x1f\x8b":
            with gzip.GzipFile(fileobj=raw) as gz:
                while chunk := gz.read(chunk_bytes):
                    yield chunk
        else:
            while chunk := raw.read(chunk_bytes):
                yield chunk


def _decode_array(decode: Decode, body: bytes | bytearray) -> list[Any]:
    return decode(b"[" + body + b"]")


def stream_events(chunks: Iterator[bytes], decode: Decode, on_events: Callable[[list[Any]], None]) -> bytes:
    """Feed every event of the `traceEvents` array, decoded by `decode` (a msgspec decoder of a
    JSON array), to `on_events`, one chunk at a time. Returns
    the rest of the document with an empty `traceEvents`, for the metadata.

    A chunk is cut after the last `},` that ends an event. A `},` inside a string or a nested
    object makes the part before it invalid JSON, so a failed decode tells us to try the one
    before; a valid decode proves the cut is at an event boundary."""
    head = bytearray()
    match = None
    for chunk in chunks:
        start = max(0, len(head) - 32)
        head += chunk
        match = _EVENTS_KEY.search(head, start)
        if match:
            break
    if match is None:
        msgspec.json.decode(bytes(head))  # raises DecodeError if it is not JSON at all
        raise NotATrace("it is JSON but has no `traceEvents` array")
    prefix = bytes(head[: match.start()])
    buf = bytes(head[match.end() :])
    del head
    for chunk in chunks:
        buf += chunk
        buf = _emit_complete(buf, decode, on_events)
    return prefix + b'"traceEvents":[]' + _emit_last(buf, decode, on_events)


def _emit_complete(buf: bytes, decode: Decode, on_events: Callable[[list[Any]], None]) -> bytes:
    pos = buf.rfind(b"},")
    for _ in range(_MAX_SPLIT_TRIES):
        if pos == -1:
            return buf
        try:
            events = _decode_array(decode, buf[: pos + 1].lstrip(b" \t\r\n,"))
        except msgspec.ValidationError:
            raise
        except msgspec.DecodeError:
            pos = buf.rfind(b"},", 0, pos)
            continue
        on_events(events)
        return buf[pos + 2 :]
    return buf


def _emit_last(buf: bytes, decode: Decode, on_events: Callable[[list[Any]], None]) -> bytes:
    rest = buf.lstrip(b" \t\r\n,")
    if rest.startswith(b"]"):
        return rest[1:]
    ends = list(_ARRAY_END.finditer(rest))
    for m in reversed(ends[-_MAX_SPLIT_TRIES:]):
        try:
            events = _decode_array(decode, rest[: m.start() + 1])
        except msgspec.ValidationError:
            raise
        except msgspec.DecodeError:
            continue
        on_events(events)
        return rest[m.end() :]
    raise msgspec.DecodeError("the `traceEvents` array is not closed: the file is cut short")
