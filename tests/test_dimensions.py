"""Dimensions and pipeline stages (issue 35): every process group and pipeline stage measured on
its own. GPU-style traces written here with their answers worked by hand from the intervals;
the examples on real gloo ranks (fsdp_tp_train.py, pipeline_train.py) for the inference on CPU;
and tests/dims_traces.py's generated jobs, within 0.5% (dimensions) and 1% (bubble) of their truth."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from profile_overlap.analysis.folder import analyze_dir
from profile_overlap.analysis.record import to_json

from conftest import shared_example

PID = 100
MiB = 1 << 20
DIM_GROUPS = [
    {"pg_name": "0", "pg_desc": "default_pg", "pg_size": 4, "ranks": [0, 1, 2, 3]},
    {"pg_name": "1", "pg_desc": "mesh_dp", "pg_size": 2, "ranks": [0, 2]},
    {"pg_name": "2", "pg_desc": "mesh_dp", "pg_size": 2, "ranks": [1, 3]},
    {"pg_name": "3", "pg_desc": "mesh_tp", "pg_size": 2, "ranks": [0, 1]},
    {"pg_name": "4", "pg_desc": "mesh_tp", "pg_size": 2, "ranks": [2, 3]},
]
NCCL = {"all_reduce": "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "all_gather": "ncclDevKernel_AllGather_RING_LL"}
NCCL |= {
    "reduce_scatter": "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL",
    "send": "ncclDevKernel_SendRecv",
    "recv": "ncclDevKernel_SendRecv",
}


def gpu_trace(rank: int, world: int, groups: list[dict], compute: list[tuple[int, int]], calls: list[tuple], step_end: int = 1000) -> dict:
    """One rank's GPU-style trace: compute kernels on stream 7, each call (kind, pg, start, end,
    nbytes[, kernel name]) a kernel on stream 20 + pg carrying PyTorch's collective args, every kernel
    launched from the main thread as it starts, inside ProfilerStep#1 [0, step_end)."""
    ranks = {g["pg_name"]: g["ranks"] for g in groups}
    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": PID, "tid": PID, "ts": 0, "dur": step_end}]
    kernels = [(7, s, e, "gemm_kernel", {}) for s, e in compute]
    for kind, pg, s, e, nbytes, *name in calls:
        args = {"Collective name": kind, "In msg nelems": nbytes // 4, "Out msg nelems": nbytes // 4, "dtype": "Float"}
        args |= {"Group size": len(ranks[pg]), "Process Group Name": pg, "Process Group Ranks": str(ranks[pg])}
        kernels.append((20 + int(pg), s, e, name[0] if name else NCCL[kind], args))
    for corr, (stream, s, e, name, args) in enumerate(kernels, start=1):
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": PID, "tid": PID, "ts": s, "dur": 0.5,
                       "args": {"correlation": corr}})  # fmt: skip
        events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": s, "dur": e - s,
                       "args": {"stream": stream, "correlation": corr, "External id": corr, **args}})  # fmt: skip
    info = {"backend": "nccl", "rank": rank, "world_size": world, "pg_config": groups}
    return {"schemaVersion": 1, "traceEvents": events, "distributedInfo": info}


def write(folder: Path, docs: list[dict]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for r, doc in enumerate(docs):
        (folder / f"rank{r}.pt.trace.json").write_text(json.dumps(doc))
    return folder


def two_d(rank: int) -> dict:
    """dp x tp on 4 ranks. Compute [0,100) and [150,300); tp all_reduces [100,150) and [320,330);
    dp all_gather [200,260) (hidden) and reduce_scatter [300,340); 1 MiB each."""
    dp, tp = ("1", "3") if rank == 0 else ("2", "3") if rank == 1 else ("1", "4") if rank == 2 else ("2", "4")
    calls = [
        ("all_reduce", tp, 100, 150, MiB),
        ("all_gather", dp, 200, 260, MiB),
        ("reduce_scatter", dp, 300, 340, MiB),
        ("all_reduce", tp, 320, 330, MiB),
    ]
    return gpu_trace(rank, 4, DIM_GROUPS, [(0, 100), (150, 300)], calls)


def test_a_2d_job_reads_each_dimension_with_its_own_groups_and_exposed_time(tmp_path):
    plain = to_json(analyze_dir(write(tmp_path, [two_d(r) for r in range(4)])))
    dims = plain["dimensions"]
    assert sorted(dims) == ["dp", "tp"]
    assert dims["dp"]["pg_names"] == ["1", "2"] and dims["tp"]["pg_names"] == ["3", "4"]
    assert dims["dp"]["group_size"] == dims["tp"]["group_size"] == 2
    for r in map(str, range(4)):
        tp, dp = dims["tp"]["ranks"][r], dims["dp"]["ranks"][r]
        assert (tp["calls"], tp["bytes"], tp["comm_us"], tp["hidden_us"], tp["exposed_us"]) == (2, 2 * MiB, 60, 0, 60)
        assert (dp["calls"], dp["bytes"], dp["comm_us"], dp["hidden_us"], dp["exposed_us"]) == (2, 2 * MiB, 100, 60, 40)
        # busbw with the group's own size (n = 2): all_reduce 2(n-1)/n = 1, all_gather/reduce_scatter (n-1)/n = 1/2.
        assert tp["busbw_gbps"] == pytest.approx(2 * MiB / 60e3, rel=1e-3)
        assert dp["busbw_gbps"] == pytest.approx(MiB / 100e3, rel=1e-3)
        # Every rank runs the same durations: the fastest is everyone's, no wait.
        assert (tp["wait_us"], tp["transfer_us"], dp["wait_us"], dp["transfer_us"]) == (0, 60, 0, 100)
        rank = next(x for x in plain["ranks"] if x["rank"] == int(r))
        # The dimensions overlap in [320, 330): their exposed times add up to more than the rank's.
        assert rank["exposed_comm_us"] == 90 and tp["exposed_us"] + dp["exposed_us"] == 100
    checks = {c["name"]: c for c in plain["integrity"]["checks"]}
    assert checks["collectives.matched"]["status"] == "ok"
    assert "as one group" not in checks["collectives.process_group"]["detail"]


def test_device_initiated_collectives_count_as_all_reduce_and_all_gather_communication(tmp_path):
    groups = [{"pg_name": "0", "pg_desc": "default_pg", "pg_size": 2, "ranks": [0, 1]}]
    names = [
        ("all_reduce", "void c10d::symmetric_memory::multimem_all_reduce_kernel<float, 16, 8>"),
        ("all_reduce", "void c10d::symmetric_memory::one_shot_all_reduce_kernel<c10::BFloat16, 16, 8>"),
        ("all_reduce", "void c10d::symmetric_memory::two_shot_all_reduce_kernel<c10::BFloat16, 16, 8>"),
        ("all_reduce", "void vllm::cross_device_reduce_1stage<half, 8>"),
        ("all_gather", "fused_all_gather_matmul_kernel"),
        ("reduce_scatter", "fused_matmul_reduce_scatter_kernel"),
    ]
    docs = []
    for r in range(2):
        calls = [(kind, "0", 100 + 20 * i, 110 + 20 * i, MiB, name) for i, (kind, name) in enumerate(names)]
        doc = gpu_trace(r, 2, groups, [(0, 100)], calls)
        for e in doc["traceEvents"]:  # as torch's symmetric-memory ops launch them: no collective args on the kernel
            if e.get("cat") == "kernel" and e["args"].get("Collective name"):
                e["args"] = {k: e["args"][k] for k in ("stream", "correlation", "External id")}
        docs.append(doc)
    plain = to_json(analyze_dir(write(tmp_path, docs)))
    rank = plain["ranks"][0]
    assert rank["comm_us"] == 60 and rank["exposed_comm_us"] == 60
    assert {c["kind"]: c["count"] for c in rank["collectives"]} == {"all_reduce": 4, "all_gather": 1, "reduce_scatter": 1}
    checks = {c["name"]: c for c in plain["integrity"]["checks"]}
    assert checks["classification.communication"]["status"] == "ok"


def pipeline_docs() -> list[dict]:
    """GPipe, 2 stages, 2 microbatches. Rank 0: F0 [0,10) F1 [10,20), sends [10,12) [20,22),
    grad recvs [40,42) [52,54), B1 [42,52) B0 [54,64). Rank 1: recvs [10,12) [20,22), F0 [12,22)
    F1 [22,32) B1 [32,40), grad sends [40,42) [52,54), B0 [42,52)."""
    groups = [{"pg_name": "0", "pg_desc": "default_pg", "pg_size": 2, "ranks": [0, 1]}]
    p2p = [(10, 12), (20, 22), (40, 42), (52, 54)]
    first = [("send", "0", s, e, MiB) for s, e in p2p[:2]] + [("recv", "0", s, e, MiB) for s, e in p2p[2:]]
    last = [("recv", "0", s, e, MiB) for s, e in p2p[:2]] + [("send", "0", s, e, MiB) for s, e in p2p[2:]]
    return [
        gpu_trace(0, 2, groups, [(0, 10), (10, 20), (42, 52), (54, 64)], first),
        gpu_trace(1, 2, groups, [(12, 22), (22, 32), (32, 40), (42, 52)], last),
    ]


def test_a_pipeline_reads_its_stages_microbatches_and_bubble_beside_the_ideal(tmp_path):
    plain = to_json(analyze_dir(write(tmp_path, pipeline_docs())))
    pipe = plain["pipeline"]
    assert pipe["stages"] == [0, 1] and pipe["microbatches"] == 2
    assert pipe["ideal_bubble_pct"] == pytest.approx(100 * 1 / 3, abs=1e-3)
    # Rank 0's step [0, 64): compute 40, bubble 24; its p2p [10,12) is under F1, the other 6 us exposed.
    assert pipe["ranks"]["0"] == {"stage": 0, "bubble_us": 24, "bubble_pct": 37.5, "p2p_exposed_us": 6, "idle_us": 18}
    # Rank 1's step [10, 54): compute 38, bubble 6, all of it exposed p2p.
    assert pipe["ranks"]["1"] == {
        "stage": 1,
        "bubble_us": 6,
        "bubble_pct": pytest.approx(100 * 6 / 44, abs=1e-3),
        "p2p_exposed_us": 6,
        "idle_us": 0,
    }
    # Each send meets its recv on the other rank: matched, with the fastest (equal) duration as transfer.
    for r in plain["ranks"]:
        assert (r["wait_us"], r["transfer_us"]) == (0, 8)
    assert {c["name"]: c["status"] for c in plain["integrity"]["checks"]}["collectives.matched"] == "ok"


def test_a_one_dimensional_job_has_one_dimension_equal_to_its_ranks_numbers(tmp_path):
    groups = [{"pg_name": "0", "pg_desc": "default_pg", "pg_size": 2, "ranks": [0, 1]}]
    calls = [("all_reduce", "0", 50, 150, MiB), ("all_reduce", "0", 200, 240, MiB)]
    docs = [gpu_trace(r, 2, groups, [(0, 100), (220, 300)], calls) for r in range(2)]
    for doc in docs:  # forward [0, 120), backward [120, 300): labels on the main thread
        doc["traceEvents"] += [{"ph": "X", "cat": "user_annotation", "name": name, "pid": PID, "tid": PID, "ts": a, "dur": b - a}
                               for name, a, b in (("forward", 0, 120), ("backward", 120, 300))]  # fmt: skip
    plain = to_json(analyze_dir(write(tmp_path, docs)))
    assert list(plain["dimensions"]) == ["world"] and plain["pipeline"] is None
    for rank in plain["ranks"]:
        dim = plain["dimensions"]["world"]["ranks"][str(rank["rank"])]
        assert (dim["comm_us"], dim["hidden_us"], dim["exposed_us"]) == (rank["comm_us"], rank["overlap_us"], rank["exposed_comm_us"])
        assert dim["exposed_us"] == 100 - 50 + 20
        # Per phase too. GPU phase windows span the kernels their range launched: forward [0, 150)
        # holds the first call (50 of it hidden), backward [200, 300) the second (20 hidden).
        phases = {p["phase"]: (p["comm_us"], p["exposed_us"]) for p in dim["phases"]}
        assert phases == {p["phase"]: (p["comm_us"], p["exposed_comm_us"]) for p in rank["phases"]}
        assert phases == {"forward": (100, 50), "backward": (40, 20)}


# ---------------------------------------------------------------- where it shows


def test_analyze_prints_a_table_per_dimension_and_names_the_most_exposed_one(tmp_path, capsys):
    from profile_overlap.cli.main import main

    folder = write(tmp_path / "job", [two_d(r) for r in range(4)])
    out = tmp_path / "out.json"
    assert main(["analyze", str(folder), "--json", str(out)]) == 0
    stdout = capsys.readouterr().out
    assert "Dimension dp: groups 1, 2 of 2 ranks" in stdout and "Dimension tp: groups 3, 4 of 2 ranks" in stdout
    assert "Of the dimensions, tp's communication is the most exposed: 0.06 ms per step" in stdout
    written = json.loads(out.read_text())
    assert set(written["dimensions"]["tp"]["ranks"]["0"]) == {
        "calls", "bytes", "comm_us", "hidden_us", "exposed_us", "wait_us", "transfer_us", "busbw_gbps", "steps", "phases",
    }  # fmt: skip
    assert written["pipeline"] is None


def test_a_job_report_tensorboard_and_perfetto_show_the_dimensions_and_the_bubble(tmp_path):
    from profile_overlap.cli.main import main
    from profile_overlap.tools.perfetto.tracks import rank_tracks

    folder = write(tmp_path / "job", pipeline_docs())
    assert main(["report", str(folder), "--format", "md", "--out", str(tmp_path / "out")]) == 0
    md = (tmp_path / "out" / "report.md").read_text()
    assert "## Dimensions and pipeline stages" in md
    assert "The pipeline's largest bubble is stage 0 (rank 0):" in md and "beside the ideal 33.3%" in md
    # TensorBoard: the job's run gets the dimension's exposed time per step and the stages' mean bubble.
    (events,) = [p.parent for p in folder.glob("job/events.out.tfevents.*")]
    tags = scalars(events)
    assert tags["pipeline/bubble_pct"] == [(1, pytest.approx((37.5 + 100 * 6 / 44) / 2, abs=1e-3))]
    assert tags["dimension/world/exposed_ms"] == [(1, pytest.approx(6e-3))]
    # Perfetto: each call carries its dimension.
    analysis = analyze_dir(write(tmp_path / "2d", [two_d(r) for r in range(4)]))
    calls = [s for s in rank_tracks(analysis.ranks[0], lambda us: int(us * 1e3), "job").slices if s.track == "collectives"]
    assert sorted(s.name for s in calls) == ["all_gather [dp]", "all_reduce [tp]", "all_reduce [tp]", "reduce_scatter [dp]"]
    assert {s.args["dimension"] for s in calls} == {"dp", "tp"}


def scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


# ---------------------------------------------------------------- real gloo jobs: the examples, through trace_handler


def run_example(tmp_path_factory, script: str, nproc: int, *args: str) -> dict:
    """An example's job on gloo ranks (it profiles itself with profile_overlap.profile), shared with
    tests/test_examples.py (conftest.shared_example): its record's analysis."""
    job, _ = shared_example(tmp_path_factory, script, nproc, *args)
    return json.loads((job / "metrics.json").read_text())["modes"]["job"]["analysis"]


@pytest.mark.slow
def test_the_fsdp_tp_example_reads_as_two_dimensions_of_groups_of_two_ranks(tmp_path_factory):
    plain = run_example(tmp_path_factory, "fsdp_tp_train.py", 4, "--steps", "8")
    checks = {c["name"]: c for c in plain["integrity"]["checks"]}
    assert "as one group" not in checks["collectives.process_group"]["detail"]
    assert checks["collectives.matched"]["status"] == "ok", checks["collectives.matched"]["detail"]
    dims = plain["dimensions"]
    assert sorted(dims) == ["dp", "tp"] and dims["dp"]["group_size"] == dims["tp"]["group_size"] == 2
    assert dims["dp"]["pg_names"] != dims["tp"]["pg_names"]
    for rank in plain["ranks"]:
        r = str(rank["rank"])
        every = sum(c["count"] for c in rank["collectives"])
        assert dims["dp"]["ranks"][r]["calls"] + dims["tp"]["ranks"][r]["calls"] == every
        assert dims["dp"]["ranks"][r]["calls"] > 0 and dims["tp"]["ranks"][r]["calls"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_the_pipeline_example_reads_two_stages_in_order_with_their_bubble(tmp_path_factory, schedule):
    plain = run_example(tmp_path_factory, "pipeline_train.py", 2, "--steps", "6", "--schedule", schedule, "--microbatches", "4")
    kinds = {c["kind"] for r in plain["ranks"] for c in r["collectives"]}
    assert "send_recv" in kinds and all(r["comm_us"] > 0 for r in plain["ranks"])
    pipe = plain["pipeline"]
    assert pipe["stages"] == [0, 1] and pipe["microbatches"] == 4
    assert pipe["ideal_bubble_pct"] == pytest.approx(100 * 1 / 5, abs=1e-3)
    for r in ("0", "1"):
        stage = pipe["ranks"][r]
        assert stage["stage"] == int(r) and 0 < stage["bubble_pct"] < 100
        assert stage["bubble_us"] == pytest.approx(stage["p2p_exposed_us"] + stage["idle_us"], abs=1e-2)
    assert {c["name"]: c["status"] for c in plain["integrity"]["checks"]}["collectives.matched"] == "ok"


# ---------------------------------------------------------------- generated jobs (tests/dims_traces.py)

from dims_traces import dimension_truth, fsdp_tp_job, ideal_bubble, pipeline_job, pipeline_truth, write_job  # noqa: E402

DIM_NAME = {"mesh_dp": "dp", "mesh_tp": "tp", "mesh_pp": "pp", "default_pg": "world"}


@pytest.mark.parametrize(
    "job",
    [
        pytest.param(lambda: fsdp_tp_job(style="gpu"), id="gpu-2x2"),
        pytest.param(lambda: fsdp_tp_job(style="cpu"), id="cpu-2x2"),
        pytest.param(lambda: fsdp_tp_job(style="gpu", world_all_reduce=True), id="gpu-2x2-world"),
        pytest.param(lambda: fsdp_tp_job(dp=2, tp=4, layers=3, steps=3, style="gpu"), id="gpu-2x4"),
        pytest.param(lambda: pipeline_job(stages=3, dp=2, tp=2, style="gpu"), id="gpu-3d"),
        pytest.param(lambda: pipeline_job(stages=2, dp=2, tp=2, schedule="gpipe", style="cpu"), id="cpu-3d"),
    ],
)
def test_generated_2d_and_3d_jobs_read_each_dimension_within_half_a_percent_of_the_truth(tmp_path, job):
    job = job()
    plain = to_json(analyze_dir(write_job(job, tmp_path)))
    truth = dimension_truth(job)
    assert sorted(plain["dimensions"]) == sorted(DIM_NAME[d] for d in truth)
    for desc, per_rank in truth.items():
        dim = plain["dimensions"][DIM_NAME[desc]]
        assert dim["pg_names"] == sorted(per_rank[next(iter(per_rank))].pg_names, key=int)
        assert sorted(dim["ranks"], key=int) == [str(r) for r in sorted(per_rank)]
        for rank, t in per_rank.items():
            got = dim["ranks"][str(rank)]
            assert dim["group_size"] == t.group_size
            assert (got["calls"], got["bytes"]) == (t.calls, t.bytes)
            assert got["comm_us"] == pytest.approx(t.comm_us, rel=5e-3)
            assert got["exposed_us"] == pytest.approx(t.exposed_us, rel=5e-3, abs=1e-6)
            assert got["busbw_gbps"] == pytest.approx(t.busbw_gbps, rel=5e-3)
    checks = {c["name"]: c for c in plain["integrity"]["checks"]}
    assert checks["collectives.matched"]["status"] == "ok", checks["collectives.matched"]["detail"]
    assert checks["collectives.process_group"]["status"] == "ok", checks["collectives.process_group"]["detail"]
    for rank in plain["ranks"]:  # every call in exactly one dimension
        every = sum(c["count"] for c in rank["collectives"])
        assert sum(d["ranks"].get(str(rank["rank"]), {"calls": 0})["calls"] for d in plain["dimensions"].values()) == every


@pytest.mark.parametrize("style", ["gpu", "cpu"])
@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize(("p", "m", "order"), [(2, 4, None), (4, 8, None), (4, 4, (2, 0, 3, 1))])
def test_generated_pipelines_read_stages_microbatches_and_bubble_within_one_percent(tmp_path, style, schedule, p, m, order):
    job = pipeline_job(stages=p, microbatches=m, schedule=schedule, style=style, order=order)
    plain = to_json(analyze_dir(write_job(job, tmp_path)))
    pipe = plain["pipeline"]
    assert pipe["stages"] == list(job.stages)
    assert pipe["microbatches"] == m
    assert pipe["ideal_bubble_pct"] == pytest.approx(100 * ideal_bubble(p, m), abs=1e-3)
    for rank, rows in pipeline_truth(job).items():
        got = pipe["ranks"][str(rank)]
        window = sum(t.window_us for t in rows)
        assert got["stage"] == rows[0].stage
        # Within 1% of the step: the bubble and its split.
        for key in ("bubble_us", "p2p_exposed_us", "idle_us"):
            assert abs(got[key] - sum(getattr(t, key) for t in rows)) <= 0.01 * window, key
        assert got["bubble_pct"] == pytest.approx(100 * sum(t.bubble_us for t in rows) / window, abs=1.0)
    assert {c["name"]: c["status"] for c in plain["integrity"]["checks"]}["collectives.matched"] == "ok"


def test_gloo_work_that_cannot_be_placed_in_a_group_is_counted_apart_and_named(tmp_path):
    # Rank 0's trace declares two groups (default, dp) but shows three worker pools (default, dp, tp).
    job = fsdp_tp_job(style="cpu", world_all_reduce=True)
    write_job(job, tmp_path)
    path = tmp_path / "rank0.pt.trace.json"
    doc = json.loads(path.read_text())
    doc["distributedInfo"]["pg_config"] = [g for g in doc["distributedInfo"]["pg_config"] if g["pg_desc"] != "mesh_tp"]
    path.write_text(json.dumps(doc))
    plain = to_json(analyze_dir(tmp_path))
    check = {c["name"]: c for c in plain["integrity"]["checks"]}["collectives.process_group"]
    assert check["status"] == "warning" and "could not be placed in a process group" in check["detail"]
    unplaced = check["figures"]["unplaced_calls"]["0"]
    assert sum(unplaced.values()) == sum(c["count"] for c in plain["ranks"][0]["collectives"])
    # Counted apart: in no dimension, never merged into one.
    assert all("0" not in d["ranks"] for d in plain["dimensions"].values())


@pytest.mark.parametrize("style", ["gpu", "cpu"])
def test_a_generated_3d_job_reads_every_rank_at_its_stage_with_its_bubble(tmp_path, style):
    job = pipeline_job(stages=3, dp=2, tp=2, schedule="gpipe" if style == "cpu" else "1f1b", style=style)
    plain = to_json(analyze_dir(write_job(job, tmp_path)))
    pipe = plain["pipeline"]
    truth = pipeline_truth(job)
    assert pipe["microbatches"] == job.microbatches
    assert pipe["ideal_bubble_pct"] == pytest.approx(100 * ideal_bubble(3, job.microbatches), abs=1e-3)
    # Every dp x tp block of ranks is one stage; the ranks in stage order, then rank order.
    assert pipe["stages"] == sorted(truth, key=lambda r: (truth[r][0].stage, r))
    for rank, rows in truth.items():
        got = pipe["ranks"][str(rank)]
        window = sum(t.window_us for t in rows)
        assert got["stage"] == rows[0].stage
        for key in ("bubble_us", "p2p_exposed_us", "idle_us"):
            assert abs(got[key] - sum(getattr(t, key) for t in rows)) <= 0.01 * window, key
    checks = {c["name"]: c for c in plain["integrity"]["checks"]}
    assert checks["collectives.matched"]["status"] == "ok", checks["collectives.matched"]["detail"]
