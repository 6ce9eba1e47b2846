"""--first-bucket-mb (ddp's first gradient bucket) and --fsdp-group (fsdp2's fully_shard units):
validated before any rank starts, recorded in the config and the rerun command, and acted on by
real gloo ranks: the traces' collectives are the ones the replay builds for the same flags."""

from __future__ import annotations

import json

import pytest

from profile_overlap.record.folder import load_run
from profile_overlap.run.config import Config
from profile_overlap.tools import whatif
from profile_overlap.tools.advise import candidates as advise_replay
from profile_overlap.tools.whatif import model

from conftest import FEW_STEPS, TINY_TRANSFORMER, cli, only_run_dir

MIB = 1024 * 1024


def test_the_engine_shape_flags_default_to_todays_behaviour():
    config = Config.of(mode="compare", compare_modes="ddp,fsdp2", model="transformer", layers=2)
    assert (config.engines.first_bucket_mb, config.engines.fsdp_group, config.fsdp_units) == (None, 1, 4)
    assert Config.of(mode="fsdp2", model="transformer", layers=2, fsdp_group=3).fsdp_units == 2  # units 0-2, then 3


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--mode", "ddp", "--first-bucket-mb", "0"], "--first-bucket-mb must be positive, got 0"),
        (["--mode", "split", "--first-bucket-mb", "1"], "--first-bucket-mb sets a ddp bucket: add ddp to the modes"),
        (["--mode", "fsdp2", "--fsdp-group", "5"], "this model has 4 communication units, so a fully_shard call can take 1 to 4"),
        (["--mode", "ddp", "--fsdp-group", "2"], "--fsdp-group sets fsdp2's units: add fsdp2 to the modes"),
        (["--mode", "fsdp2", "--fsdp-group", "2", "--fsdp-prefetch", "2"], "fsdp2 has 2 units, so a unit can prefetch 0 to 1"),
    ],
)
def test_a_bad_engine_shape_gets_one_line_before_any_rank_starts(tmp_path, capsys, args, message):
    from profile_overlap.cli.main import main

    assert main(["--nproc-per-node", "2", "--out", str(tmp_path), *TINY_TRANSFORMER, *args]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not list(tmp_path.iterdir())


def _backward_calls(run_dir, mode: str, kind: str) -> list[int]:
    return [c.nbytes for c in whatif.measure_mode(load_run(run_dir), mode).calls if c.phase == "backward" and c.kind == kind]


@pytest.mark.slow
def test_a_first_bucket_cap_splits_ddps_gradients_where_the_replay_cuts_them(tmp_path):
    args = ["--nproc-per-node", "2", "--mode", "ddp", "--first-bucket-mb", "0.06"]
    proc = cli([*args, "--out", str(tmp_path), *TINY_TRANSFORMER, *FEW_STEPS])
    assert proc.returncode == 0, proc.stderr
    run_dir = only_run_dir(tmp_path)
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["config"]["first_bucket_mb"] == 0.06 and "--first-bucket-mb 0.06" in metrics["env"]["command"]
    assert all(c["passed"] for c in metrics["checks"])
    assert "first_bucket_mb" in (run_dir / "report.md").read_text()
    # The whole tiny model is 0.51 MiB: at the 25 MiB cap alone it is one all_reduce; the 0.06 MiB first
    # bucket closes on the head's weight, and torch keeps that at its bucket rebuild after step 1.
    params = advise_replay.unit_params(load_run(run_dir).metrics.config)
    assert len(model.ddp_buckets(params, 25 * MIB)) == 1
    buckets = model.ddp_buckets(params, 25 * MIB, 0.06 * MIB)
    assert _backward_calls(run_dir, "ddp", "all_reduce") == [n for _, n in buckets] and len(buckets) == 2


@pytest.mark.slow
def test_fsdp2_units_of_two_gather_each_pair_in_one_call_and_train_the_same(tmp_path):
    args = ["--nproc-per-node", "2", "--modes", "split,fsdp2", "--fsdp-group", "2"]
    proc = cli([*args, "--out", str(tmp_path), *TINY_TRANSFORMER, *FEW_STEPS])
    assert proc.returncode == 0, proc.stderr
    run_dir = only_run_dir(tmp_path)
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["config"]["fsdp_group"] == 2 and "--fsdp-group 2" in metrics["env"]["command"]
    assert all(c["passed"] for c in metrics["checks"])  # fsdp2 in groups ends equal to split
    # Four units (embedding, two blocks, head) in two fully_shard calls: two reduce_scatters per step,
    # each of its pair's bytes, where the split has one per unit.
    split = _backward_calls(run_dir, "split", "reduce_scatter")
    fsdp = _backward_calls(run_dir, "fsdp2", "reduce_scatter")
    assert len(split) == 4 and len(fsdp) == 2
    assert sorted(fsdp) == sorted([split[0] + split[1], split[2] + split[3]])


def test_a_verification_run_of_one_mode_drops_the_other_engines_shape_and_advice_keeps_to_the_checks():
    import msgspec

    from profile_overlap.record.config import RunConfig
    from profile_overlap.tools.advise import _valid

    def record(**flags) -> RunConfig:  # the config as metrics.json holds it
        d = Config.of(**flags).to_dict()
        return msgspec.convert(d, RunConfig).with_keys(d)

    cfg = record(mode="compare", compare_modes="ddp,fsdp2", model="transformer", layers=2, first_bucket_mb=0.1, fsdp_group=2)
    fsdp = advise_replay.rerun_config(cfg, "fsdp2", {"reshard_after_forward": "false"})
    ddp = advise_replay.rerun_config(cfg, "ddp", {})
    assert (fsdp.workload.modes, fsdp.engines.first_bucket_mb, fsdp.engines.fsdp_group) == (("fsdp2",), None, 2)
    assert (ddp.workload.modes, ddp.engines.first_bucket_mb, ddp.engines.fsdp_group) == (("ddp",), 0.1, 1)
    # Prefetching 1 unit ahead needs 2 or more fsdp2 units: the whole model in one fully_shard call has 1.
    with_prefetch = record(mode="fsdp2", model="transformer", layers=2, fsdp_prefetch=1)
    assert _valid(with_prefetch, "fsdp2", {"fsdp_group": 2}) and not _valid(with_prefetch, "fsdp2", {"fsdp_group": 4})
