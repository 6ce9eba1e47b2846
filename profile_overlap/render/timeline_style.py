"""How the timeline figure looks: span and phase colours, lane geometry, and how a span's label
is named in the legend and inside its bar (render/timeline.py draws with these)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from profile_overlap.core.terminal import printable

# Span colours, the same in every mode and every figure (Okabe-Ito based: colour-blind safe).
# Key: the record_function label with its pipeline prefix removed (see `span_label`).
LABEL_COLOURS: dict[str, str] = {
    "all_reduce": "#8E5EA2",
    "reduce_scatter": "#009E73",
    "all_gather": "#D55E00",
    "gradients": "#9A9A9A",
    "update": "#E69F00",
    "shard update": "#F2C45A",
    "forward": "#0072B2",
    "forward layer k": "#0072B2",
    "backward": "#CC79A7",
    "optimizer": "#4D4D4D",
    "wait reduce_scatter": "#DDDDDD",
    "wait all_gather": "#C9C9C9",
}
# Labels we do not know (operator or kernel names) get these, in order of appearance (Okabe-Ito,
# then Paul Tol's muted scheme).
OTHER_COLOURS = ("#56B4E9", "#B2912F", "#AA4499", "#A6761D", "#332288", "#999933", "#882255", "#7FB3D5", "#44AA99", "#88CCEE")
# The phase band: light colours that stay apart under protan-, deutan- and tritanopia (Paul Tol's
# light scheme); each window also carries its name, so colour is never the only cue.
PHASE_COLOURS: dict[str, str] = {"forward": "#99DDFF", "backward": "#FBB4AE", "optimizer": "#BBCC33"}
PHASE_SHORT = {"forward": "fwd", "backward": "bwd", "optimizer": "opt"}
OVERLAP_COLOUR = "#FFD54F"
OVERLAP_HATCH_COLOUR = "#FFE9A8"
STEP_BG_COLOUR = "#F4F5F7"

LANE_HEIGHT_IN = 0.19
"""Height of one lane (compute or comm) in inches; a rank's group is two lanes plus a gap, and
the phase band above them where the timeline has phases."""
BAND_OFFSET = 0.85
"""The phase band's centre, in lanes above the compute lane's."""
BAND_HEIGHT = 0.55
FIG_WIDTH_IN = 15.0
DPI = 110

_FORWARD = re.compile(r"^forward/layer(\d+)$")


FIG_TEXT_CHARS = 60
"""The most characters of a name from a trace that a figure draws (legend entries, titles): a 12 MiB
kernel name overflows FreeType's rasteriser ("raster overflow"), and a long one hides the figure."""


def drawable(text: str) -> str:
    """Text from a trace as a figure draws it: escape sequences and control characters removed (the
    fonts have no glyph for them, and matplotlib warns on the terminal for each), tabs and newlines
    as spaces."""
    return printable(text).replace("\t", " ").replace("\n", " ")


def fit(text: str, chars: int = FIG_TEXT_CHARS) -> str:
    """`text` as a figure draws it (`drawable`): at most `chars` characters, cut with an ellipsis."""
    text = drawable(text)
    return text if len(text) <= chars else text[: chars - 1] + "…"


@dataclass(frozen=True)
class SpanLabel:
    key: str
    """Colour key, shared by all forward layers."""
    name: str
    """What the legend and tooltips call it, e.g. 'forward layer 3'."""
    short: str
    """What fits inside a bar, e.g. 'L3'."""


def span_label(label: str) -> SpanLabel:
    """How a span label (`split/reduce_scatter`, `forward/layer3`, `aten::mm`, ...) is drawn."""
    label = drawable(label)
    m = _FORWARD.match(label)
    if m:
        return SpanLabel(key="forward layer k", name=f"forward layer {m.group(1)}", short=f"L{m.group(1)}")
    name = label.split("/", 1)[1] if "/" in label else label
    name = name.replace("shard_update", "shard update").replace("wait_all_gather", "wait all_gather")
    name = name.replace("wait_reduce_scatter", "wait reduce_scatter")
    key = re.sub(r" \([^()]*\)$", "", name)  # one colour for FSDP's "FSDP::all_gather (blocks.0)", "(blocks.1)", ...
    short = {
        "all_reduce": "AR",
        "reduce_scatter": "RS",
        "all_gather": "AG",
        "update": "update",
        "shard update": "shard upd",
        "gradients": "grad",
        "wait all_gather": "wait",
        "wait reduce_scatter": "wait",
        "optimizer": "opt",
    }.get(name, key.removeprefix("FSDP::")[:10])
    return SpanLabel(key=key, name=name, short=short)


def _luminance(colour: str) -> float:
    """Perceived lightness of '#RRGGBB' (Rec. 601 weights), 0 to 1: bars below 0.5 take white text."""
    r, g, b = (int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5))
    return 0.299 * r + 0.587 * g + 0.114 * b
