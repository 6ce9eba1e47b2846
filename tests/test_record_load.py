"""metrics.json read back through msgspec: records of every older schema convert once on read, and a
record this version cannot read (a newer schema, a hand edit with a wrong type) is one line naming
the file and the field, exit 2."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import msgspec
import pytest

from profile_overlap.core.errors import UserError
from profile_overlap.record.analysis import AnalysisRecord
from profile_overlap.record.load import decode_metrics, load_metrics
from profile_overlap.record.metrics import INDENTED_RANKS, JOB, SCHEMA_VERSION, RunMetrics

from conftest import cli

GOLDEN_RUN = Path(__file__).resolve().parent / "golden" / "run"


def _golden() -> dict:
    return json.loads((GOLDEN_RUN / "metrics.json").read_text())


def test_a_schema_1_record_gets_its_summary_and_typed_analysis():
    raw = _golden()
    assert raw["schema_version"] == 1 and "summary" not in raw
    metrics = load_metrics(GOLDEN_RUN / "metrics.json")
    split = metrics.modes["split"]
    assert isinstance(split.analysis, AnalysisRecord)
    assert split.analysis.ranks[0].comm_us == raw["modes"]["split"]["analysis"]["ranks"][0]["comm_us"]
    assert split.analysis.ranks[0].phases == ()  # schema 1 had no phases: read as none
    seq, sp = metrics.modes["sequential"].step_time.median_ms, split.step_time.median_ms
    assert metrics.summary.headline["speedup"] == pytest.approx(seq / sp)
    assert list(metrics.summary.modes) == ["sequential", "split"]


def test_a_schema_2_record_gets_the_numbers_of_schema_3():
    current = load_metrics(GOLDEN_RUN / "metrics.json")
    old = current.to_json()
    old["schema_version"] = 2
    for m in old["summary"]["modes"].values():
        del m["phases"], m["phase_collectives"], m["bytes_checks"]
    del old["summary"]["overlap_yield"], old["summary"]["interference"], old["summary"]["speedup_vs_first"]
    read = decode_metrics(json.dumps(old).encode(), path="old.json")
    assert read.summary == current.summary


def test_a_current_record_round_trips_unchanged_through_json():
    current = load_metrics(GOLDEN_RUN / "metrics.json")
    text = json.dumps(current.to_json())
    assert json.loads(text)["schema_version"] == 1  # converted in memory, not rewritten
    back = decode_metrics(text.encode(), path="x.json")
    assert back == current and json.dumps(back.to_json()) == text


def test_a_job_record_from_before_job_facts_gets_them_from_its_config():
    raw = _golden()
    raw["config"] = {"mode": "job", "job": "j", "profiled_ranks": [0, 1], "missing_ranks": [2], "profiled_steps": 4, "trace_files": 6}
    metrics = decode_metrics(json.dumps(raw).encode(), path="job.json")
    assert metrics.job is not None and metrics.job.kind == JOB
    assert (metrics.job.profiled_ranks, metrics.job.missing_ranks, metrics.job.profiled_steps) == ((0, 1), (2,), 4)


def test_a_wrong_type_names_the_file_and_the_field():
    raw = _golden()
    raw["modes"]["split"]["step_time"]["median_ms"] = "fast"
    with pytest.raises(UserError) as err:
        decode_metrics(json.dumps(raw).encode(), path="runs/x/metrics.json")
    message = str(err.value)
    assert message.startswith("runs/x/metrics.json: field $.modes[...].step_time.median_ms: Expected `float | null`, got `str`")
    assert "\n" not in message


def test_a_newer_schema_is_refused_in_one_line():
    raw = _golden()
    raw["schema_version"] = SCHEMA_VERSION + 1
    with pytest.raises(UserError, match=f"schema {SCHEMA_VERSION + 1}, newer than this version reads"):
        decode_metrics(json.dumps(raw).encode(), path="m.json")


def test_the_record_types_decode_what_they_encode():
    metrics = load_metrics(GOLDEN_RUN / "metrics.json")
    assert msgspec.json.decode(msgspec.json.encode(metrics), type=RunMetrics) == metrics


@pytest.mark.slow
@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (
            lambda raw: raw["modes"]["split"]["memory"][0].update(rank="zero"),
            "field $.modes[...].memory[0].rank: Expected `int`, got `str`",
        ),
        (lambda raw: raw.update(schema_version=SCHEMA_VERSION + 1), f"a metrics record of schema {SCHEMA_VERSION + 1}, newer"),
    ],
)
def test_report_of_a_record_it_cannot_read_exits_2_with_one_line(tmp_path, edit, expected):
    run = tmp_path / "run"
    shutil.copytree(GOLDEN_RUN, run, ignore=shutil.ignore_patterns("expected"))
    raw = _golden()
    edit(raw)
    (run / "metrics.json").write_text(json.dumps(raw))
    proc = cli(["report", str(run), "--format", "md"])
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert str(run / "metrics.json") in proc.stderr and expected in proc.stderr


def test_metrics_json_is_indented_up_to_64_ranks_and_one_line_above_and_reads_back_the_same(tmp_path):
    current = load_metrics(GOLDEN_RUN / "metrics.json")
    mode, m = next((k, v) for k, v in current.modes.items() if v.analysis)
    assert m.analysis is not None
    ranks = [msgspec.structs.replace(m.analysis.ranks[i % len(m.analysis.ranks)], rank=i) for i in range(INDENTED_RANKS + 1)]
    for n in (INDENTED_RANKS, INDENTED_RANKS + 1):
        analysis = msgspec.structs.replace(m.analysis, ranks=tuple(ranks[:n]))
        record = msgspec.structs.replace(current, modes={**current.modes, mode: msgspec.structs.replace(m, analysis=analysis)})
        path = record.write(tmp_path / f"metrics-{n}.json")
        lines = path.read_text().splitlines()
        assert (len(lines) == 1) == (n > INDENTED_RANKS), len(lines)
        assert json.loads(path.read_text()) == record.to_json()
