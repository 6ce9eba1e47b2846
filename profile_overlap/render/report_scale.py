"""The report's parts for many ranks: the rank x time heatmap of each mode's median step (a PNG,
inline in report.html and beside report.md), and above TABLE_RANKS ranks each per-rank number's
spread over the ranks in place of the per-rank table (the full table: `analyze --json`'s CSV)."""

from __future__ import annotations

import msgspec

from profile_overlap.record.analysis import AnalysisRecord, builtin
from profile_overlap.record.folder import Run
from profile_overlap.render.document import Picture, Ref, Section, Table
from profile_overlap.render.numbers import pct, us

TABLE_RANKS = 64
"""Per-rank tables up to this many ranks; above, the spread."""
OUTLIERS_SHOWN = 8


_last_drawn: dict[tuple[bytes, str], bytes] = {}
"""(heatmap record, title) -> PNG: the heatmaps of the last report built in this process, which
`report` on a job's traces builds twice (the job folder's report, then the one asked for)."""


def heatmap_sections(run: Run) -> tuple[Section, ...]:
    """One section with a picture per mode whose timeline has a heatmap (none in timelines written before it)."""
    global _last_drawn
    if not run.timeline:
        return ()
    from profile_overlap.render.heatmap import figure, png_bytes

    drawn = {mode: t.heatmap for mode, t in run.timeline.modes.items() if t.heatmap is not None}
    blocks = []
    pngs: dict[tuple[bytes, str], bytes] = {}
    for mode, h in drawn.items():
        title = f"{mode}: step {h.step}, {len(h.ranks)} {'ranks' if h.ranks_per_row == 1 else 'rows'}"
        key = (msgspec.json.encode(h, enc_hook=builtin), title)
        pngs[key] = _last_drawn.get(key) or png_bytes(figure(h, title=title))
        blocks.append(
            Picture(
                name="heatmap.png" if len(drawn) == 1 else f"heatmap-{mode}.png",
                png=pngs[key],
                alt=f"rank x time heatmap of {mode}'s median profiled step",
                caption=(
                    "Every rank (a row each, in rank order) over the median profiled step on the aligned clock (",
                    Ref("heatmap", "heatmap"),
                    "): exposed communication orange where it waits for a peer, blue where it moves data; compute grey. "
                    "A late rank is a row without the others' wait; a slow node a band of rows; a phase a column band.",
                ),
            )
        )
    _last_drawn = pngs
    return (Section("heatmap", "Every rank over the median step", tuple(blocks)),) if blocks else ()


def spread_table(mode: str, analysis: AnalysisRecord) -> Table:
    def fmt(metric: str, x: float) -> str:
        return pct(x) if metric == "overlap_pct" else us(x)

    rows = tuple(
        (
            ("overlap %" if s.metric == "overlap_pct" else s.metric,),
            *((fmt(s.metric, x),) for x in (s.min, s.p10, s.median, s.p90, s.max)),
            (", ".join(map(str, s.worst)) or "all equal",),
            (", ".join(map(str, s.best)) or "all equal",),
            (f"{len(s.outliers)}: {', '.join(map(str, s.outliers[:OUTLIERS_SHOWN]))}{', …' if len(s.outliers) > OUTLIERS_SHOWN else ''}"
             if s.outliers else "0",),
        )
        for s in analysis.spread
    )  # fmt: skip
    return Table(
        header=(
            ("per rank (µs)",),
            ("min",),
            ("p10",),
            ("median",),
            ("p90",),
            ("max",),
            ("worst ranks",),
            ("best ranks",),
            (Ref("outliers", "outliers"),),
        ),
        rows=rows,
        numeric=(False, True, True, True, True, True, False, False, False),
        caption=(
            f"{mode}: {len(analysis.ranks):,} ranks, each per-rank number over them (",
            Ref("spread", "spread"),
            "); the full per-rank and per-step tables are the CSV files `analyze DIR --json OUT` writes beside OUT.",
        ),
    )
