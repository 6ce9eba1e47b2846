"""The record's config (record/config.RunConfig): typed, and written back with the keys it was given."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from profile_overlap.record.config import RUN_FIELDS_END, RunConfig
from profile_overlap.record.load import load_metrics
from profile_overlap.run.config import Config

GOLDEN_RUN = Path(__file__).resolve().parent / "golden" / "run"


def test_the_record_config_has_every_run_flag_in_the_order_config_json_writes_them():
    fields = list(RunConfig.__struct_fields__)
    assert fields[: fields.index(RUN_FIELDS_END) + 1] == list(Config.of().to_dict())


@pytest.mark.parametrize("config", [Config.of(), Config.of(mode="split", model="transformer", name="x", repeats=3, lr=0.01)])
def test_a_runs_config_is_written_back_byte_for_byte(config):
    flat = config.to_dict()
    typed = RunConfig.from_dict(flat)
    assert json.dumps(typed.to_json()) == json.dumps(flat)
    assert (typed.layers, typed.model, typed.name) == (config.workload.layers, config.workload.model, config.job.name)


def test_a_jobs_and_a_folders_few_keys_stay_few():
    job = {"mode": "job", "job": "j", "log_dir": "/l", "trace_files": 4, "profiled_steps": 2, "profiled_ranks": [0, 1]}
    folder = {"source": "/traces", "hta_compat": False}
    for raw in (job, folder):
        assert json.dumps(RunConfig.from_dict(raw).to_json()) == json.dumps(raw)
    assert RunConfig.from_dict(job).profiled_ranks == (0, 1) and RunConfig.from_dict(folder).layers is None


def test_an_older_records_config_keeps_its_keys_and_order_and_reads_defaults_for_the_rest():
    raw = json.loads((GOLDEN_RUN / "metrics.json").read_text())["config"]
    assert "model" not in raw and list(raw)[8] == "backend"  # written before --model, in an older order
    metrics = load_metrics(GOLDEN_RUN / "metrics.json")
    assert json.dumps(metrics.to_json()["config"]) == json.dumps(raw)
    assert (metrics.config.model, metrics.config.layers, metrics.config.heads) == ("mlp", raw["layers"], 4)
    back = msgspec.json.decode(json.dumps(metrics.to_json()).encode())
    assert list(back["config"]) == list(raw)


def test_a_config_key_the_record_does_not_know_is_refused_when_building_it():
    with pytest.raises(ValueError, match="no field 'colour'"):
        RunConfig.from_dict({"mode": "split", "colour": "red"})


def test_a_flag_an_older_record_lacks_reads_the_default_the_run_command_has_today():
    from profile_overlap.run import flags

    record = RunConfig()
    differing = [f.name for f in flags.flags(Config) if f.name != "mode" and getattr(record, f.name) != f.default]
    assert differing == []  # (mode: "" in the record is a folder's, which ran no mode of ours)
