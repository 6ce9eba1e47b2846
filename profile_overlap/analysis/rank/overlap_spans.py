"""One rank's communication split instant by instant, as intervals (for drawing it, e.g. `perfetto`).

The same unions the rank's totals are measured on (per_rank.finish_rank): hidden = ∪comm ∩ ∪compute,
exposed = ∪comm − ∪compute, so |hidden| = overlap_us and |exposed| = exposed_comm_us, on the rank's
own clock. Kept only when asked (`analyze_dir(folder, AnalysisOptions(keep_spans=True))`): a GPU trace's unions hold
tens of thousands of intervals, which the metrics do not need.
"""

from __future__ import annotations

from dataclasses import dataclass

from profile_overlap.core import intervals as iv


@dataclass(frozen=True)
class OverlapSpans:
    """A rank's compute, hidden and exposed communication as sorted disjoint intervals (µs, own clock)."""

    compute: iv.Union
    """∪compute (inside the step windows where the totals are)."""
    hidden: iv.Union
    """∪comm ∩ ∪compute: communication hidden behind compute (its length is overlap_us)."""
    exposed: iv.Union
    """∪comm − ∪compute: communication nothing hides (its length is exposed_comm_us)."""


def overlap_spans(comm_u: iv.Union, compute_u: iv.Union) -> OverlapSpans:
    return OverlapSpans(compute=compute_u, hidden=iv.intersect(comm_u, compute_u), exposed=iv.difference(comm_u, compute_u))
