"""`analyze --json` encodes the typed record with msgspec (core/json_text.py, analysis/record.py
`record_json`) and must still write the bytes `json.dump(record, f, indent=1)` wrote: other tools
and the golden files read them."""

from __future__ import annotations

import json
import math
import random
import shutil
import struct

import msgspec
import pytest
from synthetic import write_large_trace

from profile_overlap.analysis import record as record_module
from profile_overlap.analysis.folder import analyze_dir
from profile_overlap.analysis.options import AnalysisOptions
from profile_overlap.analysis.record import to_json
from profile_overlap.cli.main import main
from profile_overlap.core import io
from profile_overlap.core.json_text import as_python_json

from conftest import DATA


def python_json(data) -> bytes:
    return (json.dumps(data, indent=1) + "\n").encode()


def test_floats_are_spelled_as_python_spells_them_whatever_their_size():
    rng = random.Random(38)
    floats = [1e15, 1e16, 1e22, 1e-4, 1e-5, -1e-7, 5e-324, 1.7976931348623157e308, 0.1 + 0.2, -0.0, 123456.789]
    floats += [rng.random() * 10 ** rng.randint(-20, 25) * rng.choice((1, -1)) for _ in range(20_000)]
    floats += [x for x in (struct.unpack("d", rng.randbytes(8))[0] for _ in range(20_000)) if math.isfinite(x)]
    data = {"values": floats, "nested": [{"x": 1e-5}, [2e20, []], {}], "1e5": 0.00001}
    assert as_python_json(msgspec.json.encode(data), indent=1) + b"\n" == python_json(data)


def test_strings_are_escaped_to_ascii_as_python_escapes_them_and_text_that_looks_like_a_number_stays_text():
    rng = random.Random(7)
    texts = ["µs ✓ 😀", "\x7f\x1b[31m", 'a "quoted" \\ back/slash', "\t\n\r\b\f", "step: 1e5", "0.00001", '"k": 1e-5']
    texts += ["".join(chr(rng.choice((rng.randint(1, 0xD7FF), rng.randint(0xE000, 0x10FFFF)))) for _ in range(8)) for _ in range(2_000)]
    data = {"texts": texts, **{t: t for t in texts[:7]}}
    assert as_python_json(msgspec.json.encode(data), indent=1) + b"\n" == python_json(data)


@pytest.mark.parametrize("options", [[], ["--steps", "1:3"], ["--hta-compat"]])
def test_analyze_json_is_byte_for_byte_what_json_dump_wrote_replay_steps_and_non_ascii_source_included(tmp_path, options):
    traces = tmp_path / "tráces µ ✓ 😀"
    traces.mkdir()
    for r in range(2):
        write_large_trace(traces / f"rank{r}.pt.trace.json", target_bytes=400_000, rank=r, world_size=2, layers_per_step=20)
    out = tmp_path / "analysis.json"
    assert main(["analyze", str(traces), "--json", str(out), *options]) == 0
    steps = (1, 3) if options[:1] == ["--steps"] else None
    expected = to_json(analyze_dir(traces, AnalysisOptions(steps=steps, hta_compat=options == ["--hta-compat"])))
    assert sum(len(s["calls"]) for r in expected["ranks"] for s in r["replay"]) > 50
    assert out.read_bytes() == python_json(expected)


@pytest.mark.parametrize("folder", ["gloo_2rank", "hta_nccl_parser_config_1rank"])
def test_analyze_json_of_real_traces_is_byte_for_byte_what_json_dump_wrote(tmp_path, folder):
    shutil.copytree(DATA / folder, tmp_path / folder)
    out = tmp_path / "analysis.json"
    assert main(["analyze", str(tmp_path / folder), "--json", str(out)]) == 0
    assert out.read_bytes() == python_json(to_json(analyze_dir(tmp_path / folder)))


def test_analyze_json_encodes_the_structs_without_turning_them_into_dicts_or_python_json_first(tmp_path, monkeypatch):
    traces = tmp_path / "traces"
    traces.mkdir()
    for r in range(2):
        write_large_trace(traces / f"rank{r}.pt.trace.json", target_bytes=200_000, rank=r, world_size=2, layers_per_step=20)

    def refused(*args, **kwargs):
        raise AssertionError("the --json record went through dicts or Python's json encoder")

    monkeypatch.setattr(record_module, "as_json", refused)
    monkeypatch.setattr(io.json, "dump", refused)
    monkeypatch.setattr(io.json, "dumps", refused)
    monkeypatch.setattr(msgspec, "to_builtins", refused)
    out = tmp_path / "analysis.json"
    assert main(["analyze", str(traces), "--json", str(out)]) == 0
    monkeypatch.undo()
    assert out.read_bytes() == python_json(to_json(analyze_dir(traces)))


def test_analyze_without_its_timelines_writes_the_same_record_and_a_timeline_of_it_is_refused(tmp_path):
    """`analyze` without --tensorboard does not draw the ranks' timeline spans (AnalysisOptions.timeline):
    nothing it prints or writes changes, and a timeline.json cannot be made from that analysis by mistake."""
    folder = DATA / "gloo_2rank"
    drawn = analyze_dir(folder, max_workers=1)
    bare = analyze_dir(folder, AnalysisOptions(timeline=False), max_workers=1)
    assert all(len(r.timeline) > 0 for r in drawn.ranks) and all(r.timeline is None for r in bare.ranks)
    as_written = [b"".join(record_module.record_json(a, record_module.analysis_record(a, replay=False))) for a in (drawn, bare)]
    assert as_written[0] == as_written[1]
    assert record_module.timeline_of({"split": drawn}).modes["split"].ranks[0].spans
    with pytest.raises(AssertionError, match="without their spans"):
        record_module.timeline_of({"split": bare})
