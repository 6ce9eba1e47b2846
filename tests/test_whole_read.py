"""A small trace is decoded in one go (trace.py `_decode_whole`): the same Trace as the streaming
reader gives, column by column, and for anything unusual the streaming reader's own error."""

from __future__ import annotations

import dataclasses
import gzip
from pathlib import Path

import numpy as np
import pytest
from dims_traces import fsdp_tp_job, write_job

from profile_overlap.analysis.read import trace as trace_module
from profile_overlap.analysis.read.stream import WHOLE_BYTES, small_content
from profile_overlap.analysis.read.trace import CHUNK_BYTES, Events, Trace, load_trace
from profile_overlap.core.errors import UserError

DATA = Path(__file__).parent / "data"
SMALL = [
    p
    for p in sorted(DATA.rglob("*.json*"))
    if p.name.endswith((".json", ".json.gz")) and (c := small_content(p)) is not None and len(c) <= WHOLE_BYTES
]  # the others are over WHOLE_BYTES, and streamed


def _streamed(path: Path):
    # Another chunk size keeps the streaming reader (the whole-content decode is for CHUNK_BYTES only).
    return load_trace(path, chunk_bytes=CHUNK_BYTES - 1)


def _same_events(a: Events, b: Events) -> None:
    assert a.names == b.names and a.tids == b.tids and a.shapes == b.shapes
    for column in ("name", "tid", "ts", "dur", "cat", "external_id", "shape"):
        x, y = getattr(a, column), getattr(b, column)
        assert x.dtype == y.dtype and np.array_equal(x, y, equal_nan=x.dtype.kind == "f"), column
    assert list(a.args.items()) == list(b.args.items())
    assert np.array_equal(a.args.external_ids, b.args.external_ids)


def test_the_test_data_has_small_traces_to_compare():
    assert len(SMALL) >= 4


@pytest.mark.parametrize("style", ["gpu", "cpu"])
def test_a_2d_job_with_its_process_groups_reads_whole_as_streamed(tmp_path, style):
    folder = write_job(fsdp_tp_job(style=style), tmp_path / style)
    for path in sorted(folder.iterdir()):
        assert trace_module._decode_whole(small_content(path)) is not None
        whole = load_trace(path)
        assert whole.groups and whole.world_size == 4
        _same_trace(whole, _streamed(path))


def _same_trace(whole: Trace, streamed: Trace) -> None:
    for f in dataclasses.fields(whole):
        x, y = getattr(whole, f.name), getattr(streamed, f.name)
        if isinstance(x, Events):
            _same_events(x, y)
        elif isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and np.array_equal(x, y, equal_nan=x.dtype.kind == "f"), f.name
        else:
            assert x == y, f.name


@pytest.mark.parametrize("path", SMALL, ids=lambda p: str(p.relative_to(DATA)))
def test_a_small_trace_read_whole_is_the_trace_the_streaming_reader_gives(path, monkeypatch):
    used = []
    decode_whole = trace_module._decode_whole
    monkeypatch.setattr(trace_module, "_decode_whole", lambda content: used.append(path) or decode_whole(content))
    whole = load_trace(path)
    assert used == [path] and decode_whole(small_content(path)) is not None  # the one-go decode read it
    _same_trace(whole, _streamed(path))


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "rank0.pt.trace.json.gz"
    path.write_bytes(gzip.compress(text.encode()))
    return path


EVENT = '{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1.0, "dur": 2.0}'


@pytest.mark.parametrize(
    "text",
    [
        '{"traceEvents": [' + EVENT + "]} trailing",
        '{"traceEvents": [' + EVENT + '], "traceEvents": []}',
        '{"traceEvents": []}',
        '{"traceEvents": {"a": 1}}',
        '{"traceEvents": [{"ph": "X", "ts": "soon"}]}',
    ],
    ids=["garbage after", "two traceEvents", "no events", "not an array", "a wrong type"],
)
def test_an_unusual_small_trace_is_read_by_the_streaming_reader(tmp_path, text):
    """Not decoded in one go: what the streaming reader makes of it, its trace or its error."""
    path = _write(tmp_path, text)
    assert trace_module._decode_whole(small_content(path)) is None

    def outcome(read):
        try:
            return read(path)
        except UserError as err:
            return str(err)

    whole, streamed = outcome(load_trace), outcome(_streamed)
    if isinstance(streamed, str):
        assert whole == streamed
    else:
        _same_trace(whole, streamed)
