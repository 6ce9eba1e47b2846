"""The README and docs/ are the user's manual: they must say what the code does, and every link and
every anchor they, the reports and the code point at must land on a heading."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import REPO

DOCS = REPO / "docs"
PAGES = [REPO / "README.md", *sorted(DOCS.glob("*.md"))]


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start : end if end != -1 else None].strip()


def _prose(text: str) -> str:
    """The text outside fenced code blocks and inline code, where Markdown makes links and headings."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    return re.sub(r"`[^`\n]*`", "``", text)


def _headings(path: Path) -> list[str]:
    text = re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.M | re.S)
    return [m.group(1).strip() for m in re.finditer(r"^#{1,6} (.+)$", text, flags=re.M)]


def _plain(heading: str) -> str:
    """A heading as GitHub shows it: inline code and links reduced to their text."""
    return re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")


def _slugs(path: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation but `-` and `_` dropped, spaces to hyphens,
    a repeated anchor suffixed -1, -2, ..."""
    seen: dict[str, int] = {}
    slugs = set()
    for heading in _headings(path):
        slug = re.sub(r"[^\w\- ]", "", _plain(heading).lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        slugs.add(slug if n == 0 else f"{slug}-{n}")
    return slugs


def test_slugs_follow_githubs_rules():
    page = DOCS / "metrics.md"
    assert "over-ranks-spread-worst-and-best-ranks-outliers-analyze-above-8-ranks" in _slugs(page)
    assert "headline-names-report---fail-if" in _slugs(page)
    assert "torchs-engines-ddp-and-fsdp2" in _slugs(DOCS / "run.md")


def test_metrics_page_is_the_shipped_definitions():
    """Reports embed the packaged copy (an installed wheel has no docs/); it must be docs/metrics.md exactly."""
    shipped = (REPO / "profile_overlap" / "render" / "static" / "metric_defs.md").read_text(encoding="utf-8")
    assert (DOCS / "metrics.md").read_text(encoding="utf-8") == shipped, "cp docs/metrics.md profile_overlap/render/static/metric_defs.md"


def test_quickstart_has_the_two_commands_ci_runs():
    block = re.search(r"## Quickstart.*?```bash\n(.*?)```", (REPO / "README.md").read_text(), re.S).group(1)
    commands = block.strip().splitlines()
    assert len(commands) == 2
    assert "torchrun --standalone --nproc-per-node 4 -m profile_overlap --mode compare" in commands[0]
    assert "pytest" in commands[1]


def test_every_command_has_a_row_with_a_link_in_the_readme_and_is_in_the_reference():
    from profile_overlap.cli.main import COMMANDS

    rows = _section((REPO / "README.md").read_text(), "## Commands").splitlines()
    reference = (DOCS / "commands.md").read_text()
    for name in COMMANDS:
        if name == "run":
            continue
        row = [r for r in rows if r.startswith("|") and f"profile_overlap {name}" in r]
        assert len(row) == 1, name
        assert re.search(r"\]\(docs/[\w-]+\.md(#[\w-]+)?\)", row[0]), f"the README's row of {name} links to no page"
        assert f"profile_overlap {name}" in reference, name


def test_every_relative_link_in_the_readme_and_docs_resolves():
    broken = []
    for page in PAGES:
        for target in re.findall(r"\]\(([^)\s]+)\)", _prose(page.read_text(encoding="utf-8"))):
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if not file.exists():
                broken.append(f"{page.relative_to(REPO)}: {target}: no such file")
            elif anchor and (file.suffix != ".md" or anchor not in _slugs(file)):
                broken.append(f"{page.relative_to(REPO)}: {target}: no heading #{anchor} in {file.relative_to(REPO)}")
    assert not broken, "\n".join(broken)


def test_every_page_in_docs_is_linked_from_the_readme():
    readme = (REPO / "README.md").read_text()
    for page in DOCS.glob("*.md"):
        assert f"](docs/{page.name}" in readme, page.name


def test_every_anchor_a_report_links_to_is_a_heading_of_the_metrics_page():
    """report.md links each number to `#<slug of its section>` of the embedded definitions, which are
    docs/metrics.md: every such section must be a heading there, under the same anchor."""
    from profile_overlap.render.document import definitions
    from profile_overlap.render.markdown import slug

    slugs = _slugs(DOCS / "metrics.md")
    titles = set(definitions().sections.values())
    assert len(titles) > 20
    for title in titles:
        assert slug(title.replace("`", "")) in slugs, title
    report = (REPO / "tests" / "golden" / "run" / "expected" / "report.md").read_text(encoding="utf-8")
    own = {re.sub(r"[^\w\- ]", "", _plain(h).lower()).replace(" ", "-") for h in re.findall(r"^## (.+)$", report, flags=re.M)}
    links = set(re.findall(r"\]\(#([\w-]+)\)", report))
    assert links and links - own <= slugs, sorted(links - own - slugs)
    assert "docs/metrics.md" in report


def test_every_docs_reference_in_the_code_names_a_page_and_heading_that_exist():
    """Docstrings, comments and console text cite the manual as `docs/PAGE.md "Heading"` (a heading's
    start, e.g. "Over ranks") or `docs/PAGE.md#anchor`; and none cites the README, which is no reference."""
    code = [p for p in (REPO / "profile_overlap").rglob("*") if p.suffix in (".py", ".js", ".html", ".md")]
    cited, broken, readme = 0, [], []
    for path in code:
        text = path.read_text(encoding="utf-8")
        where = path.relative_to(REPO)
        for m in re.finditer(r"docs/([\w-]+\.md)(?:#([\w-]+))?(?:,? \(?\"([^\"]+)\")?", text):
            cited += 1
            page, anchor, title = DOCS / m.group(1), m.group(2), m.group(3)
            if not page.exists():
                broken.append(f"{where}: {m.group(0)}: no such page")
            elif anchor and anchor not in _slugs(page):
                broken.append(f"{where}: {m.group(0)}: no such anchor")
            elif title and not any(_plain(h).startswith(title) for h in _headings(page)):
                broken.append(f"{where}: {m.group(0)}: no heading starts so")
        readme += [f"{where}: {line.strip()}" for line in text.splitlines() if re.search(r"(?<!benchmarks/)README", line)]
    assert cited > 20
    assert not broken, "\n".join(broken)
    assert not readme, "cite docs/PAGE.md instead:\n" + "\n".join(readme)
