"""The reader's columns (analysis/read/trace.py): codes and ids kept in their narrow types while the
file is read, widened the first time a value does not fit, and each kernel linked to the runtime
call that launched it when the file is read (issue 38: no full-width copy, no runtime columns kept)."""

from __future__ import annotations

import json

import numpy as np

from profile_overlap.analysis.read.trace import load_trace


def _write(path, events):
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 2}, "traceEvents": events}
    path.write_text(json.dumps(doc))
    return path


def _op(name, ts, tid=1, **args):
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": 1, "args": args}


def test_over_32767_names_and_threads_widen_the_code_columns_and_keep_every_name(tmp_path):
    n = 40_000
    trace = load_trace(_write(tmp_path / "rank0.pt.trace.json", [_op(f"aten::op{i}", i, tid=i + 1) for i in range(n)]))
    cpu = trace.cpu
    assert cpu.name.dtype == np.int32 and cpu.tid.dtype == np.int32
    assert [cpu.name_of(r) for r in (0, 32_767, 32_768, n - 1)] == ["aten::op0", "aten::op32767", "aten::op32768", f"aten::op{n - 1}"]
    assert [cpu.tids[int(cpu.tid[r])] for r in (0, 32_768, n - 1)] == ["1", "32769", str(n)]
    few = load_trace(_write(tmp_path / "few" / "rank0.pt.trace.json", [_op("aten::mm", i) for i in range(10)]))
    assert few.cpu.name.dtype == np.int16 and few.cpu.tid.dtype == np.int16


def test_ids_beyond_int32_widen_to_int64_and_still_link_a_kernel_to_its_launch(tmp_path):
    big = 2**33 + 5
    runtime = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "dur": 3}
    kernel = {"ph": "X", "cat": "kernel", "pid": 0, "tid": 20, "dur": 5}
    events = [
        {**runtime, "tid": 7, "ts": 100, "args": {"correlation": 1}},
        {**runtime, "tid": 8, "ts": 200, "args": {"correlation": big}},
        {**kernel, "name": "k1", "ts": 110, "args": {"correlation": 1, "External id": 3}},
        {**kernel, "name": "k2", "ts": 210, "args": {"correlation": big, "External id": big}},
    ]
    trace = load_trace(_write(tmp_path / "rank0.pt.trace.json", events))
    assert trace.kernels.external_id.dtype == np.int64
    assert trace.kernels.external_id.tolist() == [3, big]
    assert trace.launch.tolist() == [100.0, 200.0]
    assert [trace.cpu.tids[int(t)] for t in trace.launch_tid] == ["7", "8"]


def test_a_kernel_links_to_the_first_runtime_call_of_its_correlation_and_without_one_to_none(tmp_path):
    runtime = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "dur": 3}
    kernel = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 20, "dur": 5}
    events = [
        {**runtime, "tid": 1, "ts": 50, "args": {"correlation": 9}},
        {**runtime, "tid": 2, "ts": 40, "args": {"correlation": 9}},  # the same correlation again: the first one counts
        {**kernel, "ts": 60, "args": {"correlation": 9}},
        {**kernel, "ts": 70, "args": {"correlation": 10}},  # no runtime call with it
        {**kernel, "ts": 80},  # no correlation at all
    ]
    trace = load_trace(_write(tmp_path / "rank0.pt.trace.json", events))
    assert trace.launch[0] == 50.0 and trace.cpu.tids[int(trace.launch_tid[0])] == "1"
    assert np.isnan(trace.launch[1:]).all() and trace.launch_tid[1:].tolist() == [-1, -1]
    assert trace.kernels.external_id.dtype == np.int32  # ids that fit stay narrow
