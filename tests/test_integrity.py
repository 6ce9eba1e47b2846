"""Integrity checks: each one fires on a trace built to break it (synthetic Kineto traces from
benchmarks/synthetic.py, or a real gloo trace with one event added), stays ok on clean traces,
and reaches the record, `analyze --strict`, the console and the report."""

from __future__ import annotations

import gzip
import json
import tracemalloc
from pathlib import Path

import pytest
from synthetic import NCCL_KERNEL, gpu_trace, write_trace

from profile_overlap.analysis.folder import analyze_dir
from profile_overlap.analysis.options import AnalysisOptions
from profile_overlap.api import job

from conftest import DATA, cli

STEPS = [(1, 0, 1000), (2, 1000, 2000), (3, 2000, 3000)]
COMM = [(20, 100, 300), (20, 1100, 1300), (20, 2100, 2300)]
COMPUTE = [(7, 0, 200), (7, 1000, 1200), (7, 2000, 2200)]


def write_ranks(folder: Path, docs: list[dict]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i, doc in enumerate(docs):
        write_trace(doc, folder / f"rank{doc['distributedInfo']['rank'] if 'distributedInfo' in doc else i}_{i}.pt.trace.json.gz")
    return folder


def checks(folder: Path, **options) -> dict:
    return {c.name: c for c in analyze_dir(folder, AnalysisOptions(**options), max_workers=1).integrity.checks}


def pair(comm=COMM, compute=COMPUTE, steps=STEPS, **kwargs) -> list[dict]:
    """Two ranks' traces, each step labelled `forward` from its start (a clean trace has phases)."""
    docs = [gpu_trace(comm, compute, steps=steps, rank=r, world_size=2, **kwargs) for r in (0, 1)]
    for doc in docs:
        main = doc["traceEvents"][0]["tid"]
        labels = [
            {"ph": "X", "cat": "user_annotation", "name": "forward", "pid": main, "tid": main, "ts": s, "dur": e - s} for _, s, e in steps
        ]
        doc["traceEvents"] += labels
    return docs


def kernels(doc: dict, name: str = NCCL_KERNEL) -> list[dict]:
    return [e for e in doc["traceEvents"] if e.get("cat") == "kernel" and e["name"] == name]


def test_clean_synthetic_pair_is_all_ok(tmp_path):
    found = checks(write_ranks(tmp_path, pair()))
    assert {c.status for c in found.values()} == {"ok"}, {n: c.detail for n, c in found.items() if c.status != "ok"}
    assert list(found)[:4] == ["ranks.world_size", "ranks.duplicates", "ranks.profiler_steps", "steps.common"]


def test_traces_in_tests_data():
    """No error unless a trace really is broken: trace_filter's events are sampled from a
    128-rank job without process groups, so its k-th all_reduce on rank 0 is another call than
    on rank 1 (the sizes differ), and wait/transfer pairs different calls."""
    for folder in sorted(p for p in DATA.iterdir() if p.is_dir()):
        errors = {n: c.detail for n, c in checks(folder).items() if c.status == "error"}
        if folder.name == "hta_trace_filter_2rank":
            assert list(errors) == ["collectives.matched"] and "all_reduce #1" in errors["collectives.matched"], errors
        elif folder.name == "tracelens_b200_1rank":
            # Its MoE GEMMs start up to 3.7 µs before the previous kernel on their stream ends: programmatic
            # dependent launch (Hopper and later) lets a kernel start early on purpose; the check calls it an error.
            assert list(errors) == ["streams.overlap"] and "up to 3.7 µs" in errors["streams.overlap"], errors
        else:
            assert errors == {}, (folder.name, errors)


def test_ranks_missing_and_beyond_world(tmp_path):
    one = checks(write_ranks(tmp_path / "a", [gpu_trace(COMM, COMPUTE, steps=STEPS, rank=0, world_size=4)]))["ranks.world_size"]
    assert one.status == "warning" and one.figures["missing"] == [[1, 3]] and one.figures["missing_count"] == 3
    assert one.detail == "1 of 4 ranks found; missing ranks 1, 2, 3"
    docs = [gpu_trace(COMM, COMPUTE, steps=STEPS, rank=r, world_size=2) for r in (0, 5)]
    beyond = checks(write_ranks(tmp_path / "b", docs))["ranks.world_size"]
    assert beyond.status == "error" and beyond.figures["beyond_world"] == [5]


def test_a_large_world_lists_its_missing_ranks_as_runs_in_small_memory(tmp_path):
    folder = write_ranks(tmp_path, [gpu_trace(COMM, COMPUTE, steps=STEPS, rank=r, world_size=2**20) for r in (0, 3)])
    tracemalloc.start()
    try:
        found = checks(folder)["ranks.world_size"]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 48 << 20, f"{peak / 2**20:.0f} MiB"
    assert found.status == "warning" and found.figures["missing"] == [[1, 2], [4, 2**20 - 1]]
    assert found.figures["missing_count"] == 2**20 - 2
    assert found.detail == f"2 of {2**20} ranks found; missing ranks 1, 2, 4, 5, 6, 7, 8, 9 and {2**20 - 10} more"


@pytest.mark.parametrize("world_size", [10**7, 10**9, -3])
def test_a_world_size_no_job_has_is_one_error_line_naming_it_and_the_files_found(tmp_path, world_size):
    docs = [gpu_trace(COMM, COMPUTE, steps=STEPS, rank=r, world_size=2) for r in (0, 1)]
    for doc in docs:
        doc["distributedInfo"]["world_size"] = world_size
    folder = write_ranks(tmp_path, docs)
    tracemalloc.start()
    try:
        analysis = analyze_dir(folder, max_workers=1)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    found = {c.name: c for c in analysis.integrity.checks}["ranks.world_size"]
    assert found.status == "error" and "\n" not in found.detail, found.detail
    assert f"declare a world size of {world_size:,} and 2 rank file(s) were found" in found.detail
    assert analysis.world_size == 2  # the ranks found: the declaration is not believed
    assert peak < 48 << 20, f"{peak / 2**20:.0f} MiB"
    record = job.build_job_record(tmp_path)
    assert record.job.missing_ranks == () and record.env.world_size == 2


def test_duplicate_rank_left_out_is_an_error(tmp_path):
    docs = [*pair(), gpu_trace(COMM, COMPUTE, steps=STEPS, rank=1, world_size=2)]
    found = checks(write_ranks(tmp_path, docs), skip_bad=True)["ranks.duplicates"]
    assert found.status == "error" and len(found.figures["left_out"]) == 1


def test_ranks_without_steps_and_steps_on_some_ranks(tmp_path):
    assert checks(write_ranks(tmp_path / "a", pair(steps=())))["ranks.profiler_steps"].status == "warning"
    docs = [gpu_trace(COMM, COMPUTE, steps=STEPS[:2], rank=0), gpu_trace(COMM, COMPUTE, steps=STEPS[1:], rank=1)]
    found = checks(write_ranks(tmp_path / "b", docs))["steps.common"]
    assert found.status == "warning" and found.figures["partial_steps"] == [1, 3]


def test_unmatched_and_resized_collectives(tmp_path):
    docs = [gpu_trace(COMM, COMPUTE, steps=STEPS, rank=0), gpu_trace(COMM[:2], COMPUTE, steps=STEPS, rank=1)]
    found = checks(write_ranks(tmp_path / "a", docs))["collectives.matched"]
    assert found.status == "warning" and "all_reduce #2 of group 0 on rank 0" in found.detail
    docs = pair()
    kernels(docs[1])[1]["args"]["In msg nelems"] = kernels(docs[1])[1]["args"]["Out msg nelems"] = 4096
    found = checks(write_ranks(tmp_path / "b", docs))["collectives.matched"]
    assert found.status == "error" and found.figures["size_mismatch"][0]["call"] == 1


def test_calls_without_process_group_among_several_groups(tmp_path):
    docs = pair()
    for doc in docs:
        for k in kernels(doc):
            del k["args"]["Process Group Name"]
        doc["distributedInfo"]["pg_config"].append({"pg_name": "1", "pg_size": 2, "ranks": [0, 1]})
    found = checks(write_ranks(tmp_path, docs))["collectives.process_group"]
    assert found.status == "warning" and found.figures["calls_without_group"] == {"0": 3, "1": 3}


def test_unclassified_cpu_events_listed_by_name(tmp_path):
    for src in sorted((DATA / "gloo_2rank").glob("*.json.gz")):
        doc = json.loads(gzip.decompress(src.read_bytes()))
        step = next(e for e in doc["traceEvents"] if e.get("name", "").startswith("ProfilerStep#"))
        extra = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": step["pid"], "tid": 99999, "ts": step["ts"], "dur": 5000.0}
        doc["traceEvents"].append(extra)
        write_trace(doc, tmp_path / src.name)
    found = checks(tmp_path)["classification.unclassified"]
    assert found.status == "warning" and found.figures["top"][0] == {"name": "aten::mm", "count": 2, "total_us": 10000.0}
    assert checks(DATA / "gloo_2rank")["classification.unclassified"].status == "ok"


def test_renamed_nccl_kernels_counted_as_compute(tmp_path):
    """HTA's NaN: NCCL renamed its kernels, and a name table that did not know the new name
    found no communication at all. Here a name our table lacks does the same."""
    docs = pair()
    for doc in docs:
        for k in kernels(doc):
            k["name"] = "mscclKernel_AllReduce_RING_LL_Sum_float"
        doc["traceEvents"].append({"ph": "X", "cat": "cpu_op", "name": "nccl:all_reduce", "pid": 4242, "tid": 4242, "ts": 90, "dur": 5})
    found = checks(write_ranks(tmp_path / "a", docs))["classification.communication"]
    assert found.status == "error" and found.figures["ranks_without_communication"] == [0, 1]
    docs = pair()
    kernels(docs[0])[0]["name"] = "my_allgather_gemm_kernel"
    found = checks(write_ranks(tmp_path / "b", docs))["classification.communication"]
    assert found.status == "warning" and "my_allgather_gemm_kernel" in found.detail


def test_sync_events_are_ignored_and_listed(tmp_path):
    """HTA counted sync events as compute; here they are ignored by rule, and the check lists them."""
    docs = pair()
    for doc in docs:
        doc["traceEvents"].append({"ph": "X", "cat": "kernel", "name": "Event Sync", "pid": 0, "tid": 7, "ts": 400, "dur": 300, "args": {}})
    analysis = analyze_dir(write_ranks(tmp_path, docs), max_workers=1)
    found = {c.name: c for c in analysis.integrity.checks}["classification.unclassified"]
    assert found.status == "ok" and found.figures["ignored_by_rule"]["0"] == [{"name": "Event Sync", "count": 1, "total_us": 300.0}]
    assert analysis.ranks[0].compute_us == 600  # the three 200 µs compute kernels, not the sync


def test_unknown_sizes(tmp_path):
    docs = pair()
    for k in kernels(docs[0]):
        del k["args"]["In msg nelems"], k["args"]["Out msg nelems"]
    found = checks(write_ranks(tmp_path, docs))["classification.sizes"]
    assert found.status == "warning" and found.figures["unknown_size_calls"] == {"0": {"all_reduce": 3}}


def test_streams_shared_default_and_overlapping(tmp_path):
    found = checks(write_ranks(tmp_path / "a", pair(comm=[(7, s + 300, e + 300) for _, s, e in COMM])))
    assert found["streams.shared"].status == "warning" and found["streams.shared"].figures["shared"] == {"0": ["7"], "1": ["7"]}
    assert found["streams.default_stream"].status == "warning"
    assert found["streams.overlap"].status == "ok"
    found = checks(write_ranks(tmp_path / "b", pair(compute=[*COMPUTE, (7, 150, 400)])))["streams.overlap"]
    assert found.status == "error" and found.figures["max_overlap_us"] == {"0": 50.0, "1": 50.0}
    assert checks(DATA / "gloo_2rank")["streams.overlap"].detail == "CPU traces: no GPU streams"


def test_time_outside_steps_and_start_gap(tmp_path):
    # A 17-second wait before the first step, counted as communication without --steps.
    comm = [(20, -17_000_000, 50), *COMM]
    folder = write_ranks(tmp_path, pair(comm=comm))
    found = checks(folder)
    assert found["timing.outside_steps"].status == "error"
    assert found["timing.start_gap"].status == "warning" and found["timing.start_gap"].figures["gaps"]["0"]["gap_us"] == 17_000_000
    inside = checks(folder, steps=(None, None))
    assert inside["timing.outside_steps"].status == "ok" and inside["timing.start_gap"].status == "ok"
    # 100 µs of communication launched after the last step's range closed (on GPU a kernel launched
    # inside a step belongs to it, wherever it runs).
    few = checks(write_ranks(tmp_path / "b", pair(comm=[(20, 3000, 3100), *COMM])))["timing.outside_steps"]
    assert few.status == "warning", few.detail


def test_zero_and_negative_durations(tmp_path):
    assert checks(write_ranks(tmp_path / "a", pair(compute=[*COMPUTE, (7, 500, 500)])))["timing.durations"].status == "warning"
    found = checks(write_ranks(tmp_path / "b", pair(compute=[*COMPUTE, (7, 600, 550)])))["timing.durations"]
    assert found.status == "error" and found.figures["negative"] == {"0": 1, "1": 1}


def test_trace_cut_in_the_middle_of_a_step(tmp_path):
    steps = [*STEPS, (4, 3000, 3200)]
    found = checks(write_ranks(tmp_path, pair(steps=steps)))["timing.cut_short"]
    assert found.status == "warning" and found.figures["cut_short"]["0"]["step"] == 4


@pytest.mark.slow
def test_strict_exit_code_json_and_console(tmp_path):
    folder = write_ranks(tmp_path / "t", pair(compute=[*COMPUTE, (7, 150, 400)]))
    plain = cli(["analyze", str(folder), "--json", str(tmp_path / "a.json")])
    assert plain.returncode == 0, plain.stderr
    assert "integrity: ERROR streams.overlap: 2 kernel(s) start before" in plain.stdout
    record = json.loads((tmp_path / "a.json").read_text())["integrity"]
    assert {"name", "status", "detail", "meaning", "affects", "figures"} <= set(record["checks"][0])
    assert record["clock_offsets_us"]["0"] == 0.0 and "1" in record["clock_uncertainty_us"]
    strict = cli(["analyze", str(folder), "--strict"])
    assert strict.returncode == 1 and "analyze --strict: 1 integrity check(s) failed: streams.overlap" in strict.stderr
    clean = cli(["analyze", str(write_ranks(tmp_path / "c", pair())), "--strict"])
    assert clean.returncode == 0 and "integrity: 17 checks ok" in clean.stdout


@pytest.mark.slow
def test_own_split_run_is_clean_and_reported(split_run_2):
    run, proc = split_run_2
    analysis = json.loads((run / "metrics.json").read_text())["modes"]["split"]["analysis"]
    bad = {c["name"]: c["detail"] for c in analysis["integrity"]["checks"] if c["status"] != "ok"}
    assert bad == {}
    assert "integrity: 17 checks ok" in proc.stdout
    report = (run / "report.md").read_text()
    assert "## Integrity" in report and "All 17 checks are ok." in report


def test_report_verdict_names_numbers_on_a_failed_check(tmp_path):
    from profile_overlap.analysis.record import analysis_record
    from profile_overlap.render.integrity import section_blocks, verdict_note

    record = analysis_record(analyze_dir(write_ranks(tmp_path, pair(compute=[*COMPUTE, (7, 150, 400)])), max_workers=1)).integrity
    note = "".join(x if isinstance(x, str) else x.text for x in verdict_note({"job": record}))
    assert note.startswith("Integrity: the overlap numbers rest on the failed check streams.overlap (2 kernel(s)")
    assert len(section_blocks({"job": record})[1].rows) == 1


def test_calls_are_numbered_before_the_step_windows(tmp_path):
    """A step window can cut through the calls differently on each rank (here rank 0's second
    call starts between its steps, rank 1's inside step 2): numbered over the whole trace, the
    k-th call is the same call on both ranks, so wait/transfer pairs the right calls."""
    steps = [(1, 0, 1000), (2, 1100, 2000)]
    comm = {0: [(20, 100, 200), (20, 1050, 1080), (20, 1200, 1300)], 1: [(20, 100, 250), (20, 1150, 1180), (20, 1200, 1350)]}
    docs = [gpu_trace(comm[r], COMPUTE, steps=steps, rank=r) for r in (0, 1)]
    for doc in docs:
        for k, nelems in zip(kernels(doc), (1024, 2048, 4096)):
            k["args"]["In msg nelems"] = k["args"]["Out msg nelems"] = nelems
    result = analyze_dir(write_ranks(tmp_path, docs), AnalysisOptions(steps=(None, None)), max_workers=1)
    waits = {w.rank: (w.wait_us, w.transfer_us, w.matched) for w in result.waits}
    assert waits == {0: (0.0, 200.0, 2), 1: (100.0, 200.0, 2)}  # calls #0 and #2: 100 vs 150 µs each
    assert {c.name: c.status for c in result.integrity.checks}["collectives.matched"] == "ok"
