"""Collective calls kept as columns (analysis/file/call_columns.py): numbered and summed as the objects
they replace, no Python object per call left in a rank's analysis, and `analyze --json` writing
every replayed call though it no longer holds them all as objects."""

import gc
import json
from types import FunctionType, ModuleType, SimpleNamespace

import numpy as np
import pytest
from synthetic import write_large_trace

from profile_overlap.analysis.file.call_columns import UNKNOWN, Calls, collective_stats, number_calls
from profile_overlap.analysis.file.collectives import CollectiveCall, CollectiveInstance
from profile_overlap.analysis.file.events import extract
from profile_overlap.analysis.folder import analyze_dir
from profile_overlap.analysis.rank.per_rank import finish_rank
from profile_overlap.analysis.read.trace import load_trace
from profile_overlap.analysis.record import to_json
from profile_overlap.analysis.world.clocks import ClockAlignment
from profile_overlap.analysis.world.cross_rank import _call_keys, _last_arrivals, combine
from profile_overlap.cli.main import main


def calls(kind, pg, start, *, nbytes=None, group=None, hint=None, issued=None):
    n = len(kind)
    return Calls.build(
        kind=kind,
        pg=pg,
        nbytes=np.array(nbytes if nbytes is not None else [UNKNOWN] * n),
        dur_us=np.full(n, 10.0),
        start_us=np.array(start, dtype=float),
        launch_us=np.array(start, dtype=float) - 1,
        group_size=np.array(group if group is not None else [UNKNOWN] * n),
        issued_us=np.array(issued if issued is not None else [np.nan] * n),
        hint=hint if hint is not None else [None] * n,
    )


def test_calls_are_numbered_in_time_order_within_each_group_and_kind():
    c = calls(["all_reduce", "all_gather", "all_reduce", "all_reduce", "all_gather"], ["0", "0", "1", "0", "0"], [50, 10, 20, 5, 30])
    numbered = [(i.pg, i.kind, i.seq, i.start_us) for i in number_calls(c)]
    assert numbered == [
        ("0", "all_reduce", 0, 5.0),
        ("0", "all_gather", 0, 10.0),
        ("1", "all_reduce", 0, 20.0),
        ("0", "all_gather", 1, 30.0),
        ("0", "all_reduce", 1, 50.0),
    ]


def test_columns_read_back_as_the_calls_with_none_where_the_trace_is_silent():
    c = calls(
        ["all_reduce", "reduce_scatter"],
        ["0", "0"],
        [1, 2],
        nbytes=[4096, UNKNOWN],
        group=[UNKNOWN, 8],
        hint=["backward", None],
        issued=[0.5, np.nan],
    )
    assert list(c) == [
        CollectiveCall("all_reduce", "0", 4096, 10.0, 1.0, 0.0, None, issued_us=0.5, phase_hint="backward"),
        CollectiveCall("reduce_scatter", "0", None, 10.0, 2.0, 1.0, 8, issued_us=None, phase_hint=None),
    ]
    assert list(number_calls(c))[1] == CollectiveInstance("reduce_scatter", "0", 0, None, 10.0, 2.0, 8)
    both = Calls.concat([c, calls(["all_gather"], ["1"], [3], hint=["forward"])])
    assert [(x.kind, x.pg, x.phase_hint) for x in both] == [
        ("all_reduce", "0", "backward"),
        ("reduce_scatter", "0", None),
        ("all_gather", "1", "forward"),
    ]


def test_per_kind_stats_take_the_most_common_group_size_and_the_first_seen_on_a_tie():
    c = calls(
        ["all_reduce"] * 4 + ["broadcast"], ["0"] * 5, [1, 2, 3, 4, 5], nbytes=[100, UNKNOWN, 300, 400, 8], group=[4, 2, 2, 4, UNKNOWN]
    )
    by_kind = {s.kind: s for s in collective_stats(number_calls(c), default_group_size=16)}
    assert by_kind["all_reduce"].count == 4
    assert by_kind["all_reduce"].nbytes == 800  # the unsized call is left out of the bytes
    assert by_kind["all_reduce"].dur_us == 40.0
    assert by_kind["all_reduce"].group_size == 4  # 4 and 2 twice each: 4 came first
    assert by_kind["broadcast"].group_size == 16  # none known: the default


def test_a_call_started_last_by_two_ranks_at_once_counts_for_the_lower_rank():
    def rank(r, starts):
        return SimpleNamespace(rank=r, instances=number_calls(calls(["all_reduce"] * len(starts), ["0"] * len(starts), starts)))

    ranks = [rank(0, [10, 20, 30]), rank(1, [12, 20]), rank(2, [11, 15, 40])]
    clocks = ClockAlignment(reference_rank=0, offsets_us={0: 0.0, 1: 0.0, 2: 0.0}, uncertainty_us={}, matched={})
    last = _last_arrivals(ranks, _call_keys(ranks), clocks)
    # call 0: rank 1 (12); call 1: ranks 0 and 1 at 20, the lower wins; call 2: rank 2 (40)
    assert dict(last) == {1: 1, 0: 1, 2: 1}


def kept_objects(path):
    """(calls, Python objects reachable from the rank's analysis: numbers and strings included,
    a numpy array counted as one)."""
    r = finish_rank([extract(load_trace(path))])
    seen, todo = set(), [r]
    while todo:
        o = todo.pop()
        if id(o) in seen or isinstance(o, (type, ModuleType, FunctionType)):
            continue
        seen.add(id(o))
        if not isinstance(o, np.ndarray):
            todo.extend(gc.get_referents(o))
    assert sum(len(s.calls) for s in r.replay) == len(r.instances)
    return len(r.instances), len(seen)


def test_a_ranks_analysis_keeps_no_python_object_per_collective_call(tmp_path):
    # Per step a few objects (its metrics, its replay), a timeline of at most MAX_TIMELINE_STEPS
    # steps, and per call none: both traces have more steps than the timeline shows.
    for name, size in (("small", 6_000_000), ("large", 12_000_000)):
        write_large_trace(tmp_path / f"{name}.pt.trace.json", target_bytes=size, rank=0, world_size=2, layers_per_step=100)
    calls_small, kept_small = kept_objects(tmp_path / "small.pt.trace.json")
    calls_large, kept_large = kept_objects(tmp_path / "large.pt.trace.json")
    assert calls_large - calls_small > 1000
    assert kept_large - kept_small < (calls_large - calls_small) / 2, (kept_small, kept_large, calls_small, calls_large)


def test_analyze_json_writes_every_replayed_call_as_the_record_has_it(tmp_path, capsys):
    # The command writes the replay steps one at a time (analysis/record.py, record_json).
    traces = tmp_path / "traces"
    traces.mkdir()
    for r in range(2):
        write_large_trace(traces / f"rank{r}.pt.trace.json", target_bytes=600_000, rank=r, world_size=2, layers_per_step=20)
    out = tmp_path / "analysis.json"
    assert main(["analyze", str(traces), "--json", str(out)]) == 0
    written = json.loads(out.read_text())
    assert written == to_json(analyze_dir(traces))
    calls = [c for r in written["ranks"] for s in r["replay"] for c in s["calls"]]
    assert len(calls) > 100 and {c["kind"] for c in calls} == {"all_reduce"}


def test_a_rank_measured_from_files_handed_over_is_the_same_and_frees_their_intervals(tmp_path):
    path = tmp_path / "rank0.pt.trace.json"
    write_large_trace(path, target_bytes=3_000_000, rank=0, world_size=2, layers_per_step=20)
    kept = finish_rank([extract(load_trace(path))])
    f = extract(load_trace(path))
    handed = finish_rank([f], release=True)
    as_json = [to_json(combine([r], source=str(tmp_path), hta_compat=False, duplicates=())) for r in (handed, kept)]
    assert as_json[0] == as_json[1]
    assert handed.timeline == kept.timeline and handed.timeline is not None
    for name in ("comm", "compute", "operators"):
        with pytest.raises(AttributeError):
            getattr(f, name)
    assert len(f.calls) == len(kept.instances)  # what the caller still reads is there
