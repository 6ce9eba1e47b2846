"""--fsdp-prefetch and --split-prefetch: validated before any rank starts, recorded in the config,
the report's setup and the rerun command, and acted on by real gloo ranks."""

from __future__ import annotations

import json

import pytest

from profile_overlap.run.config import Config

from conftest import FEW_STEPS, TINY_TRANSFORMER, cli, only_run_dir


def test_the_prefetch_flags_default_to_todays_behaviour():
    config = Config.of(mode="compare", compare_modes="split,fsdp2", model="transformer", layers=2)
    assert (config.workload.split_prefetch, config.engines.fsdp_prefetch) == (0, 0)
    assert config.workload.num_units == 4  # embedding, two blocks, head


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--fsdp-prefetch", "4"], "this model has 4 communication units, so a unit can prefetch 0 to 3"),
        (["--split-prefetch", "-1"], "--split-prefetch -1 is out of range"),
    ],
)
def test_a_prefetch_beyond_the_units_gets_one_line_before_any_rank_starts(tmp_path, capsys, args, message):
    from profile_overlap.cli.main import main

    assert main(["--nproc-per-node", "2", "--out", str(tmp_path), *TINY_TRANSFORMER, *args]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
def test_prefetching_runs_train_the_same_and_are_recorded_for_the_rerun(tmp_path):
    args = ["--nproc-per-node", "2", "--modes", "split,fsdp2", "--fsdp-prefetch", "1", "--split-prefetch", "2"]
    proc = cli([*args, "--out", str(tmp_path), *TINY_TRANSFORMER, *FEW_STEPS])
    assert proc.returncode == 0, proc.stderr
    run_dir = only_run_dir(tmp_path)
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert (metrics["config"]["fsdp_prefetch"], metrics["config"]["split_prefetch"]) == (1, 2)
    assert all(c["passed"] for c in metrics["checks"])  # fsdp2 with explicit prefetch ends equal to split
    assert "--fsdp-prefetch 1 --split-prefetch 2" in metrics["env"]["command"]
    report = (run_dir / "report.md").read_text()
    assert "fsdp_prefetch" in report and "--split-prefetch 2" in report
