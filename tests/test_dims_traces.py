"""The generator of 2-D and pipeline traces (tests/dims_traces.py): its traces say what real
Kineto traces say, and its truths are self-consistent and agree with a brute-force grid computed
from the written trace files alone (each instant decided on its own)."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest
from dims_traces import (
    BUS_FACTOR,
    COMPUTE_STREAM,
    dimension_truth,
    exposed_truth,
    fsdp_tp_job,
    ideal_bubble,
    pipeline_job,
    pipeline_truth,
    schedule_ops,
    step_windows,
    write_job,
)

from profile_overlap.analysis.folder import analyze_dir

JOBS_2D = {
    "gpu": lambda: fsdp_tp_job(style="gpu"),
    "cpu": lambda: fsdp_tp_job(style="cpu"),
    "gpu-world-all-reduce": lambda: fsdp_tp_job(style="gpu", world_all_reduce=True),
    "gpu-2x4": lambda: fsdp_tp_job(dp=2, tp=4, layers=3, steps=3, style="gpu"),
    "gpu-3d": lambda: pipeline_job(stages=3, dp=2, tp=2, style="gpu"),
    "cpu-3d": lambda: pipeline_job(stages=3, dp=2, tp=2, schedule="gpipe", style="cpu"),
}


def _pipeline(style: str, schedule: str, p: int, m: int):
    return lambda: pipeline_job(stages=p, microbatches=m, schedule=schedule, style=style)


PIPELINES = {
    f"{style}-{schedule}-p{p}-m{m}": _pipeline(style, schedule, p, m)
    for style in ("gpu", "cpu")
    for schedule in ("gpipe", "1f1b")
    for p, m in ((2, 4), (4, 8))
}  # fmt: skip
PIPELINES["gpu-3d-1f1b"] = lambda: pipeline_job(stages=3, dp=2, tp=2, schedule="1f1b", style="gpu")
PIPELINES["cpu-3d-gpipe"] = lambda: pipeline_job(stages=2, dp=2, tp=2, schedule="gpipe", style="cpu")


def _docs(job, tmp_path: Path) -> dict[int, dict]:
    write_job(job, tmp_path)
    return {r.rank: json.loads((tmp_path / f"rank{r.rank}.pt.trace.json").read_text()) for r in job.ranks}


def _mask(spans, horizon: int) -> np.ndarray:
    m = np.zeros(horizon, bool)
    for a, b in spans:
        m[int(np.ceil(a)) : int(np.ceil(b))] = True
    return m


def _gpu_grid(doc: dict) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, list[np.ndarray]]:
    """From one GPU trace file alone: per dimension (the kernels' Process Group Description) the
    instants a call runs, the instants compute runs, and each step's device window (the kernels
    launched inside its ProfilerStep range, by correlation, windows never overlapping)."""
    ev = doc["traceEvents"]
    kernels = [e for e in ev if e.get("cat") == "kernel"]
    horizon = int(max(e["ts"] + e["dur"] for e in kernels)) + 2
    launch = {e["args"]["correlation"]: e["ts"] for e in ev if e.get("cat") == "cuda_runtime"}
    dims = defaultdict(list)
    for k in kernels:
        if "Process Group Description" in k["args"]:
            dims[k["args"]["Process Group Description"]].append((k["ts"], k["ts"] + k["dur"]))
    compute = _mask([(k["ts"], k["ts"] + k["dur"]) for k in kernels if k["args"]["stream"] == COMPUTE_STREAM], horizon)
    steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if e["name"].startswith("ProfilerStep#"))
    windows, prev = [], -np.inf
    for lo, hi in steps:
        mine = [k for k in kernels if lo <= launch[k["args"]["correlation"]] < hi]
        a, b = min(k["ts"] for k in mine), max(k["ts"] + k["dur"] for k in mine)
        a = max(a, prev)
        prev = max(b, a)
        windows.append(_mask([(a, prev)], horizon))
    return {d: _mask(s, horizon) for d, s in dims.items()}, compute, horizon, windows


@pytest.mark.parametrize("name", sorted(JOBS_2D))
def test_each_ranks_calls_fall_in_exactly_one_dimension_and_the_dimensions_add_up_to_all_calls(name):
    job = JOBS_2D[name]()
    truth = dimension_truth(job)
    for rank in job.ranks:
        assert sum(t[rank.rank].calls for t in truth.values() if rank.rank in t) == len(rank.comms)
        assert sum(t[rank.rank].bytes for t in truth.values() if rank.rank in t) == sum(c.nbytes for c in rank.comms)
        for t in truth.values():
            assert t[rank.rank].comm_us == t[rank.rank].hidden_us + t[rank.rank].exposed_us


@pytest.mark.parametrize("name", ["gpu", "gpu-world-all-reduce", "gpu-2x4", "gpu-3d"])
def test_per_dimension_comm_and_exposed_agree_with_a_grid_read_from_the_trace_files(name, tmp_path):
    job = JOBS_2D[name]()
    truth, total = dimension_truth(job), exposed_truth(job)
    for rank, doc in _docs(job, tmp_path).items():
        dims, compute, _, windows = _gpu_grid(doc)
        inside = np.any(windows, axis=0)
        assert set(dims) == {d for d, t in truth.items() if rank in t}
        for desc, running in dims.items():
            assert int((running & inside).sum()) == truth[desc][rank].comm_us, (desc, rank)
            assert int((running & inside & ~compute).sum()) == truth[desc][rank].exposed_us, (desc, rank)
        assert int((np.any(list(dims.values()), axis=0) & inside & ~compute).sum()) == total[rank]


def test_the_dimensions_overlap_each_other_so_their_exposed_times_add_up_to_more_than_the_ranks():
    job = fsdp_tp_job(style="gpu")
    truth, total = dimension_truth(job), exposed_truth(job)
    sums = {r.rank: sum(t[r.rank].exposed_us for t in truth.values()) for r in job.ranks}
    assert all(sums[r] >= total[r] for r in sums)
    assert any(sums[r] > total[r] for r in sums), "FSDP's all_gathers run beside tp's collectives somewhere"


def test_tensor_parallel_calls_are_exposed_by_design_and_fsdps_are_partly_hidden():
    truth = dimension_truth(fsdp_tp_job(style="gpu"))
    assert all(t.hidden_us == 0 and t.exposed_us > 0 for t in truth["mesh_tp"].values())
    assert all(0 < t.hidden_us < t.comm_us for t in truth["mesh_dp"].values())


def test_group_sizes_and_bus_bandwidth_come_from_each_groups_own_size(tmp_path):
    job = fsdp_tp_job(style="gpu", world_all_reduce=True)
    truth = dimension_truth(job)
    assert {d: {t.group_size for t in per.values()} for d, per in truth.items()} == {"mesh_dp": {2}, "mesh_tp": {2}, "default_pg": {4}}
    assert truth["mesh_dp"][0].pg_names == ("1", "2") and truth["mesh_tp"][0].pg_names == ("3", "4")
    for rank, doc in _docs(job, tmp_path).items():
        by_dim = defaultdict(lambda: [0.0, 0.0])
        for k in doc["traceEvents"]:
            if k.get("cat") == "kernel" and "Group size" in k["args"]:
                a = k["args"]
                kind = {"allreduce": "all_reduce", "allgather": "all_gather", "reduce_scatter": "reduce_scatter"}[a["Collective name"]]
                s = 4 * max(a["In msg nelems"], a["Out msg nelems"])
                by_dim[a["Process Group Description"]][0] += s * BUS_FACTOR[kind](a["Group size"])
                by_dim[a["Process Group Description"]][1] += k["dur"]
        for desc, (bus, dur) in by_dim.items():
            assert truth[desc][rank].busbw_gbps == pytest.approx(bus / dur / 1e3, rel=1e-12)
    # n = 2, not the world's 4: an all_reduce of a 2-rank group moves 2(n-1)/n = 1x its bytes per link.
    assert BUS_FACTOR["all_reduce"](2) == 1.0 and BUS_FACTOR["all_reduce"](4) == 1.5


def test_every_gpu_call_names_one_of_its_ranks_groups_and_the_traces_declare_them_with_descriptions(tmp_path):
    job = fsdp_tp_job(style="gpu")
    for rank, doc in _docs(job, tmp_path).items():
        pg = {g["pg_name"]: g for g in doc["distributedInfo"]["pg_config"]}
        assert {g["pg_desc"] for g in pg.values()} == {"default_pg", "mesh_dp", "mesh_tp"}
        assert all(rank in g["ranks"] and g["pg_size"] == len(g["ranks"]) for g in pg.values())
        comms = [e for e in doc["traceEvents"] if e.get("cat") == "kernel" and "Process Group Name" in e["args"]]
        rpc = [e for e in doc["traceEvents"] if e["name"] == "record_param_comms"]
        assert len(comms) == len(rpc) == len(job.ranks[rank].comms)
        for e in comms + rpc:
            g = pg[e["args"]["Process Group Name"]]
            assert e["args"]["Process Group Description"] == g["pg_desc"] and e["args"]["Group size"] == g["pg_size"]
            assert e["args"]["Process Group Ranks"] == str(g["ranks"])


def test_every_kernel_is_launched_inside_its_steps_profiler_range_before_it_starts(tmp_path):
    job = fsdp_tp_job(style="gpu")
    for doc in _docs(job, tmp_path).values():
        ev = doc["traceEvents"]
        steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if e["name"].startswith("ProfilerStep#"))
        launch = {e["args"]["correlation"]: e["ts"] for e in ev if e["name"] == "cudaLaunchKernel"}
        kernels = [e for e in ev if e.get("cat") == "kernel"]
        assert len(launch) == len(kernels)
        for k in kernels:
            t = launch[k["args"]["correlation"]]
            assert t < k["ts"] and sum(lo <= t < hi for lo, hi in steps) == 1
        # The CPU runs ahead: the kernels of step 1 run partly after its CPU range has closed.
        assert max(k["ts"] + k["dur"] for k in kernels if launch[k["args"]["correlation"]] < steps[0][1]) > steps[0][1]


@pytest.mark.parametrize("style", ["gpu", "cpu"])
def test_the_calls_of_a_group_match_across_its_ranks_in_count_kind_and_size_and_end_together(style):
    job = fsdp_tp_job(style=style)
    for g in job.groups:
        calls = [[c for c in job.ranks[r].comms if c.group == g] for r in g.ranks]
        if not calls[0]:
            continue
        assert len({len(c) for c in calls}) == 1
        for same in zip(*calls):
            assert len({(c.kind, c.nelems, c.end) for c in same}) == 1


def test_cpu_traces_name_no_group_and_each_group_runs_on_its_own_gloo_threads(tmp_path):
    job = fsdp_tp_job(style="cpu")
    for rank, doc in _docs(job, tmp_path).items():
        ev = doc["traceEvents"]
        assert not any("Process Group Name" in e.get("args", {}) for e in ev)
        threads = defaultdict(set)
        for c in job.ranks[rank].comms:
            threads[c.group.name].add(c.lane)
        assert all(len(t) == 2 for t in threads.values())
        assert len(set().union(*threads.values())) == sum(len(t) for t in threads.values()), "no thread serves two groups"
        gloo = Counter(e["name"] for e in ev if e["name"].startswith("gloo:"))
        assert gloo == Counter("gloo:all_gather" if c.kind == "all_gather" else "gloo:all_reduce" for c in job.ranks[rank].comms)
        # DTensor's functional collectives record the tp group's size; FSDP2's c10d ops do not.
        sizes = {
            e["args"]["Concrete Inputs"][1 if "all_gather" in e["name"] else 2]
            for e in ev
            if "functional::all_gather" in e["name"] or "functional::reduce_scatter" in e["name"]
        }
        assert sizes == {"2"}


def test_today_the_analysis_reads_the_generated_gpu_traces_cleanly_and_its_per_rank_exposed_time_is_the_truth(tmp_path):
    job = fsdp_tp_job(style="gpu")
    write_job(job, tmp_path)
    result = analyze_dir(tmp_path, max_workers=1)
    assert {c.name: c.status for c in result.integrity.checks if c.status != "ok"} == {}
    truth = exposed_truth(job)
    assert {r.rank: r.exposed_comm_us for r in result.ranks} == pytest.approx({r: float(v) for r, v in truth.items()}, abs=1e-6)


def test_today_the_analysis_gives_the_truths_per_rank_exposed_time_on_cpu_traces_without_wait_ops(tmp_path):
    job = fsdp_tp_job(style="cpu", wait_ops=False)
    write_job(job, tmp_path)
    result = analyze_dir(tmp_path, max_workers=1)
    truth = exposed_truth(job)
    assert {r.rank: r.exposed_comm_us for r in result.ranks} == pytest.approx({r: float(v) for r, v in truth.items()}, abs=1e-6)


def test_the_main_threads_wait_for_a_functional_collective_is_not_compute(tmp_path):
    job = fsdp_tp_job(style="cpu")
    assert any(r.waits for r in job.ranks)
    write_job(job, tmp_path)
    result = analyze_dir(tmp_path, max_workers=1)
    truth = exposed_truth(job)
    assert {r.rank: r.exposed_comm_us for r in result.ranks} == pytest.approx({r: float(v) for r, v in truth.items()}, abs=1e-6)


# --- pipelines -----------------------------------------------------------------------------------


def test_1f1b_warms_up_with_one_forward_per_later_stage_then_alternates_and_gpipe_runs_all_forwards_first():
    assert schedule_ops("1f1b", 0, 2, 4) == [("F", 0), ("F", 1), ("B", 0), ("F", 2), ("B", 1), ("F", 3), ("B", 2), ("B", 3)]
    assert schedule_ops("1f1b", 1, 2, 4) == [("F", 0), ("B", 0), ("F", 1), ("B", 1), ("F", 2), ("B", 2), ("F", 3), ("B", 3)]
    assert schedule_ops("gpipe", 1, 2, 3) == [("F", 0), ("F", 1), ("F", 2), ("B", 0), ("B", 1), ("B", 2)]
    for schedule in ("gpipe", "1f1b"):
        for s in range(4):
            assert sorted(schedule_ops(schedule, s, 4, 8)) == sorted([("F", i) for i in range(8)] + [("B", i) for i in range(8)])
    with pytest.raises(ValueError, match="unknown schedule"):
        schedule_ops("zero-bubble", 0, 2, 4)


def test_the_ideal_bubble_is_p_minus_one_over_m_plus_p_minus_one():
    assert ideal_bubble(2, 4) == pytest.approx(1 / 5) and ideal_bubble(4, 8) == pytest.approx(3 / 11)


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_each_stages_bubble_is_its_exposed_p2p_plus_idle_and_agrees_with_a_grid(name):
    job = PIPELINES[name]()
    truth = pipeline_truth(job)
    for rank in job.ranks:
        horizon = max(e for *_, e in rank.compute) + 2
        compute = _mask([(s, e) for _, s, e in rank.compute], horizon)
        p2p = _mask([(c.start, c.end) for c in rank.comms if c.peer is not None], horizon)
        for row, (_, a, b) in zip(truth[rank.rank], step_windows(job, rank)):
            window = _mask([(a, b)], horizon)
            assert row.window_us == int(window.sum())
            assert row.bubble_us == int((window & ~compute).sum())
            assert row.p2p_exposed_us == int((window & p2p & ~compute).sum())
            assert row.idle_us == int((window & ~p2p & ~compute).sum()) > 0
            assert row.microbatches == job.microbatches
            assert 0 < row.bubble_pct < 100


@pytest.mark.parametrize("style", ["gpu", "cpu"])
@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_a_balanced_pipeline_on_fast_links_has_about_the_ideal_bubble_once_it_runs_steadily(style, schedule):
    for p, m in ((2, 4), (2, 8), (4, 8)):
        job = pipeline_job(stages=p, microbatches=m, schedule=schedule, style=style, forward_us=(100,) * p, host_gap=0, nelems=64)
        ideal = 100 * ideal_bubble(p, m)
        for rows in pipeline_truth(job).values():
            steady = rows[1]  # step 1 starts every stage at once: the last stage has no fill to wait for
            assert ideal <= steady.bubble_pct <= ideal + 5, (p, m, steady)
    # Unbalanced (the later stages slower) and with slower links, stage 0 waits longer than the ideal.
    rows = pipeline_truth(pipeline_job(stages=4, microbatches=8, schedule=schedule, style=style))[0]
    assert rows[1].bubble_pct > 100 * ideal_bubble(4, 8) + 10


@pytest.mark.parametrize("style", ["gpu", "cpu"])
def test_every_send_has_its_recv_on_the_peer_with_the_same_size_and_peers_follow_the_stage_order(style, tmp_path):
    order = (0, 2, 1, 3)
    job = pipeline_job(stages=4, microbatches=4, style=style, order=order)
    docs = _docs(job, tmp_path)
    sent = Counter()
    received = Counter()
    for rank in job.ranks:
        s = order.index(rank.rank)
        for c in rank.comms:
            assert c.peer in {order[s - 1] if s > 0 else None, order[s + 1] if s + 1 < len(order) else None}
            (sent if c.kind == "send" else received)[(rank.rank, c.peer) if c.kind == "send" else (c.peer, rank.rank), c.nelems] += 1
    assert sent == received and sum(sent.values()) == 2 * 3 * 4 * 2  # (act + grad) x 3 links x 4 microbatches x 2 steps
    for rank, doc in docs.items():
        ev = doc["traceEvents"]
        if style == "gpu":
            kernels = [e for e in ev if e.get("cat") == "kernel" and e["name"].startswith("ncclDevKernel_SendRecv")]
            peers = {e["args"].get("Dst Rank", e["args"].get("Src Rank")) for e in kernels}
            ops = {e["name"].split(" ")[0] for e in ev if e["name"].startswith("nccl:")}
            assert ops <= {"nccl:send", "nccl:recv"} and all(e["args"]["Process Group Description"] == "mesh_pp" for e in kernels)
        else:
            kernels = [e for e in ev if e["name"] in ("gloo:send", "gloo:recv")]
            assert all(e["tid"] == e["pid"] for e in kernels), "gloo's send/recv run on the main thread"
            peers = {int(e["args"]["Concrete Inputs"][2]) for e in ev if e["name"] in ("c10d::send", "c10d::recv_")}
        assert len(kernels) == len(job.ranks[rank].comms)
        assert peers == {c.peer for c in job.ranks[rank].comms}


def test_legacy_nccl_builds_name_their_send_recv_kernels_ncclkernel(tmp_path):
    docs = _docs(pipeline_job(stages=2, style="gpu", kernels="legacy"), tmp_path)
    names = {e["name"] for doc in docs.values() for e in doc["traceEvents"] if e.get("cat") == "kernel" and "SendRecv" in e["name"]}
    assert names == {"ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)"}


# --- 3-D jobs -------------------------------------------------------------------------------------


def test_a_3d_job_has_a_pp_dp_and_tp_dimension_each_of_groups_of_its_own_size(tmp_path):
    job = pipeline_job(stages=3, dp=2, tp=2, style="gpu")
    truth = dimension_truth(job)
    assert {d: {t.group_size for t in per.values()} for d, per in truth.items()} == {"mesh_pp": {3}, "mesh_dp": {2}, "mesh_tp": {2}}
    assert {d: len(per) for d, per in truth.items()} == {"mesh_pp": 12, "mesh_dp": 12, "mesh_tp": 12}
    assert truth["mesh_pp"][0].pg_names == ("1", "2", "3", "4") and len(truth["mesh_dp"][0].pg_names) == 6
    for rank, doc in _docs(job, tmp_path).items():
        pg = {g["pg_desc"]: g["ranks"] for g in doc["distributedInfo"]["pg_config"] if g["pg_desc"] != "default_pg"}
        stage, d, t = rank // 4, rank // 2 % 2, rank % 2
        assert pg == {"mesh_pp": [s * 4 + d * 2 + t for s in range(3)], "mesh_dp": [stage * 4 + i * 2 + t for i in range(2)],
                      "mesh_tp": [stage * 4 + d * 2 + i for i in range(2)]}  # fmt: skip
        assert {c.peer for c in job.ranks[rank].comms if c.peer is not None} == {p for p in pg["mesh_pp"] if abs(p - rank) == 4}
        assert job.lines[rank] == tuple(pg["mesh_pp"])


def test_today_the_analysis_gives_the_truths_per_rank_exposed_time_on_a_3d_gpu_job(tmp_path):
    job = pipeline_job(stages=3, dp=2, tp=2, style="gpu")
    write_job(job, tmp_path)
    result = analyze_dir(tmp_path, max_workers=1)
    truth = exposed_truth(job)
    assert {r.rank: r.exposed_comm_us for r in result.ranks} == pytest.approx({r: float(v) for r, v in truth.items()}, abs=1e-6)
