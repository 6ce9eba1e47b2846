"""`python -m profile_overlap analyze` end to end, in a subprocess."""

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import with_reader_gone

pytestmark = pytest.mark.slow  # `python -m profile_overlap analyze` in a subprocess

DATA = Path(__file__).parent / "data"
REPO = Path(__file__).resolve().parent.parent
TRACE_FILTER = DATA / "hta_trace_filter_2rank"
GLOO = DATA / "gloo_2rank"


def analyze(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "profile_overlap", "analyze", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd or REPO,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"},
    )


def test_tables_and_json_schema(tmp_path):
    out = tmp_path / "sub" / "overlap.json"
    p = analyze(TRACE_FILTER, "--json", out)
    assert p.returncode == 0, p.stderr
    # The last line reaches the pipe: the command exits without the interpreter's teardown
    # (cli/main.py exit_with), after flushing what it printed.
    assert p.stdout.rstrip().splitlines()[-1] == f"wrote {out}, overlap.ranks.csv and overlap.steps.csv"
    for title in ("Overlap per rank", "Collectives per rank", "Profiler steps", "Wait vs transfer"):
        assert title in p.stdout
    assert "14.95" in p.stdout and "19.93" in p.stdout  # overlap % of rank 0 and 1
    record = json.loads(out.read_text())
    assert set(record) == {
        "ranks",
        "world_size",
        "slowest_rank",
        "clock_slowest_rank",
        "source",
        "integrity",
        "exposed",
        "spread",
        "interference",
        "dimensions",
        "pipeline",
    }
    assert set(record["exposed"]) == {"ranks", "top", "stragglers", "critical_path"}
    assert "why exposed, these traces" in p.stdout
    assert record["world_size"] == 128 and record["source"] == str(TRACE_FILTER)
    # The rank that waits least (rank 1: 97150 µs against rank 0's 114296 µs).
    assert record["slowest_rank"] == 1 == min(record["ranks"], key=lambda r: r["wait_us"])["rank"]
    assert record["clock_slowest_rank"] is None  # rank 1 also starts 80% of the matched calls last
    rank = record["ranks"][0]
    assert set(rank) >= {"rank", "device", "comm_us", "compute_us", "overlap_us", "exposed_comm_us", "overlap_pct", "steps", "collectives"}
    assert set(rank) - {
        "rank",
        "device",
        "comm_us",
        "compute_us",
        "overlap_us",
        "exposed_comm_us",
        "overlap_pct",
        "steps",
        "collectives",
    } == {"wait_us", "transfer_us", "last_arrivals", "last_arrival_pct", "phases", "phase_collectives", "replay", "fsdp"}
    # HTA's test trace, a real training job, labels its phases `## forward ##`, `## backward ##`
    # and `## optimizer ##` (on the device timeline, where its kernels run).
    assert [p["phase"] for p in rank["phases"]] == ["forward", "backward", "optimizer"]
    assert all(p["window_us"] > 0 and 0 <= p["overlap_us"] <= p["comm_us"] for p in rank["phases"])
    # Collectives go to the phase that issued them: the gradient all_reduces in backward, the
    # embedding all_to_alls (under `DistributedDataParallel.forward`) in forward.
    calls = {(c["phase"], c["kind"]) for c in rank["phase_collectives"]}
    assert {("forward", "all_to_all"), ("backward", "all_reduce"), ("optimizer", "all_gather")} <= calls
    assert set(rank["steps"][0]) == {"step", "step_us", "comm_us", "compute_us", "overlap_us", "exposed_comm_us", "overlap_pct", "phases"}
    assert set(rank["collectives"][0]) == {"kind", "count", "nbytes", "dur_us", "algbw_gbps", "busbw_gbps"}
    assert rank["overlap_pct"] == pytest.approx(59216 * 100 / 396199, abs=0.05)
    assert not list(out.parent.glob(".*.tmp"))  # the temporary file was renamed away


def _with_reader_gone(*args):
    return with_reader_gone([sys.executable, "-m", "profile_overlap", *map(str, args)], env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})


def test_output_read_by_head_still_writes_the_json(tmp_path):
    """`analyze DIR --json OUT | head`: the tables have nowhere to go, the files are written all the
    same (rich's own handler ended the process with 1 before --json was written)."""
    p = _with_reader_gone("analyze", TRACE_FILTER, "--json", tmp_path / "piped.json")
    assert p.returncode == 0 and p.stderr == ""
    assert analyze(TRACE_FILTER, "--json", tmp_path / "plain.json").returncode == 0
    assert (tmp_path / "piped.json").read_bytes() == (tmp_path / "plain.json").read_bytes()
    for name in ("ranks", "steps"):
        assert (tmp_path / f"piped.{name}.csv").read_bytes() == (tmp_path / f"plain.{name}.csv").read_bytes()
    # The same for any command's console: no traceback, the command's own exit code.
    p = _with_reader_gone("explain")
    assert p.returncode == 0 and p.stderr == ""


def test_warnings_with_no_reader_still_write_the_json(tmp_path):
    """`analyze DIR --skip-bad --json OUT 2>&1 | head`: the warning about the bad file meets a closed
    pipe on stderr; the command goes on, writes its files and exits 0 (it used to stop there with 1)."""
    folder = tmp_path / "traces"
    shutil.copytree(TRACE_FILTER, folder)
    (folder / "rank9.pt.trace.json").write_text("{not json")
    out = tmp_path / "piped.json"
    cmd = [sys.executable, "-m", "profile_overlap", "analyze", str(folder), "--skip-bad", "--json", str(out)]
    p = with_reader_gone(cmd, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"}, stderr_too=True)
    assert p.returncode == 0 and out.is_file()
    assert analyze(TRACE_FILTER, "--json", tmp_path / "plain.json").returncode == 0
    piped, plain = json.loads(out.read_text()), json.loads((tmp_path / "plain.json").read_text())
    assert piped["ranks"] == plain["ranks"]


def test_hta_compat_and_steps():
    p = analyze(TRACE_FILTER, "--hta-compat")
    assert p.returncode == 0, p.stderr
    assert "11.81" in p.stdout and "20.05" in p.stdout
    assert "HTA-compatible" in p.stdout
    p = analyze(GLOO, "--steps", "2:")
    assert p.returncode == 0, p.stderr
    assert "reduce_scatter" in p.stdout
    p = analyze(GLOO, "--steps", "7:9")
    assert p.returncode == 2 and "no ProfilerStep in --steps 7:9" in p.stderr


def test_rank_from_file_name_is_reported():
    p = analyze(DATA / "kineto_synthetic_2rank")
    assert p.returncode == 0, p.stderr
    assert "taken from the file name worker0.pt.trace.json" in p.stdout


def one_line_error(p, *needles):
    assert p.returncode == 2, (p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def make_bad(tmp_path: Path, case: str) -> Path:
    d = tmp_path / case
    d.mkdir()
    if case == "zero":
        (d / "rank0.json").touch()
    elif case == "nonjson":
        (d / "rank0.json").write_text("this is not json\n")
    elif case == "truncated_gz":
        data = (TRACE_FILTER / "sampled_rank-0.json.gz").read_bytes()
        (d / "rank0.json.gz").write_bytes(data[: len(data) // 2])
    elif case == "not_a_trace":
        (d / "config.json").write_text('{"lr": 0.1}')
    elif case == "no_comm":
        (d / "rank0.json").write_text(
            json.dumps({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 5}]})
        )
    elif case == "same_rank":
        shutil.copy(TRACE_FILTER / "sampled_rank-0.json.gz", d / "a.json.gz")
        shutil.copy(TRACE_FILTER / "sampled_rank-0.json.gz", d / "b.json.gz")
    elif case == "cut_json":
        text = gzip.decompress((DATA / "gloo_2rank" / sorted(p.name for p in GLOO.glob("host_0*"))[0]).read_bytes())
        (d / "rank0.json").write_bytes(text[: len(text) - 200])
    return d


@pytest.mark.parametrize(
    "case, needles",
    [
        ("zero", ["is empty (0 bytes)", "--skip-bad"]),
        ("nonjson", ["is not valid JSON"]),
        ("truncated_gz", ["truncated or corrupt gzip"]),
        ("not_a_trace", ["is not a PyTorch profiler trace", "traceEvents"]),
        ("no_comm", ["no GPU kernels and no gloo communication events"]),
        ("same_rank", ["both claim rank 0", "remove the duplicate"]),
        ("cut_json", ["cut short"]),
    ],
)
def test_bad_input_one_line(tmp_path, case, needles):
    one_line_error(analyze(make_bad(tmp_path, case)), *needles)


def test_missing_and_empty_folder(tmp_path):
    one_line_error(analyze(tmp_path / "nope"), "does not exist")
    (tmp_path / "empty").mkdir()
    one_line_error(analyze(tmp_path / "empty"), "no *.json or *.json.gz trace files")


def test_skip_bad_analyzes_the_good_files(tmp_path):
    d = tmp_path / "mixed"
    shutil.copytree(TRACE_FILTER, d)
    (d / "zero.json").touch()
    (d / "notes.json").write_text('{"a": 1}')
    data = (TRACE_FILTER / "sampled_rank-1.json.gz").read_bytes()
    (d / "cut.json.gz").write_bytes(data[:1000])
    p = analyze(d, "--skip-bad", "--json", tmp_path / "o.json")
    assert p.returncode == 0, p.stderr
    warnings = [line for line in p.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 3 and len(p.stderr.strip().splitlines()) == 3
    assert [r["rank"] for r in json.loads((tmp_path / "o.json").read_text())["ranks"]] == [0, 1]
    one_line_error(analyze(d), "--skip-bad")
