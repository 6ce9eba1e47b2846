"""msgspec's JSON as Python's json module writes it: the records we write (`analyze --json`) keep the
bytes `json.dump(data, f, indent=1)` gave them (other tools and our golden files read them), while
msgspec encodes the typed structs in C, without a dict per struct first.

msgspec.json.format indents as json.dump does (`"key": value`, one item a line, `[]` and `{}` for
empty containers). Two things differ, and `as_python_json` turns them into json's:

- floats: msgspec writes 1e16 and 0.00001 where Python writes 1e+16 and 1e-05 (both shortest
  round-trip digits, so `repr(float(token))` gives Python's text exactly); only numbers with an
  exponent or four zeros after the point need it;
- strings: json's default ensure_ascii writes every character outside space..~ as \\uXXXX
  (surrogate pairs above U+FFFF), where msgspec writes UTF-8 and DEL as they are.

In indented JSON every number is a whole value on its line (after `": "` or the indentation, before
an optional comma), and a string cannot hold a raw newline or an unescaped quote, so the patterns
below never match inside a string.
"""

from __future__ import annotations

import re

import msgspec

_EXPONENT, _ZEROS = re.compile(rb"e[-0-9]"), re.compile(rb"0\.0000")
"""Where a float json spells differently may be (literal-led: fast to scan for); `_ODD_LINE` checks the line."""
_ODD_LINE = re.compile(rb'( *(?:"(?:[^"\\]|\\.)*": )?)(-?[0-9]+(?:\.[0-9]+)?e-?[0-9]+|-?0\.0000[0-9]*)(,?)')
_NOT_ASCII = re.compile("[^\x00-\x7e]")


def _python_floats(text: bytes) -> bytes:
    """Each float with an exponent, or four zeros after the point, as repr (json's float text)."""
    out: list[bytes] = []
    at = seen = 0  # copied up to `at`; lines up to `seen` looked at
    for pos in sorted(m.start() for pattern in (_EXPONENT, _ZEROS) for m in pattern.finditer(text)):
        if pos < seen:
            continue
        start = text.rfind(b"\n", 0, pos) + 1
        end = text.find(b"\n", pos)
        seen = end = len(text) if end < 0 else end
        line = _ODD_LINE.fullmatch(text, start, end)
        if line is not None:
            out += [text[at : line.start(2)], repr(float(line.group(2))).encode()]
            at = line.end(2)
    return b"".join(out) + text[at:] if out else text


def _escape(m: re.Match[str]) -> str:
    n = ord(m.group(0))
    if n <= 0xFFFF:
        return f"\\u{n:04x}"
    n -= 0x10000
    return f"\\u{0xD800 | (n >> 10):04x}\\u{0xDC00 | (n & 0x3FF):04x}"


def as_python_json(encoded: bytes, *, indent: int) -> bytes:
    """msgspec.json.encode's output, indented and spelled as json.dumps(..., indent=indent) spells it."""
    text = msgspec.json.format(encoded, indent=indent)
    text = _python_floats(text)
    if not text.isascii() or b"\x7f" in text:
        text = _NOT_ASCII.sub(_escape, text.decode("utf-8")).encode("ascii")
    return text


def reindent(text: bytes, depth: int) -> bytes:
    """Indented JSON moved `depth` spaces to the right (to sit inside a larger document)."""
    return text.replace(b"\n", b"\n" + b" " * depth)
