"""The report as one self-contained HTML file: inline style sheet, the timeline as an SVG data
URI, no script, no external reference. Opens offline and prints on A4 or Letter.

Every string of the content tree goes through `html.escape`; the only markup is written here.
The figure is embedded as an <img> (an SVG loaded as an image never runs scripts or fetches
anything), so labels inside it are inert too.
"""

from __future__ import annotations

import base64
import functools
import html

from markdown_it import MarkdownIt

from profile_overlap.core.terminal import printable
from profile_overlap.render.document import Code, Figure, Items, Paragraph, Picture, Ref, Report, Table, definitions

STYLE = """
:root { --ink:#1d2330; --muted:#5b6475; --rule:#d9dde5; --zebra:#f5f7fa; --accent:#2458a6;
        --ok:#1f7a3a; --bad:#b3261e; --warn:#8a5a00; }
* { box-sizing: border-box; }
body { margin: 0; color: var(--ink); background: #fff;
       font: 15px/1.5 -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
main { max-width: 1040px; margin: 0 auto; padding: 28px 32px 48px; }
h1 { font-size: 26px; margin: 0 0 2px; }
h2 { font-size: 19px; margin: 30px 0 10px; padding-bottom: 4px; border-bottom: 2px solid var(--rule); }
h3 { font-size: 16px; margin: 20px 0 6px; }
h4 { font-size: 14px; margin: 16px 0 4px; }
.sub { color: var(--muted); margin: 0 0 14px; overflow-wrap: anywhere; }
p { margin: 8px 0; }
nav { font-size: 13px; color: var(--muted); margin: 6px 0 0; display: flex; flex-wrap: wrap; gap: 2px 12px; }
nav a { color: var(--accent); text-decoration: none; white-space: nowrap; }  /* the links wrap between, never inside */
a.m { color: inherit; text-decoration: underline dotted var(--accent); text-underline-offset: 2px; }
a.m:hover { color: var(--accent); }
.verdict { font-size: 17px; line-height: 1.55; padding: 12px 16px; border-left: 5px solid var(--accent);
           background: #f1f5fc; margin: 10px 0; }
.failed { color: #fff; background: var(--bad); padding: 10px 16px; font-weight: 600; border-radius: 4px; }
.verdict.bad { border-left-color: var(--bad); background: #fcefee; }
.warning { background: #fff4dc; color: var(--warn); padding: 10px 16px; font-weight: 600; border-radius: 4px; }
.ok { color: var(--ok); font-weight: 600; }
table { border-collapse: collapse; width: auto; max-width: 100%; margin: 8px 0 4px; font-size: 13.5px; }
th, td { padding: 4px 10px; border-bottom: 1px solid var(--rule); text-align: left; vertical-align: top;
         overflow-wrap: break-word; }
th { background: #eef1f6; font-weight: 600; }
tbody tr:nth-child(even) td { background: var(--zebra); }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
th.num { white-space: normal; }  /* a wide table (many modes) wraps its headers, never its numbers */
tr.hl td { background: #fff1c7 !important; font-weight: 600; }
caption { caption-side: bottom; text-align: left; color: var(--muted); font-size: 12.5px; padding-top: 4px; }
#definitions table { width: 100%; }
#definitions td:last-child { min-width: 4.5em; }  /* units stay readable; prose columns wrap */
table.kv td:first-child { color: var(--muted); white-space: nowrap; }
pre { background: #f3f4f7; border: 1px solid var(--rule); border-radius: 4px; padding: 10px 12px; font-size: 12.5px;
      white-space: pre-wrap; overflow-wrap: anywhere; }
code { font-family: ui-monospace, "SF Mono", Menlo, Consolas, "DejaVu Sans Mono", monospace; }
figure { margin: 10px 0; }
figure img { width: 100%; height: auto; border: 1px solid var(--rule); }
figcaption { color: var(--muted); font-size: 12.5px; }
ul.notes li { margin: 6px 0; }
#definitions { font-size: 13.5px; }
#definitions tr:target td { background: #fff1c7; }
@page { margin: 14mm 12mm; }
@media print {
  body { font-size: 10pt; }
  main { max-width: none; padding: 0; }
  nav { display: none; }
  h2 { font-size: 14pt; margin-top: 16pt; }
  h2, h3, h4 { break-after: avoid; page-break-after: avoid; }
  table { font-size: 8.5pt; }
  th, td { padding: 2px 5px; }
  td.num, th.num { white-space: normal; }
  thead { display: table-header-group; }
  /* A table moves whole to the next page when it fits on one; a longer one breaks between rows, header repeated. */
  table, tr, figure, pre, .verdict, .failed, .warning { break-inside: avoid; page-break-inside: avoid; }
  tbody tr:nth-child(even) td, th, .verdict, .failed, tr.hl td { -webkit-print-color-adjust: exact; print-color-adjust: exact; }
  a.m { text-decoration: none; }
  #definitions { break-before: page; }
}
"""


def render(report: Report, *, figure_svg: str | None) -> str:
    """The whole document. figure_svg: the timeline (timeline.to_svg), or None to leave it out."""
    defs_html, anchors = _definitions_html()
    missing = report.refs() - set(anchors)
    assert not missing, f"the report links to undefined metrics: {sorted(missing)} (add them to docs/metrics.md)"
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(report.title)}: {_e(report.subtitle)}</title>",
        f"<style>{STYLE}</style></head><body><main>",
        f"<h1>{_e(report.title)}</h1>",
        f'<p class="sub">{_e(report.subtitle)}</p>',
    ]
    if report.banner:
        out.append(_paragraph(report.banner))
    out.append(
        "<nav>" + "".join(f'<a href="#{s.id}">{_e(s.title)}</a>' for s in report.sections) + '<a href="#definitions">Definitions</a></nav>'
    )
    for section in report.sections:
        out.append(f'<section id="{section.id}"><h2>{_e(section.title)}</h2>')
        out.extend(_block(b, figure_svg) for b in section.blocks)
        out.append("</section>")
    out.append(
        '<section id="definitions"><h2>Appendix: metric definitions</h2>'
        "<p>Every number in this report links here. This is profile_overlap's Metrics reference, docs/metrics.md.</p>"
        f"{defs_html}</section>"
    )
    out.append("</main></body></html>\n")
    return "\n".join(out)


def _e(text: str) -> str:
    # Control characters are not allowed in HTML text (and an escape sequence would reach a terminal that shows the file).
    return html.escape(printable(text), quote=True)


def _inline(parts) -> str:
    return "".join(f'<a class="m" href="#{_e(_anchor(p.key))}">{_e(p.text)}</a>' if isinstance(p, Ref) else _e(p) for p in parts)


def _anchor(key: str) -> str:
    return _definitions_html()[1][key]


def _paragraph(p: Paragraph) -> str:
    cls = {"plain": "", "verdict": "verdict", "verdict_failed": "verdict bad", "failed": "failed", "warning": "warning", "ok": "ok"}[p.tone]
    return f'<p class="{cls}">{_inline(p.text)}</p>' if cls else f"<p>{_inline(p.text)}</p>"


def _block(block, figure_svg: str | None) -> str:
    if isinstance(block, Paragraph):
        return _paragraph(block)
    if isinstance(block, Table):
        return _table(block)
    if isinstance(block, Code):
        return f"<pre><code>{_e(block.text)}</code></pre>"
    if isinstance(block, Items):
        return '<ul class="notes">' + "".join(f"<li>{_inline(i)}</li>" for i in block.items) + "</ul>"
    if isinstance(block, Figure):
        if figure_svg is None:
            return ""
        data = base64.b64encode(figure_svg.encode("utf-8")).decode("ascii")
        return (
            f'<figure><img alt="overlap timeline: one profiled step per mode and rank" '
            f'src="data:image/svg+xml;base64,{data}"><figcaption>{_inline(block.caption)}</figcaption></figure>'
        )
    if isinstance(block, Picture):
        data = base64.b64encode(block.png).decode("ascii")
        caption = _inline(block.caption)
        return f'<figure><img alt="{_e(block.alt)}" src="data:image/png;base64,{data}"><figcaption>{caption}</figcaption></figure>'
    raise AssertionError(f"unknown block {type(block).__name__}")


def _table(t: Table) -> str:
    kv = all(not "".join(str(x) for x in h) for h in t.header)
    cls = ' class="kv"' if kv else ""
    head = (
        ""
        if kv
        else "<thead><tr>"
        + "".join(f"<th{' class=num' if num else ''}>{_inline(h)}</th>" for h, num in zip(t.header, t.numeric))
        + "</tr></thead>"
    )
    body = []
    for i, row in enumerate(t.rows):
        cells = "".join(f"<td{' class=num' if num else ''}>{_inline(c)}</td>" for c, num in zip(row, t.numeric))
        body.append(f"<tr{' class=hl' if i in t.highlight else ''}>{cells}</tr>")
    caption = f"<caption>{_inline(t.caption)}</caption>" if t.caption else ""
    return f"<table{cls}>{caption}{head}<tbody>{''.join(body)}</tbody></table>"


@functools.cache
def _definitions_html() -> tuple[str, dict[str, str]]:
    """metric_defs.md as HTML, headings moved one level down, and each table row that defines a
    `name` given an id, so the report's links land on it. Returns the HTML and key -> id, with
    every `name` in a row's first cell as a key (`algbw` (`algbw_gbps`): both)."""
    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    tokens = md.parse(definitions().markdown)
    anchors: dict[str, str] = {}
    for i, tok in enumerate(tokens):
        if tok.type in ("heading_open", "heading_close"):
            tok.tag = f"h{min(int(tok.tag[1]) + 1, 6)}"
        # A body row is tr_open, td_open, inline (the first cell), ...
        if tok.type == "tr_open" and tokens[i + 1].type == "td_open":
            keys = [c.content for c in tokens[i + 2].children or () if c.type == "code_inline" and c.content not in anchors]
            if keys:
                tok.attrSet("id", f"def-{keys[0]}")
                anchors.update({k: f"def-{keys[0]}" for k in keys})
    return md.renderer.render(tokens, md.options, {}), anchors
