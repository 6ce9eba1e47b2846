"""Text from a trace is untrusted: event names that carry terminal escape sequences, rich markup or
Markdown line endings show as text on the console and in report.md, and change nothing else."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from profile_overlap.cli.main import main
from profile_overlap.core.terminal import printable
from profile_overlap.render import markdown
from profile_overlap.render.console import make_console
from profile_overlap.render.document import Code, Items, Paragraph, Picture, Report, Section, Table

GLOO = Path(__file__).parent / "data" / "gloo_2rank"
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
ESCAPES = "\x1b]0;pwned\x07\x1b[2J\x1b[31mRED\x9b2J\x7f\x1bc"
"""A window title, clear screen, red, the 8-bit CSI, DEL and a terminal reset."""


def _hostile_traces(tmp_path: Path, suffix: str) -> Path:
    """The 2-rank gloo traces with `suffix` appended to every complete event's name and the host name."""
    out = tmp_path / "traces"
    out.mkdir()
    for path in GLOO.glob("*.json.gz"):
        trace = json.loads(gzip.decompress(path.read_bytes()))
        for e in trace["traceEvents"]:
            if e.get("ph") == "X":
                e["name"] += suffix
        trace["host_name"] += suffix
        (out / path.name).write_bytes(gzip.compress(json.dumps(trace).encode()))
    return out


def test_escape_sequences_in_event_names_never_reach_the_terminal(tmp_path, capsys):
    traces = _hostile_traces(tmp_path, ESCAPES)
    assert main(["analyze", str(traces)]) == 0
    out, err = capsys.readouterr()
    assert not CONTROL.findall(out + err)
    # The name is still there, as text: the collective's kind and the exposed calls name it.
    assert "gloo:all_reduceRED2J" in out and "gloo:all_gatherRED2J" in out


def test_event_names_that_look_like_rich_markup_print_as_they_are(tmp_path, capsys):
    # `[/x]` once ended analyze with rich's MarkupError; `[bold]` and `:fire:` were parsed as style and emoji.
    traces = _hostile_traces(tmp_path, "[/x][bold]:fire:")
    assert main(["analyze", str(traces)]) == 0
    out = capsys.readouterr().out
    assert "gloo:all_reduce[/x][bold]:fire:" in out


def test_every_string_the_console_renders_is_printable(capsys):
    from rich.table import Table as RichTable

    console = make_console(width=200)
    table = RichTable(title=f"title{ESCAPES}")
    table.add_column(f"header{ESCAPES}")
    table.add_row(f"cell{ESCAPES}")
    console.print(table)
    console.print(f"line{ESCAPES}", style="yellow")
    console.print(f"plain{ESCAPES}", markup=False, highlight=False)
    out = capsys.readouterr().out
    assert not CONTROL.findall(out)
    for word in ("title", "header", "cell", "line", "plain"):
        assert f"{word}RED2J" in out


@pytest.mark.parametrize(
    "text, shown",
    [
        ("\x1b]8;;http://evil\x1b\\click\x1b]8;;\x1b\\", "click"),  # a hyperlink, ended by ST
        ("a\x1b[1;31mb\x1b[0mc", "abc"),
        ("tab\tand\nnewline\rcr\x00nul\x85nel", "tab\tand\nnewlinecrnulnel"),
        ("all_reduce µs ✓", "all_reduce µs ✓"),
        ("ms\u202e41.0 \u2066x\u2069", "ms41.0 x"),  # a right-to-left override would show "0.14" and reorder the line
    ],
)
def test_printable_strips_escape_sequences_and_control_characters(text, shown):
    assert printable(text) == shown


LINE_ENDINGS = ["\r", "\n", "\r\n"]


def _report(name: str) -> Report:
    """A report whose every kind of block carries `name`, as trace text reaches them."""
    blocks = (
        Paragraph((f"the slowest kernel is {name}",)),
        Paragraph((f"{name} is exposed",), tone="warning"),
        Table(header=("kind", "ms"), rows=((name, "1.0"), ("all_reduce", "2.0")), numeric=(False, True), caption=(name,)),
        Items(((f"note on {name}",), (name,))),
        Picture(name="heatmap.png", png=b"", alt=name, caption=(name,)),
        Code(f"python -m profile_overlap analyze {name}"),
    )
    return Report(title=f"report {name}", subtitle=name, banner=None, sections=(Section("notes", f"Notes {name}", blocks),))


def _headings(tokens) -> list[str]:
    return [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"]


@pytest.mark.parametrize("ending", LINE_ENDINGS, ids=repr)
def test_a_line_ending_in_a_name_starts_no_markdown_block(ending):
    name = f"k{ending}# injected{ending}- item{ending}> quote{ending}| a | b |{ending}---{ending}"
    md = MarkdownIt("commonmark").enable("table")
    tokens = md.parse(markdown.render(_report(name), figure_png=None))
    plain = md.parse(markdown.render(_report("k"), figure_png=None))
    # Our own headings only (the title, the section, the appendix's), the name inside the first two.
    assert len(_headings(tokens)) == len(_headings(plain)) and all(h.startswith(("report k", "Notes k")) for h in _headings(tokens)[:2])
    # No injected quote, rule, paragraph, list or list item (the Items block keeps its two).
    for kind in ("blockquote_open", "hr", "paragraph_open", "bullet_list_open", "list_item_open"):
        assert [t.type for t in tokens].count(kind) == [t.type for t in plain].count(kind), kind
    first_table = [t.type for t in tokens[: next(i for i, t in enumerate(tokens) if t.type == "table_close")]]
    assert first_table.count("tr_open") == 3  # header and two rows


@pytest.mark.parametrize("ending", LINE_ENDINGS, ids=repr)
def test_a_line_ending_in_a_command_stays_inside_its_code_block(ending):
    command = f"analyze x{ending}```{ending}~~~{ending}# injected"
    report = Report(title="t", subtitle="s", banner=None, sections=(Section("setup", "Setup", (Code(command),)),))
    tokens = MarkdownIt("commonmark").parse(markdown.render(report, figure_png=None))
    assert not any("injected" in h for h in _headings(tokens))
    fences = [t for t in tokens if t.type == "fence"]
    assert len(fences) == 1 and fences[0].content.rstrip("\n").split("\n")[-1] == "# injected"


def test_a_command_in_a_tensorboard_settings_cell_stays_one_verbatim_cell():
    command = "torchrun x.py --tag ``a|b`` \r# injected"
    row = f"| {markdown.code_span('command', table=True)} | {markdown.code_span(command, table=True)} |"
    tokens = MarkdownIt("commonmark").enable("table").parse(f"| setting | value |\n|---|---|\n{row}\n")
    assert not _headings(tokens) and [t.type for t in tokens].count("td_open") == 2
    code = [c.content for t in tokens if t.type == "inline" for c in t.children or () if c.type == "code_inline"]
    assert code == ["command", "torchrun x.py --tag ``a|b``  # injected"]


def test_escape_sequences_in_a_name_reach_neither_the_markdown_nor_the_html_report():
    from profile_overlap.render import html

    name = "\x1b]0;owned\x07nccl\x1b[2J\x9b31m"  # a window title, a screen clear, an 8-bit CSI
    for text in (markdown.render(_report(name), figure_png=None), html.render(_report(name), figure_svg=None)):
        assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", text)  # a `cat report.md` in a terminal stays a listing
        assert "nccl" in text
