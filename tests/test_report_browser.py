"""report.html in Debian's Chromium: the page fits a laptop's window (no horizontal scrollbar) and
every section link in its navigation bar can be seen and clicked.

Skipped where /usr/bin/chromium (or $CHROMIUM) is absent: `apt-get install -y chromium`.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import REPO, cli
from test_tb_plugin_browser import CHROMIUM, Browser, Frame

pytestmark = [
    pytest.mark.slow,  # chromium
    pytest.mark.skipif(not shutil.which(CHROMIUM), reason=f"{CHROMIUM} not found: apt-get install -y chromium"),
]


@pytest.fixture(scope="module")
def report_html(tmp_path_factory) -> Path:
    """The golden run's report.html, written once for both widths."""
    run = tmp_path_factory.mktemp("report") / "run"
    shutil.copytree(REPO / "tests" / "golden" / "run", run, ignore=shutil.ignore_patterns("expected"))
    p = cli(["report", str(run)])
    assert p.returncode == 0, p.stderr
    return run / "report.html"


@pytest.mark.parametrize("width", [1300, 900])
def test_the_report_fits_the_window_and_every_section_link_is_on_screen(report_html: Path, width: int) -> None:
    browser = Browser(width=width, height=900)
    try:
        browser.page("Page.navigate", url=report_html.as_uri())
        frame_id = browser.page("Page.getFrameTree")["frameTree"]["frame"]["id"]
        frame = Frame(browser, frame_id)
        frame.wait("document.readyState === 'complete' && document.querySelectorAll('nav a').length > 0")
        overflow = frame.js("document.documentElement.scrollWidth - document.documentElement.clientWidth")
        assert overflow <= 0, f"the page is {overflow} px wider than a {width}-px window"
        links = frame.js("""[...document.querySelectorAll('nav a')].map(a => {
            const r = a.getBoundingClientRect(); return [a.innerText, r.left, r.right]; })""")
        assert len(links) >= 8
        off = [text for text, left, right in links if left < 0 or right > width]
        assert not off, f"section links off screen at {width} px: {off}"
    finally:
        browser.close()
