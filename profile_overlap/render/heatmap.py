"""The rank x time heatmap (record/heatmap.py) as a figure: rows ranks, columns the median step's
time bins on the aligned clock. Exposed communication is orange where it waits for a peer and blue
where it moves data; compute is a light grey beneath; the phase band on top. With in_flight=True,
the colour is a collective in flight instead (hidden or not). Nothing is recomputed: cells are the
record's digits, drawn."""

from __future__ import annotations

import io

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from profile_overlap.record.heatmap import Heatmap
from profile_overlap.render.timeline_style import FIG_TEXT_CHARS, PHASE_COLOURS, fit

WAIT = (0.90, 0.40, 0.0)
TRANSFER = (0.0, 0.35, 0.85)
IN_FLIGHT = (0.45, 0.20, 0.60)
WAIT_RGB, TRANSFER_RGB, IN_FLIGHT_RGB = np.array(WAIT), np.array(TRANSFER), np.array(IN_FLIGHT)
COMPUTE_GREY = 0.18
PHASE_RGB = {k[0]: np.array([int(v[i : i + 2], 16) / 255 for i in (1, 3, 5)]) for k, v in PHASE_COLOURS.items()}
DPI = 100


def _cells(rows: tuple[str, ...]) -> np.ndarray:
    """The layer's hex digits as fractions 0..1 (rows x bins)."""
    raw = np.frombuffer("".join(rows).encode("ascii"), dtype=np.uint8).reshape(len(rows), -1)
    digits = np.where(raw >= ord("a"), raw - ord("a") + 10, raw - ord("0"))
    return digits.astype(float) / 15


def image(h: Heatmap, *, in_flight: bool = False) -> np.ndarray:
    """RGB (rows x bins x 3): white, compute greys it, the shown layers colour it."""
    rgb = np.ones((len(h.ranks), h.bins, 3)) - COMPUTE_GREY * _cells(h.compute)[..., None]
    layers = ((h.in_flight, IN_FLIGHT_RGB),) if in_flight else ((h.wait, WAIT_RGB), (h.transfer, TRANSFER_RGB))
    for rows, colour in layers:
        f = _cells(rows)[..., None]
        rgb = rgb * (1 - f) + colour * f
    return np.clip(rgb, 0, 1)


def figure(h: Heatmap, *, title: str, in_flight: bool = False) -> Figure:
    rows = len(h.ranks)
    # At least one pixel per row (a late rank is one row), 2.4 inches for the title, band and legend.
    axes_in = max(rows * 1.05 / DPI, 2.5)
    fig = Figure(figsize=(11, axes_in + 2.4), dpi=DPI)
    ax_phase, ax = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [0.25, axes_in], "hspace": 0.02})
    end_ms = h.bin_us * h.bins / 1e3
    ax.imshow(image(h, in_flight=in_flight), aspect="auto", interpolation="nearest", extent=(0, end_ms, rows - 0.5, -0.5))
    # The phase band: each bin's phase on most rows.
    letters = np.array([list(p) for p in h.phase])
    band = np.ones((1, h.bins, 3))
    for letter, colour in PHASE_RGB.items():
        band[0, (letters == letter).sum(axis=0) * 2 > rows] = colour
    ax_phase.imshow(band, aspect="auto", interpolation="nearest", extent=(0, end_ms, 0, 1))
    ax_phase.set_yticks([])
    ax_phase.set_title(fit(title, 2 * FIG_TEXT_CHARS), loc="left", fontsize=10)
    ticks = np.unique(np.linspace(0, rows - 1, min(rows, 9)).round().astype(int))
    ax.set_yticks(ticks, [str(h.ranks[i]) for i in ticks])
    ax.set_ylabel("rank" if h.ranks_per_row == 1 else f"ranks ({h.ranks_per_row} per row)")
    ax.set_xlabel(f"ms from the first rank's start of step {h.step} (aligned clock; {h.bins} bins of {h.bin_us:,.1f} µs)")
    handles = [Patch(color=IN_FLIGHT, label="collective in flight")] if in_flight else [
        Patch(color=WAIT, label="exposed: waiting for a peer"),
        Patch(color=TRANSFER, label="exposed: transfer"),
    ]  # fmt: skip
    handles.append(Patch(color=(1 - COMPUTE_GREY,) * 3, label="compute"))
    handles += [Patch(color=c, label=name) for name, c in PHASE_COLOURS.items()]
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=8, frameon=False)
    height = axes_in + 2.4
    fig.subplots_adjust(left=0.07, right=0.99, top=1 - 0.45 / height, bottom=1.0 / height)
    return fig


def png_bytes(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, facecolor="white")
    return buf.getvalue()
