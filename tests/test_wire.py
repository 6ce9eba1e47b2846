"""A worker's per-file result packed for the parent (analysis/wire.py) comes back as read_file
returned it: the same types at every level, the same array dtypes, values and writability."""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path

import numpy as np
import pytest
from dims_traces import fsdp_tp_job, pipeline_job, write_job

from profile_overlap.analysis import folder
from profile_overlap.analysis.options import AnalysisOptions
from profile_overlap.core.errors import UserError

DATA = Path(__file__).parent / "data"


def _differences(a: object, b: object, path: str = "result") -> list[str]:
    """Where `b` differs from `a` in type or value (NaN equals NaN), field by field."""
    if type(a) is not type(b):
        return [f"{path}: {type(a).__name__} became {type(b).__name__}"]
    if isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray)
        same = a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b, equal_nan=a.dtype.kind == "f")
        # unpickled arrays are writable whatever they were; so must these be
        return [] if same and (b.flags.writeable or not a.flags.writeable) else [f"{path}: array differs"]
    if dataclasses.is_dataclass(a):
        return [d for f in dataclasses.fields(a) for d in _differences(getattr(a, f.name), getattr(b, f.name), f"{path}.{f.name}")]
    if isinstance(a, tuple | list):
        assert isinstance(b, tuple | list)
        if len(a) != len(b):
            return [f"{path}: {len(a)} items became {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _differences(x, y, f"{path}[{i}]")]
    if isinstance(a, dict):
        assert isinstance(b, dict)
        if list(a) != list(b):
            return [f"{path}: keys differ"]
        return [d for k in a for d in _differences(a[k], b[k], f"{path}[{k!r}]")]
    if isinstance(a, float) and a != a and b != b:
        return []
    return [] if a == b else [f"{path}: {a!r} became {b!r}"]


def _traces(tmp_path: Path) -> list[Path]:
    files = sorted(p for p in DATA.rglob("*") if p.name.endswith((".json", ".json.gz")))
    files += sorted(write_job(fsdp_tp_job(style="gpu"), tmp_path / "fsdp_tp").glob("*.json"))[:1]
    files += sorted(write_job(pipeline_job(stages=2, dp=2, tp=2, style="cpu"), tmp_path / "pipe").glob("*.json"))[:1]
    return files


@pytest.mark.parametrize("timeline", [False, True])
def test_a_packed_result_comes_back_as_read_file_returned_it(tmp_path: Path, timeline: bool) -> None:
    options = AnalysisOptions(timeline=timeline)
    files = _traces(tmp_path)
    assert len(files) >= 8
    for path in files:
        direct = folder.read_file(str(path), options)
        sent = folder._read_for_parent(str(path), options)
        assert isinstance(sent, bytes), f"{path.name} was not packed"
        got = folder._received(pickle.loads(pickle.dumps(sent)))
        assert _differences(direct, got) == [], path.name


def test_a_bad_file_travels_as_its_error(tmp_path: Path) -> None:
    bad = tmp_path / "rank0.json"
    bad.write_text("{not json")
    sent = folder._read_for_parent(str(bad), AnalysisOptions())
    assert isinstance(sent, UserError) and "not valid JSON" in str(sent)
    assert folder._received(sent) is sent


def test_the_parallel_folder_gives_what_one_process_gives(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    traces = write_job(pipeline_job(stages=2, dp=2, tp=1, style="gpu"), tmp_path / "pipe")
    monkeypatch.setattr(folder, "PARALLEL_MIN_BYTES", 0)  # small traces: read them in worker processes anyway
    one = folder.analyze_dir(traces, max_workers=1)
    two = folder.analyze_dir(traces, max_workers=2)
    assert _differences(one.ranks, two.ranks) == []
