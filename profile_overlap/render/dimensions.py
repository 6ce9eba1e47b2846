"""Dimensions and pipeline stages, rendered: the console tables of `analyze`, the report's section
"Dimensions and pipeline stages" and the verdict's sentence naming the dimension with the most
exposed time. Reads the record's `dimensions` and `pipeline` (record/dimensions.py) by attribute;
nothing is computed here. Shown when a job has two or more dimensions or a pipeline: a job of one
dimension reads as its rank tables already say."""

from __future__ import annotations

from collections.abc import Mapping

from rich.table import Table as RichTable

from profile_overlap.record.analysis import AnalysisRecord
from profile_overlap.record.dimensions import Dimension, Pipeline
from profile_overlap.record.metrics import RunMetrics
from profile_overlap.render.document import Inline, Paragraph, Ref, Section, Table
from profile_overlap.render.numbers import grouped, ms, nbytes, pct

COLUMNS = ("rank", "calls", "bytes", "comm_us", "hidden_us", "exposed_us", "wait_us", "transfer_us", "busbw GB/s")
STAGE_COLUMNS = ("rank", "stage", "bubble_us", "bubble %", "p2p_exposed_us", "idle_us")
STAGE_KEYS = {"bubble_us": "bubble_us", "bubble %": "bubble_pct", "p2p_exposed_us": "p2p_exposed_us", "idle_us": "idle_us"}


def shown(record: AnalysisRecord) -> bool:
    return len(record.dimensions) >= 2 or record.pipeline is not None


def _rows(d: Dimension) -> list[tuple[str, ...]]:
    return [
        (
            rank,
            str(x.calls),
            nbytes(x.bytes),
            grouped(x.comm_us),
            grouped(x.hidden_us),
            grouped(x.exposed_us),
            grouped(x.wait_us),
            grouped(x.transfer_us),
            grouped(x.busbw_gbps, 2),
        )
        for rank, x in sorted(d.ranks.items(), key=lambda kv: int(kv[0]))
    ]


def _title(name: str, d: Dimension) -> str:
    groups = ", ".join(d.pg_names)
    return f"Dimension {name}: groups {groups} of {d.group_size or '?'} ranks (by {d.found_by}), inside the step windows"


def _stage_rows(p: Pipeline) -> list[tuple[str, ...]]:
    return [
        (r, str(x.stage), grouped(x.bubble_us), grouped(x.bubble_pct, 2), grouped(x.p2p_exposed_us), grouped(x.idle_us))
        for r, x in sorted(p.ranks.items(), key=lambda kv: (kv[1].stage, int(kv[0])))
    ]


def _stage_title(p: Pipeline) -> str:
    ideal = f", ideal bubble {pct(p.ideal_bubble_pct)}% = (p-1)/(m+p-1)" if p.ideal_bubble_pct is not None else ""
    stages = " -> ".join(str(r) for r in p.stages)
    return f"Pipeline stages {stages}: {p.microbatches or '?'} microbatches per step{ideal}"


def console_tables(record: AnalysisRecord) -> list[RichTable]:
    """A table per dimension (a row per rank) and, for a pipeline, one of its stages."""
    if not shown(record):
        return []
    out = []
    for name, d in record.dimensions.items():
        t = RichTable(title=_title(name, d), title_justify="left")
        for col in COLUMNS:
            t.add_column(col, justify="right")
        for row in _rows(d):
            t.add_row(*row)
        out.append(t)
    if record.pipeline is not None:
        t = RichTable(title=_stage_title(record.pipeline), title_justify="left")
        for col in STAGE_COLUMNS:
            t.add_column(col, justify="right")
        for row in _stage_rows(record.pipeline):
            t.add_row(*row)
        out.append(t)
    return out


def most_exposed(dimensions: Mapping[str, Dimension]) -> tuple[str, Dimension] | None:
    """The dimension with the most exposed time per step (the first by name on a tie)."""
    found = sorted((name, d) for name, d in dimensions.items() if d.exposed_per_step_us is not None)
    if len(found) < 2:
        return None
    return max(found, key=lambda x: x[1].exposed_per_step_us or 0.0)


def verdict_text(record: AnalysisRecord) -> Inline:
    """`Of the dimensions, tp's communication is the most exposed: 1.20 ms per step (dp 0.40 ms).`"""
    worst = most_exposed(record.dimensions)
    text: list = []
    if worst is not None:
        name, d = worst
        others = ", ".join(f"{n} {ms((x.exposed_per_step_us or 0) / 1e3)} ms" for n, x in record.dimensions.items() if n != name)
        text += [
            f"Of the dimensions, {name}'s communication is the most exposed: ",
            Ref(f"{ms((d.exposed_per_step_us or 0) / 1e3)} ms", "dimension_exposed_us"),
            f" per step, the mean over its ranks ({others}).",
        ]
    p = record.pipeline
    if p is not None:
        worst_stage = max(p.ranks.items(), key=lambda kv: kv[1].bubble_pct or 0.0, default=None)
        if worst_stage is not None:
            rank, x = worst_stage
            ideal = f", beside the ideal {pct(p.ideal_bubble_pct)}%" if p.ideal_bubble_pct is not None else ""
            text += [
                (" " if text else "") + f"The pipeline's largest bubble is stage {x.stage} (rank {rank}): ",
                Ref(f"{pct(x.bubble_pct)}%", "bubble_pct"),
                f" of its steps{ideal}.",
            ]
    return tuple(text)


def console_verdict(record: AnalysisRecord) -> str:
    return "".join(part if isinstance(part, str) else part.text for part in verdict_text(record))


def _analyses(m: RunMetrics) -> list[tuple[str, AnalysisRecord]]:
    return [(name, a) for name, mode in m.modes.items() if (a := mode.analysis) is not None and shown(a)]


def verdict_paragraphs(m: RunMetrics) -> tuple[Paragraph, ...]:
    return tuple(Paragraph(text) for _, a in _analyses(m)[:1] if (text := verdict_text(a)))


def report_sections(m: RunMetrics) -> tuple[Section, ...]:
    found = _analyses(m)
    if not found:
        return ()
    blocks: list = []
    for mode, a in found:
        prefix = f"{mode}: " if len(m.modes) > 1 else ""
        for name, d in a.dimensions.items():
            header = tuple((Ref(col, "dimension_" + col) if col.endswith("_us") else col,) for col in COLUMNS)
            rows = tuple(tuple((cell,) for cell in row) for row in _rows(d))
            blocks.append(Table(header, rows, numeric=(False, *[True] * (len(COLUMNS) - 1)), caption=(prefix + _title(name, d),)))
        if a.pipeline is not None:
            header = tuple((Ref(col, STAGE_KEYS[col]) if col in STAGE_KEYS else col,) for col in STAGE_COLUMNS)
            rows = tuple(tuple((cell,) for cell in row) for row in _stage_rows(a.pipeline))
            blocks.append(
                Table(header, rows, numeric=(False, *[True] * (len(STAGE_COLUMNS) - 1)), caption=(prefix + _stage_title(a.pipeline),))
            )
    return (Section("dimensions", "Dimensions and pipeline stages", tuple(blocks)),)


def tensorboard_scalars(record: AnalysisRecord | None, last_step: int | None) -> list[tuple[str, float, int]]:
    """(tag, value, step): `dimension/<name>/exposed_ms` per profiled step (the rank mean), and
    `pipeline/bubble_pct` (the stage mean over the profiled steps) at the last profiled step."""
    if record is None:
        return []
    out = [
        (f"dimension/{name.replace('/', '_')}/exposed_ms", s.exposed_us / 1e3, s.step)
        for name, d in record.dimensions.items()
        for s in d.steps
    ]
    p = record.pipeline
    if p is not None and p.bubble_pct is not None and last_step is not None:
        out.append(("pipeline/bubble_pct", p.bubble_pct, last_step))
    return out
