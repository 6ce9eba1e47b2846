"""The rank x time heatmap of the median profiled step, typed (analysis/world/heatmap.py builds it; the
report's figure, the PNG and the Overlap tab draw it). Definitions: docs/metrics.md "Rank x time heatmap".

Each layer holds one string per row, one character per time bin: the hex digit round(15 · f), f the
fraction of the bin the layer covers on that row (0: none, f: all of it). `phase` holds one letter
per bin: f, b or o for the forward, backward or optimizer window holding the bin's middle, `.` for
none. A row is one rank, or `ranks_per_row` consecutive ranks (the most of each layer over them)."""

from __future__ import annotations

import msgspec

LAYERS = ("wait", "transfer", "in_flight", "compute")
"""The layers, in the order the tab and the figure offer them."""


class Heatmap(msgspec.Struct, frozen=True, kw_only=True):
    step: int
    """The median profiled step (by its median duration over ranks)."""
    start_us: float
    """Left edge of the first bin on the aligned clock: the earliest start of that step over ranks."""
    bin_us: float
    """Width of one bin (µs): the step's span over ranks / the number of bins."""
    bins: int
    ranks_per_row: int
    """1 up to MAX_ROWS ranks; above, consecutive ranks share a row."""
    ranks: tuple[int, ...]
    """The first rank of each row, in rank order."""
    wait: tuple[str, ...]
    """Exposed communication waiting for a peer (the causes' wait)."""
    transfer: tuple[str, ...]
    """Exposed communication moving data (exposed − wait)."""
    in_flight: tuple[str, ...]
    """A collective call in flight, hidden or not."""
    compute: tuple[str, ...]
    phase: tuple[str, ...]

    def layer(self, name: str) -> tuple[str, ...]:
        rows: tuple[str, ...] = getattr(self, name)
        return rows
