"""The report as Markdown, for pasting into a review or a pull request, with timeline.png beside
it. Every string of the content tree is escaped (HTML-significant characters become entities,
Markdown-significant ones get a backslash), so a kernel named `<script>` or `*x*` shows as text.
Metric names link to the definitions appended at the end (GitHub-style heading anchors).
"""

from __future__ import annotations

import re

from profile_overlap.core.terminal import printable
from profile_overlap.render.document import Code, Figure, Items, Paragraph, Picture, Ref, Report, Table, definitions

_MD_SPECIAL = re.compile(r"([\\`*\[\]|~])")
_EDGE_UNDERSCORE = re.compile(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")
_ENTITY_LIKE = re.compile(r"&(?=[#A-Za-z])")
_LINE_ENDING = re.compile(r"\r\n?|\n")
"""CommonMark's line endings: a lone carriage return ends a line as a newline does."""


def escape(text: str) -> str:
    """Inline Markdown text that renders as exactly `text` (GitHub / CommonMark)."""
    # Control characters (escape sequences among them) would reach the terminal of whoever cats the file.
    text = _ENTITY_LIKE.sub("&amp;", printable(_LINE_ENDING.sub("\n", str(text))))
    text = text.replace("<", "&lt;").replace(">", "&gt;")
    text = _MD_SPECIAL.sub(r"\\\1", text)
    # Intraword underscores (all_reduce) never make emphasis; only those at a word's edge can.
    text = _EDGE_UNDERSCORE.sub(r"\\_", text)
    # Inline text stays on its line: a line ending would let a name start a heading, list or table row.
    return _LINE_ENDING.sub(" ", text)


def code_span(text: str, *, table: bool = False) -> str:
    """`text` as an inline code span that shows it verbatim on one line: delimited by one backtick
    more than its longest run of them, its line endings spaces; in a table cell (`table`) its pipes
    escaped (GFM takes `\\|` as a pipe even inside a code span there, and a bare one ends the cell)."""
    text = printable(_LINE_ENDING.sub(" ", str(text)))
    text = text.replace("|", "\\|") if table else text
    fence = "`" * (1 + max((len(r) for r in re.findall(r"`+", text)), default=0))
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _block_start(text: str) -> str:
    """Escape what would make a line a heading, list item or quote when it starts a block."""
    return re.sub(r"^(\s*)([#+\-]|\d+[.)])", lambda m: m.group(1) + "\\" + m.group(2), text)


def slug(title: str) -> str:
    """GitHub's heading anchor: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")


def render(report: Report, *, figure_png: str | None) -> str:
    defs = definitions()
    links = {key: "#" + slug(_plain(title)) for key, title in defs.sections.items()}
    missing = report.refs() - set(links)
    assert not missing, f"the report links to undefined metrics: {sorted(missing)} (add them to docs/metrics.md)"

    def inline(parts) -> str:
        return "".join(f"[{escape(p.text)}]({links[p.key]})" if isinstance(p, Ref) else escape(p) for p in parts)

    out = [f"# {escape(report.title)}", "", f"_{escape(report.subtitle)}_", ""]
    if report.banner:
        out += [f"> **{inline(report.banner.text)}**", ""]
    for section in report.sections:
        out += [f"## {escape(section.title)}", ""]
        for block in section.blocks:
            out += _block(block, inline, figure_png)
    out += [
        "## Appendix: metric definitions",
        "",
        "Every number in this report links here. This is profile_overlap's Metrics reference, docs/metrics.md.",
        "",
    ]
    # The definitions are our own Markdown; headings move one level down under the appendix.
    body = defs.markdown.split("\n", 1)[1] if defs.markdown.startswith("## ") else defs.markdown
    out.append(re.sub(r"^(#{2,5}) ", lambda m: "#" + m.group(1) + " ", body, flags=re.M).strip())
    return "\n".join(out) + "\n"


def _plain(title: str) -> str:
    return title.replace("`", "")


def _block(block, inline, figure_png: str | None) -> list[str]:
    if isinstance(block, Paragraph):
        text = _block_start(inline(block.text))
        if block.tone in ("verdict", "verdict_failed"):
            return [f"**{text}**", ""]
        if block.tone in ("failed", "warning"):
            return [f"> **{text}**", ""]
        return [text, ""]
    if isinstance(block, Table):
        return _table(block, inline)
    if isinstance(block, Code):
        fence = "`" * max(3, 1 + max((len(r) for r in re.findall(r"`+", block.text)), default=0))
        return [f"{fence}text", printable(_LINE_ENDING.sub("\n", block.text)), fence, ""]
    if isinstance(block, Items):
        return [f"- {inline(i)}" for i in block.items] + [""]
    if isinstance(block, Figure):
        if figure_png is None:
            return []
        return [f"![overlap timeline]({figure_png})", "", f"_{inline(block.caption)}_", ""]
    if isinstance(block, Picture):  # write_files writes the PNG beside report.md
        return [f"![{escape(block.alt)}]({block.name})", "", f"_{inline(block.caption)}_", ""]
    raise AssertionError(f"unknown block {type(block).__name__}")


def _table(t: Table, inline) -> list[str]:
    header = [inline(h) or " " for h in t.header]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" if num else "---" for num in t.numeric) + "|"]
    for i, row in enumerate(t.rows):
        cells = [inline(c) for c in row]
        if i in t.highlight:
            cells = [f"**{c}**" if c else c for c in cells]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    if t.caption:
        lines += [f"_{inline(t.caption)}_", ""]
    return lines
