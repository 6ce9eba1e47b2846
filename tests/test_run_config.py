"""The run's Config (run/config.py): nested by section, built from flat flags in one place, flat again
in config.json's order, and rebuilt from a run's record for advise."""

from __future__ import annotations

import json

import pytest

from profile_overlap.record.config import RunConfig
from profile_overlap.record.metrics import Env, RankEnv
from profile_overlap.run import flags
from profile_overlap.run.config import Config, Engines, JobConfig, Schedule, Workload, from_record
from profile_overlap.run.environment import env_json


def test_flat_flags_land_in_their_sections_and_come_back_flat_in_config_jsons_order():
    config = Config.of(mode="ddp", dim=64, steps=3, first_bucket_mb=1.5, out="elsewhere", seed=7)
    assert config.workload == Workload(mode="ddp", dim=64, seed=7)
    assert config.schedule == Schedule(steps=3)
    assert config.engines == Engines(first_bucket_mb=1.5)
    assert config.job == JobConfig(out="elsewhere")
    flat = config.to_dict()
    assert list(flat) == list(Config.FLAG_ORDER)  # seed between profile_steps and profile, as runs always wrote it
    assert (flat["dim"], flat["steps"], flat["first_bucket_mb"], flat["out"], flat["layers"]) == (64, 3, 1.5, "elsewhere", 8)


def test_a_name_that_is_no_flag_is_refused_and_a_bad_value_names_its_flag():
    with pytest.raises(TypeError, match="no flag 'colour'"):
        Config.of(colour="red")
    with pytest.raises(ValueError, match="--fsdp-group sets fsdp2's units"):
        Config.of(mode="ddp", fsdp_group=2)  # a check across sections
    with pytest.raises(ValueError, match="--timeout must be positive"):
        Config.of(timeout_s=0)


def test_a_section_given_whole_takes_the_flat_flags_given_over_it():
    config = flags.build(Config, {"job": JobConfig(out="a", name="n"), "name": "m"})
    assert (config.job.out, config.job.name) == ("a", "m")


def test_a_runs_config_comes_back_from_its_record_without_the_launchers_rank_count():
    config = Config.of(mode="compare", compare_modes="ddp,fsdp2", model="transformer", layers=2, fsdp_group=2, nproc_per_node=2)
    record = RunConfig.from_dict(config.to_dict())
    again = from_record(record)
    assert again.job.nproc_per_node is None
    assert again.to_dict() == {**config.to_dict(), "nproc_per_node": None}
    changed = from_record(record, mode="fsdp2", compare_modes=None, fsdp_prefetch=1)
    assert (changed.workload.modes, changed.engines.fsdp_prefetch, changed.fsdp_units) == (("fsdp2",), 1, 2)
    with pytest.raises(ValueError, match="--fsdp-prefetch 2 is out of range with --fsdp-group 2"):
        from_record(record, mode="fsdp2", compare_modes=None, fsdp_prefetch=2)


def test_an_older_record_without_a_flag_rebuilds_with_todays_default():
    record = RunConfig.from_dict({"mode": "split", "layers": 2, "dim": 32, "batch": 4})  # no --model, no --heads
    assert from_record(record).workload == Workload(mode="split", layers=2, dim=32, batch=4)


def test_env_json_keeps_its_keys_in_order_and_writes_null_for_what_is_unknown():
    env = Env(world_size=2, backend="gloo", hosts=("h",), ranks=(RankEnv(rank=0, host="h", device="x86_64"),))
    plain = env_json(env)
    assert list(plain) == [
        *("date", "command", "launcher", "python", "torch", "cuda", "nccl", "gloo", "backend", "device_type"),
        *("world_size", "num_nodes", "hosts", "ranks"),
    ]
    assert plain["nccl"] is None and json.dumps(plain["hosts"]) == '["h"]'
    assert list(plain["ranks"][0]) == ["rank", "host", "pid", "local_rank", "node_rank", "device"]
