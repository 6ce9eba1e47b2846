"""Classifying a GPU trace's collective calls (analysis/file/events.py, _gpu_calls) works out each distinct
collective once: a trace repeats a few collectives every step, with shared argument objects
(analysis/read/trace.py), and the per-file cost of many small ranks is this fixed work (issue 38)."""

from __future__ import annotations

from synthetic import write_large_trace

from profile_overlap.analysis.file import events
from profile_overlap.analysis.file.events import extract
from profile_overlap.analysis.read.trace import load_trace


def test_each_distinct_collective_is_classified_once_not_once_per_call(tmp_path, monkeypatch):
    path = tmp_path / "rank0.pt.trace.json"
    write_large_trace(path, target_bytes=500_000, rank=0, world_size=2, layers_per_step=20)
    trace = load_trace(path)
    expected = extract(trace).calls
    seen = []
    real = events.collective_nbytes
    monkeypatch.setattr(events, "collective_nbytes", lambda *a, **k: seen.append(1) or real(*a, **k))
    calls = extract(trace).calls
    assert len(calls) > 100
    assert len(seen) <= 4  # one all_reduce, sized from its kernel's or its op's arguments
    assert calls == expected  # the same kinds, sizes, groups and hints
