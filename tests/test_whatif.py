"""`whatif`: the replay on hand-made schedules with answers worked by hand, the ring α-β cost, the
crossover and the fit; then the command end to end on a real 2-rank compare run."""

from __future__ import annotations

import json
import shutil

import pytest

from profile_overlap.analysis.file.bandwidth import bus_factor as trace_bus_factor
from profile_overlap.tools.whatif import model
from profile_overlap.tools.whatif.replay import COMM, COMPUTE, Task, replay

from conftest import cli

# Two units: forward F0 = 1, F1 = 2; backward B1 = 4 (runs first), B0 = 3; optimizer 0.5 each.
FWD, BWD, OPT = (1.0, 2.0), (3.0, 4.0), (0.5, 0.5)


def graph(mode: str, comms: list[tuple[str, str, int, float]], *, backward=BWD, optimizer=OPT) -> model.StepGraph:
    return model.StepGraph(
        mode=mode,
        pre_us=0.0,
        forward_us=FWD,
        backward_us=backward,
        optimizer_us=optimizer,
        comms=tuple(model.Comm(kind=k, nbytes=0, phase=p, unit=u, dur_us=d) for k, p, u, d in comms),
    )


def split_comms(rs1: float, rs0: float, ag0: float, ag1: float) -> list:
    return [
        ("reduce_scatter", "backward", 1, rs1),
        ("reduce_scatter", "backward", 0, rs0),
        ("all_gather", "optimizer", 0, ag0),
        ("all_gather", "optimizer", 1, ag1),
    ]


def test_replay_runs_each_stream_in_order_and_waits_for_dependencies():
    tasks = [
        Task("F0", COMPUTE, 2.0),
        Task("RS0", COMM, 3.0, deps=(0,)),
        Task("F1", COMPUTE, 1.0),
        Task("RS1", COMM, 1.0, deps=(2,)),  # ready at 3, but the comm stream is busy until 5
        Task("O", COMPUTE, 1.0, deps=(3,)),
    ]
    assert replay(tasks) == ((0, 2), (2, 5), (2, 3), (5, 6), (6, 7))


def test_sequential_step_is_the_sum():
    st = model.simulate(graph("sequential", [("all_reduce", "backward", 1, 5.0), ("all_reduce", "backward", 0, 6.0)]))
    assert st.step_us == 1 + 2 + 4 + 3 + 5 + 6 + 0.5 + 0.5
    assert st.comm_us == 11 and st.overlap_us == 0 and st.exposed_comm_us == 11 and st.overlap_pct == 0


def test_split_step_is_the_max_plus_result():
    # RS1 starts when B1 ends and runs beside B0; RS0 waits for B0 and for RS1 (one comm stream);
    # the optimizer waits for RS0. Step = F0 + F1 + B1 + max(B0, RS1) + RS0 + o0 + o1.
    st = model.simulate(graph("split", split_comms(rs1=5.0, rs0=6.0, ag0=0.25, ag1=0.25)))
    assert st.step_us == 1 + 2 + 4 + max(3, 5) + 6 + 0.5 + 0.5  # 19
    # In the window [0, 19): the last step's AG1 [0, 0.25) under F0, RS1 [7, 12) beside B0 [7, 10),
    # RS0 [12, 18) alone, AG0 [18.5, 18.75) under o1 (AG1 of this step starts at 19: the next window).
    assert st.comm_us == 0.25 + 5 + 6 + 0.25
    assert st.overlap_us == 0.25 + 3 + 0.25
    assert st.exposed_comm_us == 8
    assert st.overlap_pct == 100 * 3.5 / 11.5
    # The backward hides the reduce_scatter completely when B0 is longer.
    st = model.simulate(graph("split", split_comms(rs1=2.0, rs0=6.0, ag0=0.25, ag1=0.25), backward=(6.0, 4.0)))
    assert st.step_us == 1 + 2 + 4 + max(6, 2) + 6 + 0.5 + 0.5  # 20


def test_split_forward_waits_for_its_all_gather():
    # AG0 ends at 18.5 + 3 = 21.5, after the step's compute (19): F0 of the next step waits 2.5.
    st = model.simulate(graph("split", split_comms(rs1=5.0, rs0=6.0, ag0=3.0, ag1=0.25)))
    assert st.step_us == 19 + 2.5


def test_split_blocking_step_is_the_sum_of_everything():
    st = model.simulate(graph("split-blocking", split_comms(rs1=5.0, rs0=6.0, ag0=0.25, ag1=0.25)))
    assert st.step_us == 1 + 2 + 4 + 5 + 3 + 6 + 0.5 + 0.25 + 0.5 + 0.25
    assert st.overlap_us == 0 and st.comm_us == 11.5


def test_ddp_bucket_overlaps_the_rest_of_the_backward():
    # The bucket of unit 1 all-reduces beside B0; the bucket of unit 0 after it; Adam waits for both.
    st = model.simulate(graph("ddp", [("all_reduce", "backward", 1, 5.0), ("all_reduce", "backward", 0, 2.0)]))
    assert st.step_us == 1 + 2 + 4 + max(3, 5) + 2 + 0.5 + 0.5


def test_fsdp2_without_communication_is_its_compute():
    comms = [
        ("all_gather", "forward", 0, 0.0),
        ("all_gather", "forward", 1, 0.0),
        ("reduce_scatter", "backward", 1, 0.0),
        ("reduce_scatter", "backward", 0, 0.0),
    ]
    assert model.simulate(graph("fsdp2", comms)).step_us == sum(FWD) + sum(BWD) + sum(OPT)


def test_fsdp2_forward_waits_for_the_first_gather():
    comms = [
        ("all_gather", "forward", 0, 10.0),
        ("all_gather", "forward", 1, 1.0),  # prefetched: runs after AG0, ends at 11, F1 starts at 11
        ("reduce_scatter", "backward", 1, 1.0),
        ("reduce_scatter", "backward", 0, 1.0),
    ]
    # F0 waits 10; F0 11 ends; F1 11..13; B1 13..17; RS1 17..18 beside B0 17..20; RS0 20..21; Adam.
    assert model.simulate(graph("fsdp2", comms)).step_us == 10 + 1 + 2 + 4 + 3 + 1 + 0.5 + 0.5


@pytest.mark.parametrize(
    ("kind", "n", "expected_us"),
    [
        # α = 5 µs, S = 1e6 bytes, B = 100 GB/s = 1e5 bytes/µs.
        ("all_reduce", 2, 5 * 2 + 1e6 * (2 * 1 / 2) / 1e5),
        ("all_reduce", 8, 5 * 14 + 1e6 * (2 * 7 / 8) / 1e5),
        ("reduce_scatter", 2, 5 * 1 + 1e6 * (1 / 2) / 1e5),
        ("reduce_scatter", 8, 5 * 7 + 1e6 * (7 / 8) / 1e5),
        ("all_gather", 2, 5 * 1 + 1e6 * (1 / 2) / 1e5),
        ("all_gather", 8, 5 * 7 + 1e6 * (7 / 8) / 1e5),
    ],
)
def test_ring_alpha_beta_cost(kind, n, expected_us):
    assert model.ring_cost_us(kind, 1e6, n, latency_us=5.0, link_gbps=100.0) == pytest.approx(expected_us, rel=1e-12)
    assert model.bus_factor(kind, n) == trace_bus_factor(kind, n)  # the nccl-tests factors of the traces


def test_all_reduce_costs_what_reduce_scatter_plus_all_gather_cost():
    ar = model.ring_cost_us("all_reduce", 4e6, 64, latency_us=3.0, link_gbps=25.0)
    rs = model.ring_cost_us("reduce_scatter", 4e6, 64, latency_us=3.0, link_gbps=25.0)
    ag = model.ring_cost_us("all_gather", 4e6, 64, latency_us=3.0, link_gbps=25.0)
    assert ar == pytest.approx(rs + ag, rel=1e-12)


def test_calls_in_flight_together_share_the_time():
    """Two calls overlap for 5 µs (2.5 µs each), a third runs alone: the shares add up to the 20 µs
    the communication was busy, so serialised on one stream they keep it busy just as long."""
    import numpy as np

    from profile_overlap.analysis.file.replay import stream_shares

    starts, ends = np.array([0.0, 5.0, 20.0]), np.array([10.0, 15.0, 25.0])
    assert stream_shares(starts, ends).tolist() == [7.5, 7.5, 5.0]
    assert stream_shares(np.array([0.0, 0.0]), np.array([4.0, 4.0])).tolist() == [2.0, 2.0]
    assert stream_shares(np.array([0.0, 10.0]), np.array([4.0, 12.0])).tolist() == [4.0, 2.0]  # one stream: the durations


def test_each_calls_share_is_every_stretch_of_it_divided_by_the_calls_in_flight_then():
    import numpy as np

    from profile_overlap.analysis.file.replay import stream_shares
    from profile_overlap.core import intervals as iv

    rng = np.random.default_rng(4)
    for n in (1, 3, 40, 300):
        starts = rng.integers(0, 2 * n, n).astype(float) + rng.random(n) * (n % 2)
        ends = starts + rng.integers(0, 6, n) * rng.random(n)
        edges = sorted(set(starts.tolist()) | set(ends.tolist()))
        want = np.zeros(n)
        for lo, hi in zip(edges, edges[1:]):  # the definition, stretch by stretch
            flying = (starts <= lo) & (ends >= hi)
            if flying.any():
                want[flying] += (hi - lo) / flying.sum()
        got = stream_shares(starts, ends)
        assert np.allclose(got, want, rtol=1e-12, atol=1e-9), n
        assert abs(got.sum() - sum(hi - lo for lo, hi in zip(*(x.tolist() for x in iv.union(starts, ends))))) < 1e-6


@pytest.mark.parametrize(
    ("speedups", "expected"),
    [
        ((0.9, 1.1, 1.3), "from 64"),
        ((1.1, 1.2, 1.3), "always"),
        ((1.1, 0.9, 0.95), "up to 8"),
        ((1.2, 1.1, 0.9), "up to 64"),
        ((1.2, 0.9, 1.1), "from 512"),
        ((0.9, 1.0, 1.0), "never"),
        ((0.9, 1.2, 1.0), "never"),
    ],
)
def test_crossover(speedups, expected):
    assert model.crossover((8, 64, 512), speedups) == expected


def test_crossover_of_a_hand_made_case():
    # One unit, forward 10 and backward 10. sequential: a blocking all_reduce, then no optimizer
    # work; split: its reduce_scatter (exposed: nothing follows it in backward) and 60 of optimizer.
    # S = 1e7 bytes at 100 GB/s, α = 0: AR = 200·(n−1)/n µs, RS = 100·(n−1)/n µs. So sequential
    # = 20 + 200·(n−1)/n, split = 80 + 100·(n−1)/n: the split wins once (n−1)/n > 0.6, from n = 4.
    def step(mode: str, n: int) -> float:
        kind, opt = ("all_reduce", 0.0) if mode == "sequential" else ("reduce_scatter", 60.0)
        cost = model.ring_cost_us(kind, 1e7, n, latency_us=0.0, link_gbps=100.0)
        g = model.StepGraph(mode, 0.0, (10.0,), (10.0,), (opt,), (model.Comm(kind, 10**7, "backward", 0, cost),))
        return model.simulate(g).step_us

    sizes = (2, 4, 8)
    assert [step("sequential", n) for n in sizes] == pytest.approx([20 + 200 * (n - 1) / n for n in sizes])
    assert [step("split", n) for n in sizes] == pytest.approx([80 + 100 * (n - 1) / n for n in sizes])
    assert model.crossover(sizes, [step("sequential", n) / step("split", n) for n in sizes]) == "from 4"


def test_fit_recovers_alpha_and_bandwidth():
    samples = [
        (k, 8, s, model.ring_cost_us(k, s, 8, latency_us=3.0, link_gbps=20.0))
        for k in ("all_reduce", "all_gather")
        for s in (1e4, 1e6, 1e8)
    ]
    alpha, gbps = model.fit_alpha_beta(samples, latency_us=99.0)
    assert alpha == pytest.approx(3.0, rel=1e-6) and gbps == pytest.approx(20.0, rel=1e-6)


def test_fit_holds_alpha_when_one_size_cannot_tell_them_apart():
    t = model.ring_cost_us("all_reduce", 1e6, 4, latency_us=5.0, link_gbps=2.0)
    alpha, gbps = model.fit_alpha_beta([("all_reduce", 4, 1e6, t)] * 3, latency_us=5.0)
    assert alpha == 5.0 and gbps == pytest.approx(2.0, rel=1e-9)


# ---------------------------------------------------------------- the command on a real run


@pytest.fixture(scope="module")
def run_copy(compare_run_2, tmp_path_factory):
    """whatif writes into the run folder: work on a copy of the shared run."""
    dst = tmp_path_factory.mktemp("whatif") / compare_run_2.name
    shutil.copytree(compare_run_2, dst)
    return dst


def test_whatif_end_to_end(run_copy, tmp_path):
    out = tmp_path / "w.json"
    proc = cli(["whatif", str(run_copy), "--world-size", "4,16", "--link-gbps", "10,100", "--json", str(out)])
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "predicted step per mode" in proc.stdout and "speedup vs sequential" in proc.stdout
    for mode in ("sequential", "split", "split-blocking"):
        assert f"self-replay: {mode} measured " in proc.stdout
    record = json.loads(out.read_text())
    assert record == json.loads((run_copy / "whatif.json").read_text())
    assert {(p["mode"], p["world_size"], p["link_gbps"]) for p in record["points"]} == {
        (m, n, b) for m in ("sequential", "split", "split-blocking") for n in (4, 16) for b in (10.0, 100.0)
    }
    for p in record["points"]:
        assert {"mode", "world_size", "link_gbps", "step_ms", "exposed_comm_ms", "overlap_pct"} <= set(p)
        assert p["step_ms"] > 0 and 0 <= p["exposed_comm_ms"] <= p["step_ms"]
    for s in record["self_replay"]:
        assert {"mode", "measured_ms", "predicted_ms", "error_pct"} <= set(s)
        assert s["error_pct"] == pytest.approx(100 * (s["predicted_ms"] - s["measured_ms"]) / s["measured_ms"])
    # More bandwidth never makes a step slower.
    for m in ("sequential", "split"):
        by_bw = {p["link_gbps"]: p["step_ms"] for p in record["points"] if p["mode"] == m and p["world_size"] == 16}
        assert by_bw[100.0] <= by_bw[10.0]
    assert (run_copy / "whatif.png").stat().st_size > 1000
    report = cli(["report", str(run_copy), "--format", "md"])
    assert report.returncode == 0, report.stderr
    md = (run_copy / "report.md").read_text()
    assert "## What if: other world sizes and bandwidths" in md and "Self-replay" in md


def test_whatif_fit_to_the_run(run_copy):
    proc = cli(["whatif", str(run_copy), "--world-size", "8", "--fit", "run"])
    assert proc.returncode == 0, proc.stderr
    record = json.loads((run_copy / "whatif.json").read_text())
    assert record["fit"] == "run" and len(record["link_gbps"]) == 1 and record["link_gbps"][0] > 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--world-size", "1,8"], "--world-size 1 is out of range"),
        (["--link-gbps", "-5"], "--link-gbps -5 is out of range"),
        (["--world-size", "eight"], "is not a comma-separated list"),
    ],
)
def test_whatif_bad_flags(run_copy, args, message):
    proc = cli(["whatif", str(run_copy), *args])
    assert proc.returncode == 2
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_whatif_on_a_folder_that_is_not_a_run(tmp_path):
    proc = cli(["whatif", str(tmp_path)])
    assert proc.returncode == 2
    assert "is not a run folder" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_whatif_fit_to_a_bench_collectives_result(run_copy, tmp_path):
    # A bench.json whose times follow the ring model exactly (α = 4 µs, B = 25 GB/s on 8 ranks).
    kinds = ("all_reduce", "reduce_scatter", "all_gather")
    rows = [
        {"nbytes": s, "results": {k: {"time_us": model.ring_cost_us(k, s, 8, latency_us=4.0, link_gbps=25.0)} for k in kinds}}
        for s in (2**14, 2**20, 2**26)
    ]
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({"world_size": 8, "rows": rows}))
    proc = cli(["whatif", str(run_copy), "--world-size", "8", "--fit", str(bench)])
    assert proc.returncode == 0, proc.stderr
    record = json.loads((run_copy / "whatif.json").read_text())
    assert record["latency_us"] == pytest.approx(4.0, rel=1e-6) and record["link_gbps"] == [pytest.approx(25.0, rel=1e-6)]
