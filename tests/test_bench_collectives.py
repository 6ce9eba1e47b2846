"""bench-collectives end to end on 2 gloo ranks (tiny sizes), plus the record's rules by hand.

No timing assertions: structure, the correctness check, and the relations between columns.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from profile_overlap.record.metrics import Env
from profile_overlap.tools.bench.config import COLLECTIVES, BenchConfig, parse_sizes, size_ladder
from profile_overlap.tools.bench.record import build_result, render_table

from conftest import clean_env, cli, only_run_dir, torchrun

SIZES = [1024, 2048, 4096, 8192, 16384, 32768, 65536]  # 1K:64K, factor 2
TINY = ["--sizes", "1K:64K", "--iters", "2", "--warmup", "1"]


def table_rows(stdout: str) -> list[list[str]]:
    """The data rows of the nccl-tests style table: size, count, 3 x (time, algbw, busbw, #wrong), ratio."""
    return [line.split() for line in stdout.splitlines() if line.strip() and not line.startswith("#") and line.split()[0].isdigit()]


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory) -> tuple[Path, str, Path]:
    out = tmp_path_factory.mktemp("bench")
    json_out = out / "copy.json"
    proc = torchrun(["bench-collectives", *TINY, "--out", str(out / "runs"), "--json", str(json_out)], nproc=2)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return only_run_dir(out / "runs"), proc.stdout, json_out


def test_table_has_every_size_and_collective_and_no_wrong_values(bench_run):
    run_dir, stdout, _ = bench_run
    assert run_dir.name.endswith("-bench-collectives-gloo-w2")
    header = next(line for line in stdout.splitlines() if "all_reduce" in line and "reduce_scatter" in line)
    assert header.split()[1:4] == list(COLLECTIVES)
    assert "dtype: float32" in stdout and "minBytes: 1024" in stdout and "maxBytes: 65536" in stdout and "iters: 2" in stdout
    rows = table_rows(stdout)
    assert [int(r[0]) for r in rows] == SIZES
    for r in rows:
        assert len(r) == 15
        assert int(r[1]) == int(r[0]) // 4  # float32 elements of the full array
        assert [r[5], r[9], r[13]] == ["0", "0", "0"]
        # busbw = algbw * 2(n-1)/n for all_reduce (1 on 2 ranks), (n-1)/n for the other two.
        assert r[4] == r[3]
    assert stdout.count("# Out of bounds values : 0 OK") == 1  # rank 0 prints, once
    assert "# Avg bus bandwidth    :" in stdout
    assert json.loads((run_dir / "status.json").read_text())["state"] == "succeeded"


def test_json_record(bench_run):
    run_dir, stdout, json_out = bench_run
    record = json.loads((run_dir / "bench.json").read_text())
    assert json.loads(json_out.read_text()) == record
    assert set(record) == {
        "schema_version",
        "backend",
        "device_type",
        "world_size",
        "dtype",
        "timing",
        "config",
        "env",
        "rows",
        "num_wrong",
        "avg_busbw_gbps",
        "avg_busbw_gbps_by_kind",
        "notes",
        "run_dir",
    }
    assert (record["backend"], record["world_size"], record["dtype"], record["timing"]) == ("gloo", 2, "float32", "perf_counter+barrier")
    assert record["num_wrong"] == 0 and record["config"]["sizes"] == "1K:64K"
    assert [row["nbytes"] for row in record["rows"]] == SIZES
    for row in record["rows"]:
        assert set(row) == {"nbytes", "count", "results", "rs_ag_over_ar", "rs_over_ar"}
        res = row["results"]
        assert list(res) == list(COLLECTIVES)
        for kind, c in res.items():
            assert set(c) == {"kind", "time_us", "algbw_gbps", "busbw_gbps", "num_wrong"} and c["kind"] == kind
            assert c["time_us"] > 0 and c["num_wrong"] == 0
            assert c["algbw_gbps"] == pytest.approx(row["nbytes"] / (c["time_us"] * 1e3))
        assert res["reduce_scatter"]["busbw_gbps"] == pytest.approx(res["reduce_scatter"]["algbw_gbps"] / 2)
        ar, rs, ag = (res[k]["time_us"] for k in COLLECTIVES)
        assert row["rs_ag_over_ar"] == pytest.approx((rs + ag) / ar)
    # The printed ratio column is the record's, rounded.
    printed = [float(r[14]) for r in table_rows(stdout)]
    assert printed == [round(row["rs_ag_over_ar"], 2) for row in record["rows"]]


def test_tensorboard_scalars_per_size(bench_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_dir, _, _ = bench_run
    events = EventAccumulator(str(run_dir))
    events.Reload()
    record = json.loads((run_dir / "bench.json").read_text())
    for kind in COLLECTIVES:
        scalars = events.Scalars(f"bench_collectives/{kind}/busbw_gbps")
        assert [s.step for s in scalars] == SIZES
        expected = [row["results"][kind]["busbw_gbps"] for row in record["rows"]]
        assert [s.value for s in scalars] == pytest.approx(expected, rel=1e-6)
    assert [s.step for s in events.Scalars("bench_collectives/rs_ag_over_ar")] == SIZES


@pytest.mark.slow
def test_corrupted_output_is_counted_wrong(tmp_path):
    """Rank 1's reduce_scatter output at the third size (4 KiB) gets +1: exactly its 512 elements
    are wrong, nothing else, and the job fails. Self-launched, to cover launch_or_run's entry."""
    env = clean_env(PROFILE_OVERLAP_FAULT="corrupt:rank=1:step=2:layer=1")
    proc = cli(["bench-collectives", "--nproc-per-node", "2", *TINY, "--out", str(tmp_path)], env=env)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = table_rows(proc.stdout)
    wrong = {(int(r[0]), kind): int(r[5 + 4 * i]) for r in rows for i, kind in enumerate(COLLECTIVES)}
    assert wrong.pop((4096, "reduce_scatter")) == 4096 // 4 // 2
    assert set(wrong.values()) == {0}
    assert "# Out of bounds values : 512 FAILED" in proc.stdout
    run_dir = only_run_dir(tmp_path)
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "failed" and "512 wrong values" in status["reason"]
    assert json.loads((run_dir / "bench.json").read_text())["num_wrong"] == 512


@pytest.mark.slow
@pytest.mark.parametrize(
    "args, message",
    [
        (["--sizes", "16M:1K"], "MAX is below MIN"),
        (["--sizes", "1Q"], "is not a size"),
        (["--sizes", "1K:1M:1"], "factor must be an integer of 2 or more"),
        (["--iters", "0"], "--iters must be a positive integer"),
        (["--nproc-per-node", "2", "--sizes", "4:64"], "sizes below 8 B cannot be split into one float32 element per rank on 2 ranks"),
    ],
)
def test_bad_flags_are_one_line_errors(args, message):
    proc = cli(["bench-collectives", *args])
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and message in proc.stderr and "Traceback" not in proc.stderr


def test_sizes_ladder_and_rounding():
    assert parse_sizes("1K:256M") == (1024, 256 * 2**20, 2)
    assert size_ladder(*parse_sizes("1K:16M:4")) == [2**10, 2**12, 2**14, 2**16, 2**18, 2**20, 2**22, 2**24]
    # Rounded down to whole elements per rank, as nccl-tests: 3 ranks x 2-byte elements = 6 bytes.
    assert BenchConfig(sizes="64:100", dtype="bfloat16").byte_sizes(3) == [60]
    with pytest.raises(ValueError, match="start at 32 or more"):
        BenchConfig(sizes="8:64").byte_sizes(8)


def _result(rs_us: float, *, backend: str = "gloo"):
    times = {}
    for nbytes in (1024, 4096):
        times[nbytes, "all_reduce"] = [100.0, 110.0, 90.0]
        times[nbytes, "reduce_scatter"] = [rs_us] * 3
        times[nbytes, "all_gather"] = [50.0] * 3
    wrong = {key: 0 for key in times}
    return build_result(
        times_us=times,
        wrong=wrong,
        sizes=[1024, 4096],
        element_bytes=4,
        world_size=4,
        backend=backend,
        device_type="cpu",
        config=BenchConfig(sizes="1K:4K:4"),
        env=Env(world_size=4),
        run_dir=None,
    )


def test_gloo_note_only_when_reduce_scatter_costs_like_all_reduce():
    like = _result(95.0)
    assert like.rows[0].results["all_reduce"].time_us == 100.0  # median of the iterations
    assert like.rows[0].rs_ag_over_ar == pytest.approx((95 + 50) / 100)
    assert like.rows[0].results["all_reduce"].busbw_gbps == pytest.approx(1024 / (100 * 1e3) * 2 * 3 / 4)
    assert len(like.notes) == 1 and "reduce_scatter took 0.95x the all_reduce time" in like.notes[0]
    assert _result(50.0).notes == ()  # a ring-like reduce_scatter: nothing to say
    assert _result(95.0, backend="nccl").notes == ()


def test_the_record_keeps_the_flags_typed_and_the_file_flat():
    """The table reads the flags from the record's BenchConfig; bench.json spells them flat, as
    config.json does."""
    result = _result(95.0)
    assert "minBytes: 1024  maxBytes: 4096  factor: 4  warmup iters: 5  iters: 20" in render_table(result)
    assert result.to_json()["config"] == BenchConfig(sizes="1K:4K:4").to_dict()
    assert list(result.to_json())[6] == "config"  # where it always was in the file
