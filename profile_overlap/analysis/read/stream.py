"""A trace file -> its `traceEvents`, one decoded chunk at a time (for `trace.load_trace`).

The file is decompressed in chunks (gzip recognised by content, not by name), the events read so
far are cut at an event boundary and decoded, and the events are handed on before more is read,
so the whole document is never held in memory at once.

Hostile input costs bounded memory and linear time: at most MAX_HEAD_BYTES are kept while looking
for `traceEvents` and at most MAX_PENDING_BYTES of it without an event boundary; a cut is tried at
a bounded number of places each time, and only once the bytes waiting have doubled since the last
try, so each byte is decoded a bounded number of times.
"""

from __future__ import annotations

import gzip
import os
import re
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec

_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_BRACE_BEFORE = re.compile(rb"\}\s*\Z")
_WHITESPACE = b" \t\r\n"
MAX_SPLIT_TRIES = 16
"""Cut points tried each time (from the last): a `},` inside a string or a nested object is not an
event boundary, and a failed decode says so."""
MAX_HEAD_BYTES = 32 << 20
"""Bytes read while looking for `traceEvents`. Kineto writes a few kB before it (schemaVersion,
deviceProperties, distributedInfo), and 8 MB would list a world of checks.MAX_WORLD_SIZE ranks in one group's pg_config."""
MAX_PENDING_BYTES = 32 << 20
"""Bytes of `traceEvents` (or of what follows the array) kept without finding the end of an event.
A profiler's events are at most a few kB; only a hostile or broken file has one this long."""
_MB = 1 << 20

Decode = Callable[[bytes], list[Any]]
"""Decodes one JSON array of events (bytes) into a list."""


class NotATrace(Exception):
    """JSON, but not a trace: it has no `traceEvents` array, or no events in it."""


SMALL_GZIP_BYTES = 1 << 20
"""A gzip file up to this size is read whole and inflated by zlib in one go (`_small_gzip`)."""
SMALL_CONTENT_BYTES = 16 << 20
"""...when it inflates to at most this many bytes."""


def _small_gzip(data: bytes) -> bytes | None:
    """The content of a small gzip file (its members end to end, as GzipFile reads them), without
    GzipFile's reader in Python (a third of reading a 100 kB trace); None when anything is out of
    the ordinary (more than SMALL_CONTENT_BYTES, cut short, corrupt, a bad checksum, bytes after a
    member that start no other), so that GzipFile reads it and says what is wrong as it always has."""
    parts: list[bytes] = []
    size = 0
    while data:
        d = zlib.decompressobj(wbits=31)  # a gzip member: header and trailer (CRC-32, size) checked by zlib
        try:
            part = d.decompress(data, SMALL_CONTENT_BYTES - size + 1)
        except zlib.error:
            return None
        size += len(part)
        if size > SMALL_CONTENT_BYTES or not d.eof:
            return None
        parts.append(part)
        data = d.unused_data.lstrip(b"\x00")  # GzipFile skips zero padding between members
        if data and not data.startswith(b"\x1f\x8b"):
            return None
    return b"".join(parts)


WHOLE_BYTES = 1 << 20
"""A plain file up to this size is read whole (`small_content`); a trace whose content is at most this
many bytes may be decoded in one go (trace.py `_decode_whole`)."""


def small_content(path: Path) -> bytes | None:
    """The whole content of a file small enough to read at once: a gzip file up to SMALL_GZIP_BYTES
    inflated by `_small_gzip`, or a plain file up to WHOLE_BYTES; None for any other, which
    `read_chunks` streams. Raises OSError."""
    with open(path, "rb") as raw:
        size = os.fstat(raw.fileno()).st_size
        if raw.read(2) == b"\x1f\x8b":
            raw.seek(0)
            return _small_gzip(raw.read()) if size <= SMALL_GZIP_BYTES else None
        raw.seek(0)
        return raw.read() if size <= WHOLE_BYTES else None


def chunks_of(content: bytes, chunk_bytes: int) -> Iterator[bytes]:
    """A content held whole, in chunks (itself when it fits one)."""
    if len(content) <= chunk_bytes:
        yield content
        return
    for at in range(0, len(content), chunk_bytes):
        yield content[at : at + chunk_bytes]


def read_chunks(path: Path, chunk_bytes: int) -> Iterator[bytes]:
    """Decompressed content in chunks; gzip is recognised by its magic number, not the name."""
    small = small_content(path)
    if small is not None:
        yield from chunks_of(small, chunk_bytes)
        return
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


def stream_events(chunks: Iterator[bytes], decode: Decode, on_events: Callable[[list[Any]], None]) -> bytes:
    """Feed every event of the `traceEvents` array, decoded by `decode` (a msgspec decoder of a
    JSON array), to `on_events`, a run of events at a time. Returns the rest of the document with
    an empty `traceEvents`, for the metadata.

    Raises NotATrace, msgspec.DecodeError (not JSON, or cut short) or msgspec.ValidationError
    (events of the wrong shape, from `decode`)."""
    head = bytearray()
    match = None
    for chunk in chunks:
        start = max(0, len(head) - 64)
        head += chunk
        match = _EVENTS_KEY.search(head, start)
        if match or len(head) > MAX_HEAD_BYTES:
            break
    if match is None:
        _not_a_trace(head)
    assert match is not None
    prefix = bytes(head[: match.start()])
    events = _Events(decode, on_events)
    events.feed(bytes(head[match.end() - 1 :]))  # from the array's `[`
    del head
    for chunk in chunks:
        events.feed(chunk)
    return prefix + b'"traceEvents":[]' + events.finish()


def _not_a_trace(head: bytearray) -> None:
    """Raise the error for a document without `traceEvents`: not JSON, or JSON that is no trace."""
    if len(head) <= MAX_HEAD_BYTES:
        msgspec.json.decode(head)  # raises DecodeError if it is not JSON at all
        raise NotATrace("it is JSON but has no `traceEvents` array")
    try:
        msgspec.json.decode(memoryview(head)[:MAX_HEAD_BYTES])
    except msgspec.DecodeError as err:
        if "truncated" not in str(err):
            raise  # not JSON (it would be JSON so far, cut off here)
    raise NotATrace(f"no `traceEvents` array in its first {MAX_HEAD_BYTES // _MB} MiB (a profiler writes it within a few kB)")


class _Events:
    """The bytes of the `traceEvents` array as they arrive, decoded up to the last event boundary
    found. The bytes waiting always start with `[`, so a cut is decoded as one array."""

    def __init__(self, decode: Decode, on_events: Callable[[list[Any]], None]) -> None:
        self.decode, self.on_events = decode, on_events
        self.parts: list[bytes] = []
        self.size = 0
        self.tried = 0
        """Bytes waiting (from the start) in which every cut point was tried or passed over."""
        self.next_try = 0
        """Try to cut once this many bytes wait."""

    def feed(self, chunk: bytes) -> None:
        self.parts.append(chunk)
        self.size += len(chunk)
        if self.size < self.next_try:
            return
        buf = self._joined()
        pos = self._cut(buf)
        if pos is not None:
            rest = b"".join((b"[", memoryview(buf)[pos + 2 :]))
            self.parts, self.size = [rest], len(rest)
        elif self.size >= MAX_PENDING_BYTES:
            raise NotATrace(
                f"over {MAX_PENDING_BYTES // _MB} MiB of its `traceEvents` array (or of what follows it) without the end of an event "
                "(a profiler's events are a few kB): a giant string or value, or not an array of events"
            )
        # Cut points once passed over are never tried again (what precedes them does not change,
        # nor does their verdict), and the next try waits until the bytes waiting have doubled.
        self.tried = self.size
        self.next_try = min(2 * self.size, MAX_PENDING_BYTES)

    def _joined(self) -> bytes:
        if len(self.parts) > 1:
            self.parts = [b"".join(self.parts)]
        return self.parts[0]

    def _cut(self, buf: bytes) -> int | None:
        """Decode and hand on the events up to the last `},` that ends an event, among the last
        MAX_SPLIT_TRIES not tried before; its position, or None."""
        end = len(buf)
        low = max(1, self.tried - 1)  # a `}` already there, and the `,` just come
        for _ in range(MAX_SPLIT_TRIES):
            pos = buf.rfind(b"},", low, end)
            if pos == -1:
                return None
            try:
                events = self.decode(b"".join((memoryview(buf)[: pos + 1], b"]")))
            except msgspec.ValidationError:
                raise
            except msgspec.DecodeError:
                end = pos + 1
                continue
            self.on_events(events)
            return pos
        return None

    def finish(self) -> bytes:
        """The events after the last cut, up to the array's end; returns what follows the array."""
        buf = self._joined() if self.parts else b"["
        body = buf[1:].lstrip(_WHITESPACE + b",")
        if body.startswith(b"]"):
            return body[1:]
        end = len(buf)
        for _ in range(MAX_SPLIT_TRIES):
            close = buf.rfind(b"]", 1, end)
            if close == -1:
                break
            end = close
            # The `}` of the last event before it (at most a few kB of whitespace between).
            brace = _BRACE_BEFORE.search(buf, max(1, close - 4096), close)
            if brace is None:
                continue
            try:
                events = self.decode(b"".join((memoryview(buf)[: brace.start() + 1], b"]")))
            except msgspec.ValidationError:
                raise
            except msgspec.DecodeError:
                continue
            self.on_events(events)
            return buf[close + 1 :]
        raise msgspec.DecodeError("the `traceEvents` array is not closed: the file is cut short")
