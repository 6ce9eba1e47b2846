"""The overlap timeline figure: hand-built timelines for the geometry, a real 2-rank run for the whole figure."""

from __future__ import annotations

import json
import warnings

import pytest
from matplotlib.patches import Rectangle

from profile_overlap.core.errors import UserError
from profile_overlap.record.config import RunConfig
from profile_overlap.record.load import load_metrics
from profile_overlap.record.metrics import Env, RunMetrics
from profile_overlap.render import timeline


def bare_metrics(**config) -> RunMetrics:
    typed = RunConfig.from_dict(config)
    return RunMetrics(schema_version=1, run_dir="runs/hand-made", config=typed, env=Env(world_size=1), modes={}, checks=(), speedup=None)


def one_rank(rank: int, steps: dict[int, float], spans: list) -> dict:
    """steps: step -> length in µs, steps laid end to end from t=1000 µs."""
    t, out = 1000.0, []
    for s, length in steps.items():
        out.append({"step": s, "start_us": t, "step_us": length})
        t += length
    return {"rank": rank, "steps": out, "spans": spans}


def hatched(fig) -> list[tuple[float, float]]:
    """(start_ms, width_ms) of the overlap hatches drawn on comm bars."""
    return sorted(
        (round(p.get_x(), 6), round(p.get_width(), 6)) for ax in fig.axes for p in ax.patches if isinstance(p, Rectangle) and p.get_hatch()
    )


def test_overlap_shading_is_exactly_comm_and_compute_intersection():
    # comm 0-10 ms and 30-40 ms; compute 5-20 ms and 35-36 ms: overlapped 5-10 and 35-36 ms.
    spans = [
        [1, 1000, 11000, "comm", "split/reduce_scatter"],
        [1, 31000, 41000, "comm", "split/all_gather"],
        [1, 6000, 21000, "compute", "forward/layer0"],
        [1, 36000, 37000, "compute", "forward/layer1"],
    ]
    fig = timeline.figure(bare_metrics(), {"modes": {"split": {"ranks": [one_rank(0, {1: 50_000}, spans)]}}})
    assert hatched(fig) == [(5.0, 5.0), (35.0, 1.0)]
    texts = {t.get_text() for t in fig.axes[0].texts}
    assert {"RS", "AG", "L0"} <= texts  # wide enough bars carry their phase


def test_median_length_step_is_drawn_and_named_in_the_title():
    ranks = [one_rank(r, {1: 30_000, 2: 90_000 + r, 3: 50_000}, []) for r in range(2)]
    fig = timeline.figure(bare_metrics(), {"modes": {"sequential": {"ranks": ranks}}})
    assert "ProfilerStep#3 (the median-length of 3 profiled steps)" in fig.axes[0].get_title(loc="left")
    fig = timeline.figure(bare_metrics(), {"modes": {"sequential": {"ranks": ranks}}}, step=2)
    assert "ProfilerStep#2" in fig.axes[0].get_title(loc="left")
    with pytest.raises(UserError, match=r"profiled step 9 is not in mode sequential; choose one of \[1, 2, 3\]"):
        timeline.figure(bare_metrics(), {"modes": {"sequential": {"ranks": ranks}}}, step=9)
    with pytest.raises(UserError, match="no profiled steps"):
        timeline.figure(bare_metrics(), {"modes": {}})


def test_64_ranks_are_sampled_keeping_rank_0_and_the_slowest():
    spans = [[1, 1000, 2000, "comm", "sequential/all_reduce"], [1, 2000, 3000, "compute", "sequential/update"]]
    ranks = [one_rank(r, {1: 10_000 + (5_000 if r == 37 else r)}, spans) for r in range(64)]
    fig = timeline.figure(bare_metrics(), {"modes": {"sequential": {"ranks": ranks}}}, max_ranks=16)
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    shown = [int(s.split()[1]) for s in labels if s.startswith("rank")]
    assert len(shown) == 16 and 0 in shown and 37 in shown and 63 in shown
    assert fig.axes[0].get_title(loc="right") == (
        "showing 16 of 64 ranks: rank 0, the slowest in this step (rank 37), and evenly spaced ranks"
    )


def test_real_run_figure_png_and_svg(compare_run_2, tmp_path):
    metrics = load_metrics(compare_run_2 / "metrics.json")
    spans = json.loads((compare_run_2 / "timeline.json").read_text())
    fig = timeline.figure(metrics, spans)
    titles = [ax.get_title(loc="left") for ax in fig.axes]
    assert [t.split(": ProfilerStep#")[0] for t in titles] == ["sequential", "split", "split-blocking"]
    assert fig.axes[0].get_shared_x_axes().joined(fig.axes[0], fig.axes[2])
    legend = {t.get_text() for t in fig.legends[0].get_texts()}
    assert {"all_reduce", "reduce_scatter", "all_gather", "forward", "backward", "optimizer"} <= legend
    # The numbers beside each rank are the record's, for the step drawn.
    step = int(titles[1].split("#")[1].split()[0])
    rank0 = next(s for s in metrics.modes["split"].analysis.ranks[0].steps if s.step == step)
    assert any(f"step {rank0.step_us / 1e3:.1f} ms" in t.get_text() for t in fig.axes[1].texts)
    # The split run overlaps some all_gather with the forward pass on every rank.
    assert hatched(fig)

    # One mode alone keeps the time axis of both, so separate figures still compare.
    alone = timeline.figure(metrics, spans, modes=("split",))
    assert len(alone.axes) == 1 and alone.axes[0].get_title(loc="left") == titles[1]
    assert alone.axes[0].get_xlim() == fig.axes[0].get_xlim()
    with pytest.raises(UserError, match="no profiled steps for mode nope"):
        timeline.figure(metrics, spans, modes=("nope",))

    timeline.save_png(fig, tmp_path / "timeline.png")
    png = (tmp_path / "timeline.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000
    assert [p.name for p in tmp_path.iterdir()] == ["timeline.png"]  # no temporary left behind
    # The end-of-run hook wrote the same figure into the run folder.
    assert (compare_run_2 / "timeline.png").read_bytes()[:8] == png[:8]
    svg = timeline.to_svg(fig)
    assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>")


def test_a_giant_name_from_a_trace_is_cut_in_the_legend_and_the_figure_still_draws():
    # The fuzz test's case: a 12 MiB kernel name overflowed FreeType's rasteriser ("raster overflow")
    # when the legend drew it; the figure now draws the name's first characters.
    giant = "aten::" + '\\"' * 6_000_000
    spans = [[1, 1000, 11000, "comm", "split/reduce_scatter"], [1, 6000, 21000, "compute", giant]]
    fig = timeline.figure(bare_metrics(), {"modes": {"split": {"ranks": [one_rank(0, {1: 50_000}, spans)]}}})
    (legend,) = fig.legends
    texts = [t.get_text() for t in legend.get_texts()]
    assert max(len(t) for t in texts) <= timeline.FIG_TEXT_CHARS
    assert any(t.startswith("aten::") and t.endswith("…") for t in texts)
    assert timeline.png_bytes(fig).startswith(b"\x89PNG")


def test_a_span_far_past_its_step_still_draws_and_gets_no_label_off_the_axis():
    # The fuzz test's case: a hostile trace's span billions of pixels right of the axis; its label,
    # clipped away anyway, overflowed FreeType's rasteriser ("raster overflow") when the PNG was drawn.
    far = 1e13
    spans = [[1, 1000, 11000, "comm", "split/reduce_scatter"], [1, far, far + 20_000, "compute", "aten::mm"]]
    fig = timeline.figure(bare_metrics(), {"modes": {"split": {"ranks": [one_rank(0, {1: 50_000}, spans)]}}})
    labels = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert "RS" in labels or any("reduce" in t for t in labels), labels  # the span on the axis keeps its label
    assert timeline.png_bytes(fig).startswith(b"\x89PNG")


def test_control_characters_from_a_trace_are_not_drawn_and_matplotlib_has_nothing_to_warn_about():
    # The fuzz's case: a hostile name's escape character has no glyph, and matplotlib printed a
    # "Glyph 27 missing" warning on the user's terminal for every figure drawn with it.
    spans = [[1, 1000, 11000, "comm", "split/reduce_scatter"], [1, 12000, 30000, "compute", "\x1b[31mred\x1b[0m\ta\x00b\x07c"]]
    fig = timeline.figure(bare_metrics(), {"modes": {"split\x1b[2J": {"ranks": [one_rank(0, {1: 50_000}, spans)]}}})
    texts = [t.get_text() for t in fig.legends[0].get_texts()] + [t.get_text() for ax in fig.axes for t in ax.texts]
    texts += [ax.get_title(loc) for ax in fig.axes for loc in ("left", "right")]
    assert "red abc" in texts and not any(ord(c) < 0x20 for t in texts for c in t), texts
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert timeline.png_bytes(fig).startswith(b"\x89PNG") and timeline.to_svg(fig).startswith("<svg")
