"""`explain`: the three schedules of --mode compare, sketched as text timelines (tools/explain.py)."""

from __future__ import annotations

import pytest

from profile_overlap.tools.explain import SCHEDULES

from conftest import REPO, cli


def _slots(schedule) -> list[tuple[str, str]]:
    """(compute, comm) per time slot; '' where a row is empty."""
    words = lambda row: ["" if w == "_" else w for w in row.split()]  # noqa: E731
    return list(zip(words(schedule.compute), words(schedule.comm)))


@pytest.mark.slow
def test_explain_prints_the_three_schedules():
    proc = cli(["explain"])
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "The three schedules of --mode compare" in out
    for schedule in SCHEDULES:
        assert f"{schedule.mode}: " in out
        for line in schedule.sketch():
            assert line in out, line
    assert out.index("all_gather of shards") < out.index("The three schedules")  # after the worked example
    assert "overlap yield" in out and "interference" in out


def test_readme_shows_the_same_sketches():
    readme = (REPO / "docs" / "run.md").read_text()
    start = readme.index("## The schedules")
    section = readme[start : readme.index("\n## ", start + 1)]
    for schedule in SCHEDULES:
        assert "\n".join([schedule.mode, *schedule.sketch()]) in section, schedule.mode
    assert "[Metrics](metrics.md)" in section


def test_sketches_follow_the_pipelines():
    """The sketches say what run/pipelines.py does: which collectives, in which phase, overlapping what."""
    seq, split, blocking = SCHEDULES
    assert [s.mode for s in SCHEDULES] == ["sequential", "split", "split-blocking"]

    def work(s, row):
        return sorted(slot[row] for slot in _slots(s) if slot[row] not in ("", ".."))

    def overlapped(s):
        return [comm for compute, comm in _slots(s) if comm and compute and compute != ".."]

    # sequential: all_reduce of every unit, last unit first, after the backward; nothing overlaps.
    assert [c for _, c in _slots(seq) if c] == ["AR2", "AR1", "AR0"] and overlapped(seq) == []
    # split-blocking does exactly the split's work, serialised; the split overlaps.
    assert work(split, 0) == work(blocking, 0) and work(split, 1) == work(blocking, 1)
    assert overlapped(blocking) == [] and overlapped(split)
    # split: a reduce_scatter after each unit's backward (under the next unit's backward); the
    # optimizer waits for unit 0's, then per unit: Adam on the shard, then its all_gather.
    slots = [c for c, _ in _slots(split)]
    comm = [c for _, c in _slots(split)]
    for k in (2, 1):
        assert comm.index(f"RS{k}") == slots.index(f"B{k}") + 1 and slots[comm.index(f"RS{k}")].startswith("B")
    for k in (0, 1, 2):
        assert comm.index(f"AG{k}") > slots.index(f"a{k}")
    # Every sketch's phases name the step's record_function phases, then the next forward.
    for s in SCHEDULES:
        assert [name for name, _ in s.phases] == ["forward", "backward", "optimizer", "next forward"]
