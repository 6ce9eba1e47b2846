"""record/fields.py: a record struct built from an object of the same field names, each number
rounded as its field declares, nested structs built the same way, nothing left out unseen."""

from __future__ import annotations

from dataclasses import dataclass

import msgspec
import pytest

from profile_overlap.analysis.folder import analyze_dir
from profile_overlap.analysis.record import analysis_record, console_facts
from profile_overlap.record.analysis import CollectiveRecord, PhaseRecord, ReplayCallRecord, ReplayStepRecord, StepRecord
from profile_overlap.record.fields import converter, from_fields

from conftest import DATA


@dataclass
class Phase:
    phase: str
    window_us: float
    comm_us: float
    compute_us: float
    overlap_us: float
    exposed_comm_us: float
    sources: tuple[str, ...]


@dataclass
class Step:
    step: int
    start_us: float  # not a field of StepRecord: left behind
    step_us: float
    comm_us: float
    compute_us: float
    overlap_us: float
    exposed_comm_us: float
    overlap_pct: float | None
    phases: tuple[Phase, ...]


def test_each_number_is_rounded_to_the_decimals_its_field_declares():
    c = from_fields(
        CollectiveRecord,
        None,
        kind="all_reduce",
        count=3,
        nbytes=None,
        dur_us=10.123456,
        algbw_gbps=1.234567,
        busbw_gbps=None,
    )
    assert (c.dur_us, c.algbw_gbps, c.busbw_gbps, c.count, c.nbytes) == (10.123, 1.2346, None, 3, None)


def test_nested_records_are_built_from_their_own_sources_and_extra_attributes_are_left_behind():
    phase = Phase("backward", 2 / 3, 1 / 3, 0.5, 0.1 + 0.2, 1 / 7, ("labels",))
    s = from_fields(StepRecord, Step(4, 123.4, 1000 / 3, 1.0, 2.0, 0.0, 1.0, None, (phase,)))
    rounded = PhaseRecord(
        phase="backward", window_us=0.667, comm_us=0.333, compute_us=0.5, overlap_us=0.3, exposed_comm_us=0.143, sources=("labels",)
    )
    assert s.phases == (rounded,)
    assert (s.step, s.step_us, s.overlap_pct) == (4, 333.333, None)
    assert "start_us" not in msgspec.json.decode(msgspec.json.encode(s))


def test_given_fields_win_over_the_source_and_are_rounded_and_a_field_neither_gives_is_an_error():
    r = from_fields(ReplayStepRecord, None, step=1, pre_us=0.00049, phase_us={"forward": 1.0005}, calls=(), backward_cuts_us=(1 / 3,))
    assert (r.pre_us, r.phase_us, r.backward_cuts_us) == (0.0, {"forward": 1.0}, (0.333,))
    assert from_fields(StepRecord, Step(1, 0, 1, 1, 1, 1, 1, 1, ()), step=9).step == 9
    with pytest.raises(AttributeError, match="overlap_pct"):
        from_fields(StepRecord, None, step=1, step_us=1, comm_us=1, compute_us=1, overlap_us=1, exposed_comm_us=1, phases=())


def test_the_analyze_consoles_ranks_are_the_records_ranks_unrounded():
    analysis = analyze_dir(DATA / "gloo_2rank", max_workers=1)
    record, facts = analysis_record(analysis), console_facts(analysis)
    assert [c.record.rank for c in facts.ranks] == [r.rank for r in record.ranks]
    unrounded = 0
    for c, r in zip(facts.ranks, record.ranks):
        exact = c.record
        to_3 = [(exact.comm_us, r.comm_us), (exact.overlap_pct, r.overlap_pct), (exact.wait_us, r.wait_us)]
        to_3 += [(a.step_us, b.step_us) for a, b in zip(exact.steps, r.steps)]
        to_4 = [(a.algbw_gbps, b.algbw_gbps) for a, b in zip(exact.collectives, r.collectives)]
        for digits, pairs in ((3, to_3), (4, to_4)):
            for x, rounded in pairs:
                assert rounded == round(x, digits)
                unrounded += x != rounded
        assert exact.replay == () and c.group_size.keys() == {k.kind for k in r.collectives}
    assert unrounded > 0  # the traces' numbers have more than 3 decimals: the console's are the measured ones


def test_a_record_struct_the_analysis_made_with_its_numbers_as_measured_is_rounded_when_the_record_is_built():
    measured = PhaseRecord(phase="forward", window_us=1 / 3, comm_us=2 / 3, compute_us=0.0, overlap_us=0.0, exposed_comm_us=2 / 3)
    step = from_fields(StepRecord, Step(1, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0, None, (measured,)))
    assert (step.phases[0].window_us, step.phases[0].comm_us) == (0.333, 0.667)
    assert from_fields(StepRecord, Step(1, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0, None, (measured,)), exact=True).phases == (measured,)


def test_a_fields_converter_converts_as_from_fields_converts_the_field():
    shares = [1 / 3, 2.0005, 0.0004999, 123456.78951, -0.0]
    per_struct = [from_fields(ReplayCallRecord, kind="all_reduce", nbytes=8, phase="backward", share_us=x).share_us for x in shares]
    assert list(map(converter(ReplayCallRecord, "share_us"), shares)) == per_struct == [0.333, 2.001, 0.0, 123456.79, -0.0]
    assert list(map(converter(ReplayCallRecord, "share_us", exact=True), shares)) == shares
    assert converter(ReplayCallRecord, "kind")("all_reduce") == "all_reduce"  # nothing to convert
