"""Classifying a GPU trace's collective calls (analysis/file/events.py, _gpu_calls) works out each distinct
collective once: a trace repeats a few collectives every step, with shared argument objects
(analysis/read/trace.py), and the per-file cost of many small ranks is this fixed work (issue 38)."""

from __future__ import annotations

import json

from synthetic import write_large_trace

from profile_overlap.analysis.file import events
from profile_overlap.analysis.file.call_columns import SEND
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


def test_a_memo_hit_takes_its_direction_from_its_own_kernel_not_the_last_one_classified(tmp_path):
    """A send between two all_reduces: the second all_reduce is a memo hit, and once took the
    direction of the send's kernel name (the last one worked out), counted as a SEND."""
    all_reduce = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
    kernels = [all_reduce, "ncclKernel_Send_RING_SIMPLE", all_reduce]
    trace_events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 1000}]
    for i, name in enumerate(kernels):
        ts = 100 + 200 * i
        kernel = {"correlation": i + 1, "stream": 20, "device": 0}
        launch = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": ts, "dur": 5}
        trace_events.append({**launch, "args": {"correlation": i + 1}})
        trace_events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 20, "ts": ts + 10, "dur": 50, "args": kernel})
    doc = {"distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 2}, "traceEvents": trace_events}
    path = tmp_path / "rank0.pt.trace.json"
    path.write_text(json.dumps(doc))
    calls = extract(load_trace(path)).calls
    assert calls.kind_names() == ["all_reduce", "send_recv", "all_reduce"]
    assert list(calls.direction) == [0, SEND, 0]
