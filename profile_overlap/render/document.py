"""The report as a document tree (paragraphs, tables, figures, links to metric definitions), the
number formats, and the definitions appendix; rendered to HTML and Markdown by html.py and markdown.py."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

DEFINITIONS_PATH = Path(__file__).resolve().parent / "static" / "metric_defs.md"
"""docs/metrics.md (the Metrics reference), shipped with the package so that reports can embed it and link to it."""


@dataclass(frozen=True)
class Ref:
    """Text that links to a metric's definition (`key`: the name in the definitions' tables)."""

    text: str
    key: str


Inline = tuple  # of str | Ref


@dataclass(frozen=True)
class Paragraph:
    text: Inline
    tone: str = "plain"
    """plain, verdict, verdict_failed, failed (a banner), warning or ok: how renderers show it."""


@dataclass(frozen=True)
class Table:
    header: tuple[Inline, ...]
    rows: tuple[tuple[Inline, ...], ...]
    numeric: tuple[bool, ...]
    """Per column: right-aligned numbers."""
    caption: Inline = ()
    highlight: frozenset[int] = frozenset()
    """Row indices to emphasise (the slowest rank, a failed check)."""


@dataclass(frozen=True)
class Code:
    text: str


@dataclass(frozen=True)
class Items:
    items: tuple[Inline, ...]


@dataclass(frozen=True)
class Figure:
    """The overlap timeline; the renderer draws it from the run folder's timeline.json."""

    caption: Inline


@dataclass(frozen=True)
class Picture:
    """A PNG drawn by a renderer (the rank x time heatmap): inline in HTML, a file beside report.md."""

    name: str
    """The file name beside report.md."""
    png: bytes
    alt: str
    caption: Inline


@dataclass(frozen=True)
class Section:
    id: str
    title: str
    blocks: tuple


@dataclass(frozen=True)
class Report:
    title: str
    subtitle: str
    banner: Paragraph | None
    """FAILED / not finished, shown above everything else."""
    sections: tuple[Section, ...]

    def refs(self) -> set[str]:
        """Every definition key the report links to (the tests check each one resolves)."""
        keys: set[str] = set()

        def walk(x) -> None:
            if isinstance(x, Ref):
                keys.add(x.key)
            elif isinstance(x, (tuple, list)):
                for y in x:
                    walk(y)
            elif isinstance(x, (Paragraph, Table, Items, Figure, Section)):
                for f in x.__dataclass_fields__:
                    walk(getattr(x, f))

        walk(self.sections)
        walk(self.banner)
        return keys


@dataclass(frozen=True)
class Definitions:
    markdown: str
    sections: dict[str, str] = field(default_factory=dict)
    """definition key -> title of the ### section that defines it (for Markdown links)."""


def definitions() -> Definitions:
    # The page's headings one level down (# Metrics -> ## Metrics, its sections ###): the report nests them under its appendix.
    text = re.sub(r"^(#{1,5}) ", r"#\1 ", DEFINITIONS_PATH.read_text(encoding="utf-8"), flags=re.M)
    sections: dict[str, str] = {}
    title = ""
    for line in text.splitlines():
        if line.startswith("### "):
            title = line[4:].strip()
        if line.startswith("|") and title:
            # A definition row: every `name` in its first cell (e.g. `algbw` (`algbw_gbps`)) is a key.
            for key in re.findall(r"`([^`]+)`", line.split("|")[1]):
                sections.setdefault(key, title)
    return Definitions(markdown=text, sections=sections)
