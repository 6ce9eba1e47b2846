"""The overlap timeline figure: one profiled step per mode, one lane group per rank.

Reads timeline.json (the spans the analysis kept for drawing, and the windows of the step's
phases: forward, backward, optimizer) and the metrics record (the numbers printed beside each
rank). A rank's group is a thin phase band, its compute lane and its comm lane; a timeline
without phases (older runs, foreign traces) gets no band. It draws; it never recomputes a
metric. The one piece of geometry computed here, the overlapped stretches that get shaded
(with analysis.intervals), is drawing, and the overlap numbers printed next to them come from
the record. timeline.json holds aligned ranks' times on the reference rank's clock, so the lanes
share one origin, the first rank's step start, and a rank that starts later is drawn later.

    fig = timeline.figure(load_metrics(run / METRICS_JSON), json.loads((run / TIMELINE_JSON).read_text()))
    timeline.save_png(fig, run / TIMELINE_PNG)

Built on matplotlib's object API (no pyplot), so it needs no display and keeps no global state.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

from profile_overlap.core import intervals as iv
from profile_overlap.core.errors import UserError
from profile_overlap.core.io import replace_atomically
from profile_overlap.record.analysis import StepRecord
from profile_overlap.record.config import RunConfig
from profile_overlap.record.metrics import RunMetrics
from profile_overlap.record.timeline import Timeline, TimelineMode, as_timeline
from profile_overlap.render.numbers import us_as_ms
from profile_overlap.render.timeline_style import (  # noqa: F401  (re-exported: the figure's colours)
    BAND_HEIGHT,
    BAND_OFFSET,
    DPI,
    FIG_TEXT_CHARS,
    FIG_WIDTH_IN,
    LABEL_COLOURS,
    LANE_HEIGHT_IN,
    OTHER_COLOURS,
    OVERLAP_COLOUR,
    OVERLAP_HATCH_COLOUR,
    PHASE_COLOURS,
    PHASE_SHORT,
    STEP_BG_COLOUR,
    SpanLabel,
    _luminance,
    fit,
    span_label,
)


@dataclass(frozen=True)
class _RankStep:
    rank: int
    step_us: float
    start_us: float
    lead_ms: float
    """Where the rank's step starts on the panel's axis: after the first aligned rank's step start
    on the reference clock (0 for the first, and for a rank whose clock is not aligned)."""
    spans: tuple[tuple[float, float, str, str], ...]
    """(start_ms, end_ms, kind, label) on the panel's axis."""
    phases: tuple[tuple[float, float, str], ...]
    """(start_ms, end_ms, phase) of the step's phase windows, on the panel's axis."""
    numbers: StepRecord | None
    """This rank's step in the analysis record (step_us, comm_us, overlap_pct, ...)."""


@dataclass(frozen=True)
class _ModeStep:
    mode: str
    step: int
    num_steps: int
    chosen_as: str
    ranks: tuple[_RankStep, ...]
    world_size: int
    note: str | None
    reference_rank: int | None = None
    """The rank whose clock the aligned ranks are drawn on (None: each rank from its own step start)."""


def figure(
    metrics: RunMetrics,
    timeline: Timeline | dict[str, Any],
    *,
    step: int | None = None,
    max_ranks: int = 16,
    modes: tuple[str, ...] | None = None,
) -> Figure:
    """One profiled step per mode, modes stacked on a shared time axis: ms from the first rank's
    ProfilerStep start on the reference rank's clock (timeline.json carries aligned times), or from
    each rank's own step start for ranks without a clock estimate (older timelines). `step`: the
    profiled step to draw in every mode; by default each mode's median-length step. More than
    `max_ranks` ranks are sampled (rank 0, the slowest rank, and evenly spaced ones between), and
    the figure says so. `modes`: draw only these (one figure per mode, e.g. for TensorBoard),
    keeping the time axis of all modes so that figures drawn separately still compare. A dict is
    timeline.json as parsed, converted to the typed Timeline once, here."""
    if max_ranks < 2:
        raise UserError(f"max_ranks must be at least 2 (got {max_ranks})")
    in_file = as_timeline(timeline).modes
    names = [m for m in metrics.modes if m in in_file] + [m for m in in_file if m not in metrics.modes]  # the run's order
    if not names:
        raise UserError("timeline.json holds no profiled steps; rerun with profiling on (drop --no-profile)")
    panels = [_select(name, in_file[name], metrics, step=step, max_ranks=max_ranks) for name in names]
    # The time axis, colours and lane layout come from every mode, so that figures drawn separately still compare.
    # At least 1 µs: a hostile trace's steps can last no time, and an axis from 0 to 0 is singular.
    xmax_ms = max(1e-3, *(r.lead_ms + r.step_us / 1e3 for p in panels for r in p.ranks))
    colours = _colour_map(panels)
    phased = any(r.phases for p in panels for r in p.ranks)
    if modes is not None:
        missing = sorted(set(modes) - set(names))
        if missing:
            raise UserError(f"timeline.json has no profiled steps for mode {', '.join(missing)}; choose from {', '.join(names)}")
        panels = [p for p in panels if p.mode in modes]
    shown = {span_label(label).key for p in panels for r in p.ranks for *_, label in r.spans}

    pitch = _pitch(phased)
    lanes = sum(len(p.ranks) for p in panels)
    # Per rank: two lanes, a gap and the phase band; per panel: title and axis room.
    height_in = 1.6 + lanes * pitch * LANE_HEIGHT_IN + len(panels) * 0.9 + (0.3 if phased else 0.0)
    fig = Figure(figsize=(FIG_WIDTH_IN, height_in), dpi=DPI, layout="constrained")
    ratios = [len(p.ranks) * pitch + 2 for p in panels]
    axes = fig.subplots(len(panels), 1, sharex=True, squeeze=False, height_ratios=ratios)[:, 0]
    for ax, panel in zip(axes, panels):
        _draw_panel(ax, panel, colours=colours, xmax_ms=xmax_ms, phased=phased)
    refs = {p.reference_rank for p in panels if p.reference_rank is not None}
    axes[-1].set_xlabel(
        f"time from the first rank's ProfilerStep start, on rank {refs.pop()}'s clock (ms)"
        if len(refs) == 1 and all(p.reference_rank is not None for p in panels)
        else "time from the rank's ProfilerStep start (ms)"
    )
    for ax in axes[:-1]:
        ax.tick_params(labelbottom=True)

    run = Path(metrics.run_dir).name
    cfg = metrics.config
    fig.suptitle(
        f"Communication / compute overlap, one profiled step {'per mode' if len(panels) > 1 else 'of ' + fit(panels[0].mode)}"
        f"  ·  {fit(run)}\n"
        f"{metrics.env.world_size} ranks, {fit(metrics.env.backend or '?')} on "
        f"{fit(metrics.env.device_type or '?')}, {fit(_model(cfg), 2 * FIG_TEXT_CHARS)}",
        fontsize=12,
        fontweight="bold",
        x=0.01,
        ha="left",
    )
    handles = [Patch(facecolor=c, edgecolor="none", label=fit(k)) for k, c in colours.items() if k in shown]
    handles.append(Patch(facecolor=OVERLAP_COLOUR, edgecolor="#B8860B", hatch="////", label="comm overlapped by compute (shaded)"))
    fig.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 6), frameon=False, fontsize=9)
    if phased:
        fig.legend(
            handles=[Patch(facecolor=c, edgecolor="#777777", lw=0.5, label=f"{k} phase") for k, c in PHASE_COLOURS.items()],
            loc="outside upper right",
            ncol=3,
            frameon=False,
            fontsize=9,
            title="band above each rank: the step's phases",
            title_fontsize=9,
        )
    return fig


def save_png(fig: Figure, path: Path) -> None:
    """Write the figure as PNG atomically (a temporary file in the same folder, then rename)."""
    replace_atomically(path, lambda tmp: fig.savefig(tmp, format="png", dpi=DPI, facecolor="white"))


def to_svg(fig: Figure) -> str:
    """The figure as inline SVG text (no XML declaration), for embedding in HTML."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", facecolor="white")
    text = buf.getvalue()
    return text[text.index("<svg") :]


def png_bytes(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, facecolor="white")
    return buf.getvalue()


def _model(cfg: RunConfig) -> str:
    k, d, batch = cfg.layers, cfg.dim, f"{cfg.dtype}, batch {cfg.batch}"
    transformer = f"transformer, K={k} layers, dim {d}, {cfg.heads} heads, {batch}"
    # A profiled job of the user's own has no K: its model is not ours to describe.
    return "the job's own model" if k is None else transformer if cfg.model == "transformer" else f"K={k} layers of {d}x{d} {batch}"


def _pitch(phased: bool) -> float:
    """Height of one rank's group in lanes: compute, comm, a gap, and the phase band if any."""
    return 3.0 + (BAND_OFFSET if phased else 0.0)


def _select(mode: str, drawn: TimelineMode, metrics: RunMetrics, *, step: int | None, max_ranks: int) -> _ModeStep:
    in_order = sorted(drawn.ranks, key=lambda r: r.rank)
    total = len(in_order)
    # Above TIMELINE_MAX_RANKS, timeline.json holds the geometry of a sample of ranks: draw from those.
    with_geometry = [r for r in in_order if r.spans or r.phases]
    if with_geometry:
        in_order = with_geometry
    # A step's length is its slowest rank's, as for the unprofiled step times.
    lengths: dict[int, float] = {}
    for r in in_order:
        for s in r.steps:
            lengths[s.step] = max(lengths.get(s.step, 0.0), s.step_us)
    if not lengths:
        raise UserError(f"timeline.json has no profiled steps for mode {mode}; rerun with --profile-steps 1 or more")
    if step is None:
        ordered = sorted(lengths, key=lambda s: (lengths[s], s))
        chosen = ordered[(len(ordered) - 1) // 2]
        chosen_as = "median-length" if len(ordered) > 1 else "only"
    elif step in lengths:
        chosen, chosen_as = step, "requested"
    else:
        raise UserError(f"profiled step {step} is not in mode {mode}; choose one of {sorted(lengths)}")

    analysis = metrics.modes[mode].analysis if mode in metrics.modes else None
    by_rank = {r.rank: r for r in analysis.ranks} if analysis else {}
    windows = {r.rank: w for r in in_order if (w := next((s for s in r.steps if s.step == chosen), None))}
    # Aligned ranks (timeline.json on the reference clock) share one origin: the first of them to start the step.
    aligned = [r.rank for r in in_order if r.aligned and r.rank in windows]
    origin = min((windows[k].start_us for k in aligned), default=None) if len(aligned) >= 2 else None
    rank_steps = []
    for r in in_order:
        window = windows.get(r.rank)
        if window is None:
            continue
        t0 = origin if origin is not None and r.rank in aligned else window.start_us
        relabel = {("comm", p): f"{p}/collective" for p in PHASE_COLOURS}  # ddp's all_reduce: labelled backward only
        spans = tuple(
            ((sp.start_us - t0) / 1e3, (sp.end_us - t0) / 1e3, sp.kind, relabel.get((sp.kind, sp.label), sp.label))
            for sp in r.spans
            if sp.step == chosen
        )
        # Runs made before the analysis kept phase windows have no phases: no band then.
        phases = tuple(((w.start_us - t0) / 1e3, (w.end_us - t0) / 1e3, w.phase) for w in r.phases if w.step == chosen)
        record = by_rank.get(r.rank)
        numbers = next((s for s in record.steps if s.step == chosen), None) if record else None
        lead_ms = (window.start_us - t0) / 1e3
        rank_steps.append(_RankStep(r.rank, window.step_us, window.start_us, lead_ms, spans, phases, numbers))

    world = len(rank_steps)
    note = None
    if total > world:
        note = f"showing {world} of {total} ranks: those timeline.json holds the spans of"
    if world > max_ranks:
        slowest = max(rank_steps, key=lambda r: r.step_us).rank
        keep = {rank_steps[0].rank, slowest}
        # Evenly spaced ranks fill the rest, so the sample spans the whole job.
        others = [r.rank for r in rank_steps if r.rank not in keep]
        want = max_ranks - len(keep)
        keep.update(others[round(i * (len(others) - 1) / max(want - 1, 1))] for i in range(want))
        rank_steps = [r for r in rank_steps if r.rank in keep]
        note = (
            f"showing {len(rank_steps)} of {max(world, total)} ranks: rank {rank_steps[0].rank}, the slowest in this step "
            f"(rank {slowest}), and evenly spaced ranks"
        )
    ref = drawn.reference_rank if origin is not None else None
    return _ModeStep(mode, chosen, len(lengths), chosen_as, tuple(rank_steps), world, note, reference_rank=ref)


def _colour_map(panels: list[_ModeStep]) -> dict[str, str]:
    """Label key -> colour for the labels present, known labels in a fixed order first."""
    present = []
    for p in panels:
        for r in p.ranks:
            for *_, label in r.spans:
                key = span_label(label).key
                if key not in present:
                    present.append(key)
    colours = {k: c for k, c in LABEL_COLOURS.items() if k in present}
    extra = [k for k in present if k not in LABEL_COLOURS]
    for i, key in enumerate(extra):
        colours[key] = OTHER_COLOURS[i % len(OTHER_COLOURS)]
    return colours


def _union(spans: tuple[tuple[float, float, str, str], ...], kind: str) -> iv.Union:
    return iv.union([a for a, _, k, _ in spans if k == kind], [b for _, b, k, _ in spans if k == kind])


def _draw_panel(ax, panel: _ModeStep, *, colours: dict[str, str], xmax_ms: float, phased: bool) -> None:
    lane_h = 0.8
    pitch = _pitch(phased)
    yticks, yticklabels = [], []
    min_text_ms = xmax_ms * 0.022  # narrower bars get no text label
    for g, r in enumerate(panel.ranks):
        top = g * pitch  # compute lane at top, comm lane at top+1, the phase band above top
        step_ms = r.step_us / 1e3
        end_ms = r.lead_ms + step_ms
        ax.add_patch(Rectangle((r.lead_ms, top - 0.5), step_ms, 2, facecolor=STEP_BG_COLOUR, edgecolor="none", zorder=0))
        ax.plot([r.lead_ms, r.lead_ms], [top - 0.5, top + 1.5], color="#555555", lw=0.8, zorder=3)
        ax.plot([end_ms, end_ms], [top - 0.5, top + 1.5], color="#555555", lw=0.8, zorder=3)
        shaded = iv.intersect(_union(r.spans, "comm"), _union(r.spans, "compute"))
        for a, b in zip(shaded[0].tolist(), shaded[1].tolist()):
            ax.add_patch(Rectangle((a, top - 0.5), b - a, 2, facecolor=OVERLAP_COLOUR, alpha=0.55, edgecolor="none", zorder=1))
            # The hatch on the comm bar itself: the shading stays visible where bars cover the band.
            ax.add_patch(
                Rectangle(
                    (a, top + 1 - lane_h / 2),
                    b - a,
                    lane_h,
                    facecolor="none",
                    edgecolor=OVERLAP_HATCH_COLOUR,
                    lw=0.0,
                    hatch="////",
                    zorder=2.5,
                )
            )
        for a, b, kind, label in r.spans:
            sl = span_label(label)
            y = top + (1 if kind == "comm" else 0)
            ax.add_patch(Rectangle((a, y - lane_h / 2), b - a, lane_h, facecolor=colours[sl.key], edgecolor="white", lw=0.4, zorder=2))
            if b - a >= min_text_ms and _inside((a + b) / 2, xmax_ms):
                ink = "white" if _luminance(colours[sl.key]) < 0.5 else "#222222"
                ax.text((a + b) / 2, y, sl.short, ha="center", va="center", fontsize=7, color=ink, zorder=4, clip_on=True)
        if r.phases:
            _draw_phases(ax, r.phases, top=top, min_text_ms=min_text_ms, xmax_ms=xmax_ms)
        if phased:
            yticks.append(top - BAND_OFFSET)
            yticklabels.append("phase")
        yticks += [top, top + 1]
        yticklabels += [f"rank {r.rank}  compute", "comm"]
        if r.numbers:
            _annotate(ax, r.numbers, y=top + 0.5 - (BAND_OFFSET / 2 if r.phases else 0.0))
    ax.set_ylim((len(panel.ranks) - 1) * pitch + 2.0, -1.0 - (BAND_OFFSET if phased else 0.0))
    ax.set_xlim(0, xmax_ms * 1.01)
    ax.set_yticks(yticks, yticklabels, fontsize=8)
    for tick, text in zip(ax.get_yticklabels(), yticklabels):
        if text in ("comm", "phase"):
            tick.set_color("#555555")
    ax.tick_params(axis="y", length=0)
    ax.grid(axis="x", color="#DDDDDD", lw=0.6, zorder=-1)
    ax.set_axisbelow(True)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    which = {
        "median-length": f"the median-length of {panel.num_steps} profiled steps",
        "only": "the only profiled step",
        "requested": "as requested",
    }[panel.chosen_as]
    title = f"{fit(panel.mode)}: ProfilerStep#{panel.step} ({which})"
    ax.set_title(title, loc="left", fontsize=11, fontweight="bold")
    if panel.note:
        ax.set_title(panel.note, loc="right", fontsize=8.5, style="italic", color="#444444")


def _inside(x_ms: float, xmax_ms: float) -> bool:
    """Whether a label centred at x_ms lies on the axis (0 to xmax_ms and its margin). One that does not
    would be clipped away anyway, and FreeType cannot rasterise text billions of pixels off the axis
    (a hostile trace's span far past its step: "raster overflow")."""
    return 0.0 <= x_ms <= xmax_ms * 1.01


def _draw_phases(ax, phases: tuple[tuple[float, float, str], ...], *, top: float, min_text_ms: float, xmax_ms: float) -> None:
    """The band above a rank's lanes, and a dotted line down through the lanes where each phase starts."""
    y = top - BAND_OFFSET
    for a, b, name in phases:
        colour = PHASE_COLOURS.get(name, "#DDDDDD")
        ax.add_patch(
            Rectangle(
                (a, y - BAND_HEIGHT / 2), b - a, BAND_HEIGHT, facecolor=colour, edgecolor="white", lw=0.6, zorder=2, gid=f"phase:{name}"
            )
        )
        ax.plot([a, a], [y - BAND_HEIGHT / 2, top + 1.5], color="#777777", lw=0.6, ls=(0, (1, 2)), zorder=1.5)
        text = name if b - a >= 2.5 * min_text_ms else PHASE_SHORT.get(name, name[:3]) if b - a >= min_text_ms else ""
        if text and _inside((a + b) / 2, xmax_ms):
            ax.text((a + b) / 2, y, text, ha="center", va="center", fontsize=7, color="#222222", zorder=4, clip_on=True)


def _annotate(ax, n: StepRecord, *, y: float) -> None:
    """The record's numbers for this rank's step, right of the lanes; per phase where the record has them."""
    pct = "-" if n.overlap_pct is None else f"{n.overlap_pct:.0f}%"
    lines = [
        f"step {us_as_ms(n.step_us)} ms, overlap {pct}",
        f"comm {us_as_ms(n.comm_us)} ms, exposed {us_as_ms(n.exposed_comm_us)} ms",
    ]
    phases = [p for p in n.phases if p.comm_us]
    if phases:
        lines.append("exposed: " + ", ".join(f"{PHASE_SHORT.get(p.phase, p.phase)} {us_as_ms(p.exposed_comm_us)}" for p in phases) + " ms")
    ax.annotate(
        "\n".join(lines),
        xy=(1.0, y),
        xycoords=("axes fraction", "data"),
        xytext=(6, 0),
        textcoords="offset points",
        va="center",
        ha="left",
        fontsize=7.5,
        color="#333333",
    )
