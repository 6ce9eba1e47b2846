"""The phase band of the timeline figure: hand-built windows for the geometry, a real 2-rank compare
run (three modes) for the whole figure, and the same run's timeline.json without "phases" (as
written before the analysis kept phase windows) for the figure without a band."""

from __future__ import annotations

import json

import pytest
from matplotlib.colors import to_hex
from matplotlib.patches import Rectangle
from test_timeline import bare_metrics, one_rank

from profile_overlap.record.load import load_metrics
from profile_overlap.render import timeline


def bands(ax) -> list[tuple[str, float, float, float]]:
    """(phase, start_ms, end_ms, y) of each phase window drawn in the band."""
    return [
        (p.get_gid().split(":", 1)[1], round(p.get_x(), 6), round(p.get_x() + p.get_width(), 6), round(p.get_y(), 6))
        for p in ax.patches
        if isinstance(p, Rectangle) and (p.get_gid() or "").startswith("phase:")
    ]


def test_band_draws_each_phase_window_of_the_step_above_its_rank():
    # Step 1 from t=1000 µs, 50 ms long: forward 0-10 ms, backward 10-30 ms, optimizer 30-31 ms.
    # Step 2's windows are not drawn.
    rank = one_rank(0, {1: 50_000, 2: 60_000}, [[1, 1000, 11000, "compute", "forward"], [1, 12000, 20000, "comm", "split/reduce_scatter"]])
    rank["phases"] = [
        [1, "forward", 1000, 11000],
        [1, "backward", 11000, 31000],
        [1, "optimizer", 31000, 32000],
        [2, "forward", 51000, 52000],
    ]
    fig = timeline.figure(bare_metrics(), {"modes": {"split": {"ranks": [rank]}}}, step=1)
    ax = fig.axes[0]
    drawn = bands(ax)
    assert [(name, a, b) for name, a, b, _ in drawn] == [("forward", 0.0, 10.0), ("backward", 10.0, 30.0), ("optimizer", 30.0, 31.0)]
    assert {y for *_, y in drawn} == {-timeline.BAND_OFFSET - timeline.BAND_HEIGHT / 2}  # above the compute lane (y=0)
    assert [to_hex(p.get_facecolor()) for p in ax.patches if (p.get_gid() or "").startswith("phase:")] == [
        timeline.PHASE_COLOURS[n].lower() for n in ("forward", "backward", "optimizer")
    ]
    # Wide windows carry their name, narrow ones a short name; the 1 ms optimizer window (2% of
    # the step) none.
    texts = [t.get_text() for t in ax.texts]
    assert "forward" in texts and "backward" in texts and "opt" not in texts and "optimizer" not in texts
    assert [t.get_text() for t in ax.get_yticklabels()] == ["phase", "rank 0  compute", "comm"]
    phase_legend = next(leg for leg in fig.legends if leg.get_title().get_text())
    assert [t.get_text() for t in phase_legend.get_texts()] == ["forward phase", "backward phase", "optimizer phase"]


def test_real_compare_run_has_a_band_per_rank_in_every_mode(compare_run_2, tmp_path):
    metrics = load_metrics(compare_run_2 / "metrics.json")
    record = json.loads((compare_run_2 / "timeline.json").read_text())
    fig = timeline.figure(metrics, record)
    titles = [ax.get_title(loc="left").split(":")[0] for ax in fig.axes]
    assert titles == ["sequential", "split", "split-blocking"]
    for ax, mode in zip(fig.axes, titles):
        step = int(ax.get_title(loc="left").split("#")[1].split()[0])
        ranks = record["modes"][mode]["ranks"]
        assert [t.get_text() for t in ax.get_yticklabels()].count("phase") == len(ranks) == 2
        drawn = bands(ax)
        # Aligned ranks (times on rank 0's clock) share one origin: the first rank's step start.
        t0 = min(s["start_us"] for r in ranks for s in r["steps"] if s["step"] == step)
        assert all(r["aligned"] for r in ranks)
        for g, r in enumerate(ranks):
            want = [(name, round((a - t0) / 1e3, 6), round((b - t0) / 1e3, 6)) for st, name, a, b in r["phases"] if st == step]
            y = g * (3 + timeline.BAND_OFFSET) - timeline.BAND_OFFSET - timeline.BAND_HEIGHT / 2
            mine = [(n, a, b) for n, a, b, at in drawn if abs(at - y) < 1e-6]
            assert [n for n, *_ in want] == ["forward", "backward", "optimizer"]
            # Drawn from the same microseconds, up to the float rounding of the figure's axis (1 ns).
            assert [n for n, *_ in mine] == [n for n, *_ in want], (mode, r["rank"])
            assert [x for _, a, b in mine for x in (a, b)] == pytest.approx([x for _, a, b in want for x in (a, b)], abs=1e-5), (
                mode,
                r["rank"],
            )
            if mode == "split":
                # What the band is for: the reduce_scatters start under the backward band, and no
                # all_gather runs under it (they run in the optimizer and the next forward).
                spans = [((a - t0) / 1e3, (b - t0) / 1e3, label) for st, a, b, kind, label in r["spans"] if st == step and kind == "comm"]
                (_, bw_a, bw_b) = next(w for w in want if w[0] == "backward")
                first_rs = min(a for a, _, label in spans if label.endswith("reduce_scatter"))
                assert bw_a <= first_rs <= bw_b
                assert not any(a < bw_b and b > bw_a for a, b, label in spans if label.endswith("all_gather"))
    # The rank's per-phase exposed communication (the record's, for the drawn step) is printed beside it.
    assert any(t.get_text().count("\n") == 2 and "\nexposed: " in t.get_text() and " bwd " in t.get_text() for t in fig.axes[1].texts)
    timeline.save_png(fig, tmp_path / "timeline.png")
    assert (tmp_path / "timeline.png").stat().st_size > 20_000


def test_timeline_without_phases_draws_no_band(compare_run_2):
    """timeline.json written before the analysis kept phase windows: no band, no legend for it."""
    metrics = load_metrics(compare_run_2 / "metrics.json")
    record = json.loads((compare_run_2 / "timeline.json").read_text())
    for mode in record["modes"].values():
        for r in mode["ranks"]:
            del r["phases"]
    fig = timeline.figure(metrics, record)
    assert len(fig.axes) == 3 and all(bands(ax) == [] for ax in fig.axes)
    assert all("phase" not in [t.get_text() for t in ax.get_yticklabels()] for ax in fig.axes)
    assert len(fig.legends) == 1 and not fig.legends[0].get_title().get_text()
    # The lanes keep the layout they had before phases existed: three lanes' height per rank.
    assert fig.axes[0].get_ylim() == (2 * 3 - 1.0, -1.0)
    alone = timeline.figure(metrics, record, modes=("split-blocking",))
    assert [ax.get_title(loc="left").split(":")[0] for ax in alone.axes] == ["split-blocking"]
    assert timeline.png_bytes(alone)[:8] == b"\x89PNG\r\n\x1a\n"
