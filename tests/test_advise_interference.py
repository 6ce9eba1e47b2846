"""Advice says what it assumed: each replayed item carries the interference its replay charged, a
change predicted slower is not advised, and a note says when taking overlap away is predicted faster."""

from __future__ import annotations

import json
import shutil

import msgspec
import pytest

from profile_overlap.record.advice import ADVICE_JSON, Advice, AdviceItem, encode, load_advice
from profile_overlap.record.call_cost import BANDWIDTH, FIT, LATENCY
from profile_overlap.record.config import RunConfig
from profile_overlap.record.interference_used import NONE, OPERATORS, SPLIT_BLOCKING, UsedInterference
from profile_overlap.render.advice import item_line, report_sections
from profile_overlap.render.document import Code, Table
from profile_overlap.tools.advise import candidates as advise_replay
from profile_overlap.tools.advise import overlap_costs
from profile_overlap.tools.advise.candidates import Candidate
from profile_overlap.tools.whatif import Measured, MeasuredCall, model

from conftest import cli

USED = {
    "forward": UsedInterference(phase="forward", slowdown_pct=-12.0, low_pct=-20.0, high_pct=-4.0, pairs=30, source=OPERATORS),
    "backward": UsedInterference(phase="backward", slowdown_pct=25.0, low_pct=20.0, high_pct=30.0, pairs=40, source=OPERATORS),
    "optimizer": UsedInterference(phase="optimizer", slowdown_pct=8.0, low_pct=2.0, high_pct=14.0, pairs=None, source=SPLIT_BLOCKING),
    "other": UsedInterference(phase="other", slowdown_pct=0.0, low_pct=None, high_pct=None, pairs=None, source=NONE),
}


def _item(gain_ms: float) -> AdviceItem:
    return AdviceItem(
        kind="ddp-bucket",
        mode="ddp",
        cause="transfer",
        change="gradient buckets of 1 MiB",
        flag="--bucket-cap-mb 1",
        code=None,
        baseline_ms=40.0,
        predicted_ms=40.0 - gain_ms,
        predicted_gain_ms=gain_ms,
        gain_low_ms=gain_ms - 1,
        gain_high_ms=gain_ms + 1,
        worth_it=gain_ms > 1,
        verifiable=True,
        interference=tuple(USED.values()),
    )


def test_each_replayed_item_names_the_interference_it_assumed_and_where_it_came_from():
    line = item_line(1, _item(3.0))
    assert (
        "interference assumed: forward -12.0% [-20.0, -4.0] (operators, 30 pairs) (0% charged), "
        "backward +25.0% [+20.0, +30.0] (operators, 40 pairs), optimizer +8.0% [+2.0, +14.0] (split vs split-blocking)"
    ) in line
    assert "other" not in line.split("interference assumed:")[1].split("(cause")[0]
    assert "not advised" not in line


def test_a_change_predicted_slower_is_not_advised():
    line = item_line(1, _item(-2.5))
    assert "predicted gain -2.50 [-3.50, -1.50] ms per step (slower: not advised)" in line


def _candidate(*, less_overlap: bool, flag: str = "--bucket-cap-mb 30") -> Candidate:
    return Candidate(
        kind="ddp-bucket", mode="ddp", change="one gradient bucket", flag=flag, code=None, config={}, gain_us=0.0, less_overlap=less_overlap
    )


def test_when_taking_overlap_away_is_predicted_faster_the_advice_says_the_overlap_costs_more_than_it_hides():
    used = {"ddp": USED}
    (note,) = overlap_costs([(_candidate(less_overlap=True), 4.0, 1.0), (_candidate(less_overlap=False), 9.0, 1.0)], used)
    assert note.startswith(
        "ddp: the current overlap costs more than it hides at the measured interference (forward -12.0% (operators, 0% charged)"
    )
    assert note.endswith("one gradient bucket (--bucket-cap-mb 30) is predicted 4 ms per step faster")
    # Within the noise, or a change that adds overlap: nothing to say.
    assert overlap_costs([(_candidate(less_overlap=True), 0.5, 1.0), (_candidate(less_overlap=False), 9.0, 1.0)], used) == []


@pytest.mark.slow
def test_a_planted_interference_is_charged_in_the_ddp_advice_and_named_in_it(engine_run_2, tmp_path):
    """The same run advised twice: as measured, and with ddp's backward interference planted at +300%
    (operators) in its record. Smaller buckets, or a smaller first one, move all_reduces under the
    backward, so they pay it: no bucket item gains more than before, one gains less, and each item
    names the figure it used. (The run as measured has one bucket, overlapping nothing: it pays none.)"""
    gains = {}
    for planted in (None, 300.0):
        run_dir = tmp_path / f"run{planted}"
        shutil.copytree(engine_run_2[0], run_dir)
        if planted is not None:
            metrics = json.loads((run_dir / "metrics.json").read_text())
            figure = {"slowdown_pct": planted, "low_pct": planted - 10, "high_pct": planted + 10, "pairs": 99}
            ranks = {str(r["rank"]): figure | {"phases": {"backward": figure}} for r in metrics["modes"]["ddp"]["analysis"]["ranks"]}
            metrics["modes"]["ddp"]["analysis"]["interference"] = figure | {"ranks": ranks}
            (run_dir / "metrics.json").write_text(json.dumps(metrics))
        proc = cli(["advise", str(run_dir)])
        assert proc.returncode == 0, proc.stderr
        items = json.loads((run_dir / "advice.json").read_text())["items"]
        buckets = [i for i in items if i["kind"] in ("ddp-bucket", "ddp-first-bucket")]
        gains[planted] = {i["kind"]: i["predicted_gain_ms"] for i in buckets}
        bucket = buckets[0]
        backward = next(u for u in bucket["interference"] if u["phase"] == "backward")
        if planted is not None:
            assert backward == {
                "phase": "backward",
                "slowdown_pct": 300.0,
                "low_pct": 290.0,
                "high_pct": 310.0,
                "pairs": 99,
                "source": "operators",
            }
            advice = load_advice(run_dir)
            assert advice is not None
            line = item_line(1, next(i for i in advice.items if i.kind == bucket["kind"]))
            assert "interference assumed: backward +300.0% [+290.0, +310.0] (operators, 99 pairs)" in line
            if bucket["predicted_gain_ms"] < 0:
                assert not bucket["worth_it"]
    assert set(gains[300.0]) == set(gains[None]) == {"ddp-bucket", "ddp-first-bucket"}
    assert all(gains[300.0][k] <= gains[None][k] + 1e-9 for k in gains[None])
    assert any(gains[300.0][k] < gains[None][k] - 0.1 for k in gains[None])


# ---------------------------------------------------------------- the per-call cost of more buckets

MIB = 2**20


def _one_bucket_ddp() -> tuple[advise_replay.Replayed, list[tuple[int, int]], RunConfig]:
    """Two units of 1 MiB (F 1 each; backward B1 then B0, 4 µs each; Adam 0.5 each) in one bucket: its
    2 MiB all_reduce (6 µs measured) starts when B0 ends, overlapping nothing. Step: 2 + 8 + 6 + 1 = 17."""
    comms = (model.Comm("all_reduce", 2 * MIB, "backward", 0, 6.0),)
    g = model.StepGraph("ddp", 0.0, (1.0, 1.0), (4.0, 4.0), (0.5, 0.5), comms)
    r = advise_replay.Replayed(mode="ddp", graph=g, step_us=model.simulate(g).step_us, profiled_ms=None)
    return r, [(0, MIB), (1, MIB)], RunConfig(mode="ddp", model="mlp", layers=2)


def _measured(*calls: tuple[int, float]) -> dict[str, Measured]:
    m = Measured(
        mode="ddp",
        pre_us=0.0,
        phase_us={"forward": 2.0, "backward": 8.0, "optimizer": 1.0},
        calls=tuple(MeasuredCall(kind="all_reduce", nbytes=n, phase="backward", dur_us=d) for n, d in calls),
        backward_cuts=None,
        step_ms=None,
        profiled_ms=None,
    )
    return {"ddp": m}


def test_one_call_size_leaves_latency_and_bandwidth_apart_so_the_call_cost_has_two_readings():
    by_byte, by_call = advise_replay.call_costs(_measured((2 * MIB, 6.0), (2 * MIB, 8.0)))
    assert (by_byte.source, by_byte.latency_us, by_byte.us_per_mib, by_byte.us(MIB)) == (BANDWIDTH, 0.0, 3.5, 3.5)
    assert (by_call.source, by_call.latency_us, by_call.us_per_mib, by_call.us(MIB)) == (LATENCY, 7.0, 0.0, 7.0)
    # Sizes apart: one reading, the line through them (2 µs a call, 2 µs per MiB).
    (fit,) = advise_replay.call_costs(_measured((MIB, 4.0), (3 * MIB, 8.0)))
    assert (fit.source, fit.latency_us, fit.us_per_mib) == (FIT, pytest.approx(2.0), pytest.approx(2.0))


def test_two_buckets_where_the_call_cost_is_unknown_are_predicted_midway_between_the_two_readings():
    """Two 1 MiB buckets. All bandwidth: each all_reduce 3 µs, the first [6, 9) beside B0 [6, 10), the
    second [10, 13), Adam to 14: 3 µs faster. All latency: each 6 µs, [6, 12) and [12, 18), Adam to 19:
    2 µs slower. Either reading can hold, so the item quotes the middle, 0.5 µs, with both ends in its range."""
    r, params, cfg = _one_bucket_ddp()
    assert r.step_us == pytest.approx(17.0)
    costs = advise_replay.call_costs(_measured((2 * MIB, 6.0)))
    (c,) = [c for c in advise_replay.ddp(r, params, cfg, costs) if c.kind == "ddp-bucket"]
    assert c.flag == "--bucket-cap-mb 1"
    assert c.gain_range_us == pytest.approx((-2.0, 3.0))
    assert c.gain_us == pytest.approx(0.5)
    assert c.call_cost == costs
    assert "all latency" in c.change and "the gain is midway between them" in c.change
    # With the cost fitted from calls of two sizes the one reading stands alone.
    (fit,) = advise_replay.call_costs(_measured((MIB, 3.0), (2 * MIB, 6.0)))
    (c,) = [c for c in advise_replay.ddp(r, params, cfg, (fit,)) if c.kind == "ddp-bucket"]
    assert c.gain_range_us is None and c.gain_us == pytest.approx(3.0)


def _measure_line(tmp_path, items: tuple[AdviceItem, ...]) -> str:
    advice = Advice(schema=1, source="runs/r", is_job=False, noise_ms={}, model_error_pct={}, items=items, notes=())
    (tmp_path / ADVICE_JSON).write_bytes(encode(advice))
    (section,) = report_sections(tmp_path)
    (code,) = [b for b in section.blocks if isinstance(b, Code)]
    return code.text


def test_the_report_says_to_calibrate_first_when_the_top_item_charged_no_measured_interference(tmp_path):
    measured = _item(3.0)
    none = tuple(msgspec.structs.replace(u, slowdown_pct=0.0, low_pct=None, high_pct=None, pairs=None, source=NONE) for u in USED.values())
    unmeasured = msgspec.structs.replace(measured, interference=none)
    assert _measure_line(tmp_path, (measured,)) == "python -m profile_overlap advise runs/r --verify --repeats 5"
    assert _measure_line(tmp_path, (unmeasured, measured)) == "python -m profile_overlap advise runs/r --calibrate --verify --repeats 5"


def test_a_change_whose_gain_is_within_the_noise_says_it_is_not_advised_in_the_console_and_the_report(tmp_path):
    line = item_line(1, _item(0.5))  # worth it only above 1 ms (the item's noise)
    assert "predicted gain 0.50 [-0.50, 1.50] ms per step (within the noise: not advised)" in line
    assert "not advised" not in item_line(1, _item(3.0))
    advice = Advice(schema=1, source="runs/r", is_job=False, noise_ms={}, model_error_pct={}, items=(_item(3.0), _item(0.5)), notes=())
    (tmp_path / ADVICE_JSON).write_bytes(encode(advice))
    (section,) = report_sections(tmp_path)
    (table,) = [b for b in section.blocks if isinstance(b, Table)]
    gains = [row[4][0] for row in table.rows]
    assert gains == ["3.00 [2.00, 4.00]", "0.50 [-0.50, 1.50] (within the noise: not advised)"]
