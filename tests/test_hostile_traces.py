"""Hostile traces (issue 34): files built to exhaust memory, time or the stack get one line, in
bounded memory and linear time, and `--skip-bad` skips them like any other bad file."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import msgspec
import pytest

from profile_overlap.analysis.read.stream import NotATrace, stream_events
from profile_overlap.analysis.read.trace import load_trace
from profile_overlap.core.errors import UserError

from conftest import DATA

MB = 1 << 20
GLOO = DATA / "gloo_2rank"


def chunks_of(parts, chunk: int = MB):
    """The bytes of `parts` (an iterable of bytes) in chunks of `chunk` bytes, made as they are read."""
    pending = b""
    for part in parts:
        pending += part
        while len(pending) >= chunk:
            yield pending[:chunk]
            pending = pending[chunk:]
    if pending:
        yield pending


class CountingDecode:
    """The events decoder, counting the bytes it is given."""

    def __init__(self) -> None:
        self.bytes = 0
        self.calls = 0
        self._decoder = msgspec.json.Decoder()

    def __call__(self, data: bytes) -> list:
        self.bytes += len(data)
        self.calls += 1
        return self._decoder.decode(data)


def test_whitespace_before_trace_events_is_read_only_up_to_a_bound():
    read = []

    def whitespace(total: int):
        for _ in range(total // MB):
            read.append(MB)
            yield b" " * MB
        yield b"{}"

    tracemalloc.start()
    try:
        with pytest.raises(NotATrace) as err:
            stream_events(whitespace(128 * MB), CountingDecode(), lambda events: None)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert sum(read) <= 33 * MB, f"read {sum(read) / MB:.0f} MiB before giving up"
    assert peak < 80 * MB, f"peak {peak / MB:.0f} MiB"
    assert "no `traceEvents` array in its first 32 MiB" in str(err.value)


def long_string_of_braces(total: int):
    yield b'{"traceEvents": [{"ph": "X", "name": "a"}, {"ph": "X", "name": "'
    for _ in range(total // MB):
        yield b"}," * (MB // 2)
    yield b'"}, {"ph": "X", "name": "b"}]}'


@pytest.mark.parametrize("total", [4 * MB, 16 * MB])
def test_a_long_string_full_of_event_ends_is_decoded_a_bounded_number_of_times(total):
    decode, names = CountingDecode(), []
    stream_events(chunks_of(long_string_of_braces(total), 256 << 10), decode, lambda events: names.extend(e["name"][:1] for e in events))
    assert names == ["a", "}", "b"]
    # Each byte is decoded a bounded number of times, whatever the string's length (before: every
    # chunk retried 16 cuts over everything read so far, 16 x 64 chunks x 8 MiB for 16 MiB).
    assert decode.bytes <= 64 * total, f"{decode.bytes / total:.0f} bytes decoded per byte, {decode.calls} decodes"


def test_a_string_longer_than_the_bound_is_one_line(tmp_path):
    path = tmp_path / "rank0.json"
    with open(path, "wb") as f:
        for part in long_string_of_braces(40 * MB):
            f.write(part)
    with pytest.raises(UserError) as err:
        load_trace(path)
    message = str(err.value)
    assert "\n" not in message and "without the end of an event" in message and "--skip-bad" in message


def test_a_skipped_file_s_buffers_are_let_go_while_the_others_are_read(tmp_path):
    """--skip-bad keeps each bad file's error while it reads the rest: its message only. The error's
    traceback held the reader's frames, and with them its buffers, tens of MB per giant string, in a
    cycle only the garbage collector would have freed."""
    from profile_overlap.analysis.folder import read_file

    path = tmp_path / "rank0.json"
    with open(path, "wb") as f:
        for part in long_string_of_braces(40 * MB):
            f.write(part)
    tracemalloc.start()
    try:
        result = read_file(str(path))
        held = tracemalloc.get_traced_memory()[0] / MB
    finally:
        tracemalloc.stop()
    assert isinstance(result, UserError) and "without the end of an event" in str(result)
    assert held < 2, f"{held:.0f} MiB still held by the error of a skipped file"


def deep(levels: int) -> bytes:
    return b'{"traceEvents": [{"ph": "X", "name": "a", "args": {"x": ' + b"[" * levels + b"]" * levels + b"}}]}"


@pytest.mark.parametrize("doc", [deep(200_000), b"[" * 200_000 + b"]" * 200_000], ids=["in an event", "the whole file"])
def test_deep_nesting_is_one_line_and_skipped_with_skip_bad(tmp_path, capsys, doc):
    from profile_overlap.cli.main import main

    folder = tmp_path / "traces"
    folder.mkdir()
    good = sorted(GLOO.glob("host_0*"))[0]
    (folder / good.name).write_bytes(good.read_bytes())
    (folder / "rank1.pt.trace.json").write_bytes(doc)
    assert main(["analyze", str(folder)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert "rank1.pt.trace.json" in err and "nest over" in err and "--skip-bad" in err
    assert main(["analyze", str(folder), "--skip-bad"]) == 0
    out, err = capsys.readouterr()
    assert err.startswith("warning: ") and len(err.strip().splitlines()) == 1 and "nest over" in err, err
    assert "Overlap per rank" in out


def test_perfetto_on_an_event_field_of_the_wrong_type_is_one_line(tmp_path, capsys):
    """`analyze` skips an event's flow id; perfetto copies it, and an array there is one line, not a traceback."""
    from synthetic import gpu_trace, write_trace

    from profile_overlap.cli.main import main

    folder = tmp_path / "traces"
    folder.mkdir()
    for rank in (0, 1):
        doc = gpu_trace([(20, 100, 300)], [(7, 0, 200)], steps=[(1, 0, 1000)], rank=rank, world_size=2)
        doc["traceEvents"][2]["id"] = [1, 2]
        write_trace(doc, folder / f"rank{rank}.pt.trace.json")
    assert main(["analyze", str(folder)]) == 0
    capsys.readouterr()
    assert main(["perfetto", str(folder), "--out", str(tmp_path / "p.perfetto.json.gz")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "rank0.pt.trace.json is not a PyTorch profiler trace" in err, err
    assert not (tmp_path / "p.perfetto.json.gz").exists()


def _two_ranks_with_a_far_kernel(tmp_path: Path, field: str, value: float) -> Path:
    """Two GPU ranks' traces, rank 1's last compute kernel with `field` (ts, dur, or both: "ts+dur") set to `value`."""
    from synthetic import gpu_trace, write_trace

    folder = tmp_path / "traces"
    folder.mkdir()
    for rank in (0, 1):
        doc = gpu_trace([(20, 100, 300)], [(7, 0, 200), (7, 400, 500)], steps=[(1, 0, 1000)], rank=rank, world_size=2)
        if rank == 1:
            for name in field.split("+"):
                doc["traceEvents"][-1][name] = value
        write_trace(doc, folder / f"rank{rank}.pt.trace.json")
    return folder


@pytest.mark.parametrize("field, value", [("ts", 5e15), ("dur", 5e15)])  # on a profiler clock (int64 ns), beyond Perfetto
def test_perfetto_on_a_time_beyond_its_clock_is_one_line_naming_the_file(tmp_path, capsys, field, value):
    from profile_overlap.cli.main import main

    folder = _two_ranks_with_a_far_kernel(tmp_path, field, value)
    assert main(["perfetto", str(folder), "--out", str(tmp_path / "p.perfetto.json.gz")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert "rank1.pt.trace.json" in err and "beyond what a Perfetto trace holds" in err, err


@pytest.mark.parametrize(
    "where, key, value",
    [("kernel", "External id", 2**63), ("kernel", "correlation", 2**64), ("kernel", "In msg nelems", 2**60), ("info", "rank", 2**40)],
)
def test_a_number_beyond_the_columns_range_is_one_line(tmp_path, capsys, where, key, value):
    from synthetic import NCCL_KERNEL, gpu_trace

    from profile_overlap.cli.main import main

    doc = gpu_trace([(20, 100, 300)], [(7, 0, 200)], steps=[(1, 0, 1000)], rank=0, world_size=1)
    if where == "info":
        doc["distributedInfo"][key] = value
    else:
        next(e for e in doc["traceEvents"] if e["name"] == NCCL_KERNEL)["args"][key] = value
    (tmp_path / "rank0.pt.trace.json").write_text(json.dumps(doc))  # orjson refuses 2**64
    assert main(["analyze", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "is not a PyTorch profiler trace" in err and key in err, err


@pytest.mark.parametrize("field, value", [("ts", 1e17), ("ts", 1e308), ("dur", 1e308), ("ts", -1e308), ("ts+dur", 1e308)])
def test_analyze_on_a_time_beyond_any_profiler_clock_is_one_line_and_no_numpy_warning(tmp_path, capfd, field, value):
    import warnings

    from profile_overlap.cli.main import main

    folder = _two_ranks_with_a_far_kernel(tmp_path, field, value)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an overflow warning would be a second line on the user's terminal
        assert main(["analyze", str(folder)]) == 2
    err = capfd.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert "rank1.pt.trace.json" in err and "beyond any profiler clock" in err, err


@pytest.mark.parametrize(
    "damage",
    ["none", "two members", "zero padding", "cut short", "bad checksum", "garbage after", "over the content bound"],
)
def test_a_small_gzip_file_reads_as_gzipfile_reads_it(tmp_path, damage):
    """read_chunks inflates a small gzip file in one go: the same bytes as GzipFile, or the same
    error, whatever is wrong with it."""
    import gzip

    from profile_overlap.analysis.read import stream

    body = b'{"traceEvents":[' + b",".join(b'{"ph":"X","name":"op%d","ts":%d,"dur":1}' % (i, i) for i in range(3000)) + b"]}"
    one = gzip.compress(body)
    data = {
        "none": one,
        "two members": one + one,
        "zero padding": one + b"\0" * 5 + one,
        "cut short": one[:-5],
        "bad checksum": one[:-8] + bytes(8),
        "garbage after": one + b"garbage",
        "over the content bound": gzip.compress(b" " * (stream.SMALL_CONTENT_BYTES + 1)),
    }[damage]
    path = tmp_path / "rank0.json.gz"
    path.write_bytes(data)

    def gzipfile() -> bytes:
        with gzip.open(path) as f:
            return f.read()

    try:
        want: bytes | type[BaseException] = gzipfile()
    except Exception as err:  # noqa: BLE001 - the same error type is what is checked
        want = type(err)
    try:
        got: bytes | type[BaseException] = b"".join(stream.read_chunks(path, 1 << 16))
    except Exception as err:  # noqa: BLE001
        got = type(err)
    assert got == want
    assert (stream._small_gzip(data) is not None) == (damage in ("none", "two members", "zero padding"))
