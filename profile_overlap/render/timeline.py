"""The overlap timeline figure: one profiled step per mode, one lane group per rank.

Reads timeline.json (the spans the analysis kept for drawing) and the metrics record (the
numbers printed beside each rank). It draws; it never recomputes a metric. The one piece of
geometry computed here, the overlapped stretches that get shaded (with analysis.intervals), is
drawing, and the overlap numbers printed next to them come from the record.

    fig = timeline.figure(load_metrics(run / METRICS_JSON), json.loads((run / TIMELINE_JSON).read_text()))
    timeline.save_png(fig, run / TIMELINE_PNG)

Built on matplotlib's object API (no pyplot), so it needs no display and keeps no global state.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from pathlib import Path

from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

from profile_overlap.core import intervals as iv
from profile_overlap.core.errors import UserError
from profile_overlap.core.io import replace_atomically
from profile_overlap.record.metrics import RunMetrics

MODE_ORDER = ("sequential", "split")

# Phase colours, the same in every mode and every figure (Okabe-Ito based: colour-blind safe).
# Key: the record_function label with its pipeline prefix removed (see `phase`).
PHASE_COLOURS: dict[str, str] = {
    "all_reduce": "#8E5EA2",
    "reduce_scatter": "#009E73",
    "all_gather": "#D55E00",
    "gradients": "#9A9A9A",
    "update": "#E69F00",
    "shard update": "#F2C45A",
    "forward": "#0072B2",
    "wait all_gather": "#C9C9C9",
}
# Labels we do not know (kernel or operator names from other jobs) get these, in order of appearance.
OTHER_COLOURS = ("#56B4E9", "#CC79A7", "#B2912F", "#4D4D4D", "#7FB3D5", "#A6761D")
OVERLAP_COLOUR = "#FFD54F"
OVERLAP_HATCH_COLOUR = "#FFE9A8"
STEP_BG_COLOUR = "#F4F5F7"

LANE_HEIGHT_IN = 0.19
"""Height of one lane (compute or comm) in inches; a rank's group is two lanes plus a gap."""
FIG_WIDTH_IN = 15.0
DPI = 110

_FORWARD = re.compile(r"^forward/layer(\d+)$")


@dataclass(frozen=True)
class Phase:
    key: str
    """Colour key, shared by all forward layers."""
    name: str
    """What the legend and tooltips call it, e.g. 'forward layer 3'."""
    short: str
    """What fits inside a bar, e.g. 'L3'."""


def phase(label: str) -> Phase:
    """The displayed phase of a span label (`split/reduce_scatter`, `forward/layer3`, ...)."""
    m = _FORWARD.match(label)
    if m:
        return Phase(key="forward", name=f"forward layer {m.group(1)}", short=f"L{m.group(1)}")
    name = label.split("/", 1)[1] if "/" in label else label
    name = name.replace("shard_update", "shard update").replace("wait_all_gather", "wait all_gather")
    short = {
        "all_reduce": "AR",
        "reduce_scatter": "RS",
        "all_gather": "AG",
        "update": "update",
        "shard update": "shard upd",
        "gradients": "grad",
        "wait all_gather": "wait",
    }.get(name, name[:10])
    return Phase(key=name, name=name, short=short)


@dataclass(frozen=True)
class _RankStep:
    rank: int
    step_us: float
    start_us: float
    spans: tuple[tuple[float, float, str, str], ...]
    """(start_ms, end_ms, kind, label) relative to the rank's step start."""
    numbers: dict | None
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


def figure(
    metrics: RunMetrics, timeline: dict, *, step: int | None = None, max_ranks: int = 16, modes: tuple[str, ...] | None = None
) -> Figure:
    """One profiled step per mode, modes stacked on a shared time axis (ms from each rank's
    ProfilerStep start). `step`: the profiled step to draw in every mode; by default each
    mode's median-length step. More than `max_ranks` ranks are sampled (rank 0, the slowest
    rank, and evenly spaced ones between), and the figure says so. `modes`: draw only these
    (one figure per mode, e.g. for TensorBoard), keeping the time axis of all modes so that
    figures drawn separately still compare."""
    if max_ranks < 2:
        raise UserError(f"max_ranks must be at least 2 (got {max_ranks})")
    modes_json = timeline.get("modes") or {}
    names = [m for m in MODE_ORDER if m in modes_json] + sorted(m for m in modes_json if m not in MODE_ORDER)
    if not names:
        raise UserError("timeline.json holds no profiled steps; rerun with profiling on (drop --no-profile)")
    panels = [_select(name, modes_json[name], metrics, step=step, max_ranks=max_ranks) for name in names]
    xmax_ms = max(r.step_us for p in panels for r in p.ranks) / 1e3
    if modes is not None:
        missing = sorted(set(modes) - set(names))
        if missing:
            raise UserError(f"timeline.json has no profiled steps for mode {', '.join(missing)}; choose from {', '.join(names)}")
        panels = [p for p in panels if p.mode in modes]

    colours = _colour_map(panels)
    lanes = sum(len(p.ranks) for p in panels)
    # Per rank: two lanes and a gap; per panel: title and axis room.
    height_in = 1.6 + lanes * 3 * LANE_HEIGHT_IN + len(panels) * 0.9
    fig = Figure(figsize=(FIG_WIDTH_IN, height_in), dpi=DPI, layout="constrained")
    axes = fig.subplots(len(panels), 1, sharex=True, squeeze=False, height_ratios=[len(p.ranks) * 3 + 2 for p in panels])[:, 0]
    for ax, panel in zip(axes, panels):
        _draw_panel(ax, panel, colours=colours, xmax_ms=xmax_ms)
    axes[-1].set_xlabel("time from the rank's ProfilerStep start (ms)")
    for ax in axes[:-1]:
        ax.tick_params(labelbottom=True)

    run = Path(metrics.run_dir).name
    cfg = metrics.config
    fig.suptitle(
        f"Communication / compute overlap, one profiled step {'per mode' if len(panels) > 1 else 'of ' + panels[0].mode}  ·  {run}\n"
        f"{metrics.env.get('world_size', '?')} ranks, {metrics.env.get('backend', '?')} on "
        f"{metrics.env.get('device_type', '?')}, K={cfg.get('layers')} layers of {cfg.get('dim')}x{cfg.get('dim')} "
        f"{cfg.get('dtype')}, batch {cfg.get('batch')}",
        fontsize=12,
        fontweight="bold",
        x=0.01,
        ha="left",
    )
    handles = [Patch(facecolor=colours[k], edgecolor="none", label=_legend_name(k)) for k in colours]
    handles.append(Patch(facecolor=OVERLAP_COLOUR, edgecolor="#B8860B", hatch="////", label="comm overlapped by compute (shaded)"))
    fig.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 6), frameon=False, fontsize=9)
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


def _legend_name(key: str) -> str:
    return "forward layer k" if key == "forward" else key


def _select(mode: str, mode_json: dict, metrics: RunMetrics, *, step: int | None, max_ranks: int) -> _ModeStep:
    ranks_json = sorted(mode_json["ranks"], key=lambda r: r["rank"])
    # A step's length is its slowest rank's, as for the unprofiled step times.
    lengths: dict[int, float] = {}
    for r in ranks_json:
        for s in r["steps"]:
            lengths[s["step"]] = max(lengths.get(s["step"], 0.0), s["step_us"])
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
    by_rank = {r["rank"]: r for r in (analysis or {}).get("ranks", [])}
    rank_steps = []
    for r in ranks_json:
        window = next((s for s in r["steps"] if s["step"] == chosen), None)
        if window is None:
            continue
        t0 = window["start_us"]
        spans = tuple(((a - t0) / 1e3, (b - t0) / 1e3, kind, label) for st, a, b, kind, label in r["spans"] if st == chosen)
        numbers = next((s for s in by_rank.get(r["rank"], {}).get("steps", []) if s["step"] == chosen), None)
        rank_steps.append(_RankStep(rank=r["rank"], step_us=window["step_us"], start_us=t0, spans=spans, numbers=numbers))

    world = len(rank_steps)
    note = None
    if world > max_ranks:
        slowest = max(rank_steps, key=lambda r: r.step_us).rank
        keep = {rank_steps[0].rank, slowest}
        # Evenly spaced ranks fill the rest, so the sample spans the whole job.
        others = [r.rank for r in rank_steps if r.rank not in keep]
        want = max_ranks - len(keep)
        keep.update(others[round(i * (len(others) - 1) / max(want - 1, 1))] for i in range(want))
        rank_steps = [r for r in rank_steps if r.rank in keep]
        note = (
            f"showing {len(rank_steps)} of {world} ranks: rank {rank_steps[0].rank}, the slowest in this step "
            f"(rank {slowest}), and evenly spaced ranks"
        )
    return _ModeStep(
        mode=mode, step=chosen, num_steps=len(lengths), chosen_as=chosen_as, ranks=tuple(rank_steps), world_size=world, note=note
    )


def _colour_map(panels: list[_ModeStep]) -> dict[str, str]:
    """Phase key -> colour for the phases present, known phases in a fixed order first."""
    present = []
    for p in panels:
        for r in p.ranks:
            for *_, label in r.spans:
                key = phase(label).key
                if key not in present:
                    present.append(key)
    colours = {k: c for k, c in PHASE_COLOURS.items() if k in present}
    extra = [k for k in present if k not in PHASE_COLOURS]
    for i, key in enumerate(extra):
        colours[key] = OTHER_COLOURS[i % len(OTHER_COLOURS)]
    return colours


def _union(spans: tuple[tuple[float, float, str, str], ...], kind: str) -> iv.Union:
    return iv.union([a for a, _, k, _ in spans if k == kind], [b for _, b, k, _ in spans if k == kind])


def _fmt_ms(us: float | None) -> str:
    return "-" if us is None else f"{us / 1e3:.1f}"


def _draw_panel(ax, panel: _ModeStep, *, colours: dict[str, str], xmax_ms: float) -> None:
    lane_h = 0.8
    yticks, yticklabels = [], []
    min_text_ms = xmax_ms * 0.022  # narrower bars get no text label
    for g, r in enumerate(panel.ranks):
        top = g * 3  # compute lane at top, comm lane at top+1, gap at top+2
        step_ms = r.step_us / 1e3
        ax.add_patch(Rectangle((0, top - 0.5), step_ms, 2, facecolor=STEP_BG_COLOUR, edgecolor="none", zorder=0))
        ax.plot([step_ms, step_ms], [top - 0.5, top + 1.5], color="#555555", lw=0.8, zorder=3)
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
            ph = phase(label)
            y = top + (1 if kind == "comm" else 0)
            ax.add_patch(Rectangle((a, y - lane_h / 2), b - a, lane_h, facecolor=colours[ph.key], edgecolor="white", lw=0.4, zorder=2))
            if b - a >= min_text_ms:
                dark = ph.key in ("forward", "all_reduce", "reduce_scatter", "all_gather")
                ax.text(
                    (a + b) / 2,
                    y,
                    ph.short,
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="white" if dark else "#222222",
                    zorder=4,
                    clip_on=True,
                )
        yticks += [top, top + 1]
        yticklabels += [f"rank {r.rank}  compute", "comm"]
        n = r.numbers
        if n:
            pct = "-" if n.get("overlap_pct") is None else f"{n['overlap_pct']:.0f}%"
            ax.annotate(
                f"step {_fmt_ms(n['step_us'])} ms, overlap {pct}\ncomm {_fmt_ms(n['comm_us'])} ms, exposed "
                f"{_fmt_ms(n['exposed_comm_us'])} ms",
                xy=(1.0, top + 0.5),
                xycoords=("axes fraction", "data"),
                xytext=(6, 0),
                textcoords="offset points",
                va="center",
                ha="left",
                fontsize=7.5,
                color="#333333",
            )
    ax.set_ylim(len(panel.ranks) * 3 - 1.5 + 0.5, -1.0)
    ax.set_xlim(0, xmax_ms * 1.01)
    ax.set_yticks(yticks, yticklabels, fontsize=8)
    for tick, text in zip(ax.get_yticklabels(), yticklabels):
        if text == "comm":
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
    title = f"{panel.mode}: ProfilerStep#{panel.step} ({which})"
    ax.set_title(title, loc="left", fontsize=11, fontweight="bold")
    if panel.note:
        ax.set_title(panel.note, loc="right", fontsize=8.5, style="italic", color="#444444")
