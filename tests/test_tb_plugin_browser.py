"""The Overlap tab in Debian's Chromium, driven over the DevTools protocol (the stdlib and
`--remote-debugging-pipe`: no browser download, no extra package). Every request outside the
loopback server goes to a dead proxy, and the test fails if the page makes one, or logs an error.

Skipped where /usr/bin/chromium (or $CHROMIUM) is absent: `apt-get install -y chromium`.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from profile_overlap.analysis.folder import analyze_dir
from profile_overlap.analysis.record import folder_metrics, timeline_of
from profile_overlap.tb_plugin.export import FOREIGN_MODE, write_plugin_data

from conftest import DATA
from test_tb_plugin import serve_tensorboard, tb_logdir, tensorboard  # noqa: F401  (shared session fixtures)

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
pytestmark = [
    pytest.mark.slow,  # tensorboard and chromium
    pytest.mark.skipif(not shutil.which(CHROMIUM), reason=f"{CHROMIUM} not found: apt-get install -y chromium"),
]
MODES = ["sequential", "split", "split-blocking"]
"""The modes of the shared compare run, in the tab's order."""
COLORS = {"compute": (0x4E, 0x79, 0xA7), "comm": (0xF2, 0x8E, 0x2B), "overlap": (0x59, 0xA1, 0x4F)}
"""The lane colours of static/timeline.js."""


class Browser:
    """Headless Chromium; DevTools messages are NUL-terminated JSON on fds 3 (in) and 4 (out)."""

    def __init__(self, *, width: int = 1400, height: int = 1400) -> None:
        self.profile = tempfile.mkdtemp(prefix="po-chromium-")
        cmd_r, cmd_w = os.pipe()
        ev_r, ev_w = os.pipe()

        def as_fds_3_and_4() -> None:
            a, b = os.dup(cmd_r), os.dup(ev_w)  # dup first: either may already be 3 or 4
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(
            [
                CHROMIUM,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--remote-debugging-pipe",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                # Loopback bypasses the proxy; anything else would go to a port where nothing listens.
                "--proxy-server=http://127.0.0.1:9",
                f"--user-data-dir={self.profile}",
                f"--window-size={width},{height}",
                "about:blank",
            ],
            pass_fds=(3, 4),
            preexec_fn=as_fds_3_and_4,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(cmd_r)
        os.close(ev_w)
        self.out, self.inp = cmd_w, ev_r
        self.buf = b""
        self.next_id = 0
        self.events: list[dict] = []
        page = next(t for t in self.send("Target.getTargets")["targetInfos"] if t["type"] == "page")
        self.session = self.send("Target.attachToTarget", targetId=page["targetId"], flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Network", "Log", "DOM"):
            self.send(f"{domain}.enable", self.session)
        self.send("Emulation.setDeviceMetricsOverride", self.session, width=width, height=height, deviceScaleFactor=1, mobile=False)

    def send(self, method: str, session: str | None = None, **params) -> dict:
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        os.write(self.out, json.dumps(msg).encode() + b"\0")
        while True:
            while b"\0" not in self.buf:
                chunk = os.read(self.inp, 1 << 16)
                assert chunk, "chromium closed the DevTools pipe"
                self.buf += chunk
            raw, self.buf = self.buf.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == self.next_id:
                assert "error" not in reply, f"{method}: {reply['error']}"
                return reply["result"]
            self.events.append(reply)

    def page(self, method: str, **params) -> dict:
        return self.send(method, self.session, **params)

    def close(self) -> None:
        try:
            self.send("Browser.close")
            self.proc.wait(timeout=15)
        except Exception:
            self.proc.kill()
        shutil.rmtree(self.profile, ignore_errors=True)


class Frame:
    """JavaScript in one frame (an isolated world: same DOM, none of the page's globals)."""

    def __init__(self, browser: Browser, frame_id: str) -> None:
        self.browser, self.frame_id = browser, frame_id
        self.context = browser.page("Page.createIsolatedWorld", frameId=frame_id)["executionContextId"]

    def js(self, expression: str):
        reply = self.browser.page("Runtime.evaluate", expression=expression, contextId=self.context, returnByValue=True)
        assert "exceptionDetails" not in reply, reply["exceptionDetails"]
        return reply["result"].get("value")

    def wait(self, expression: str, *, timeout_s: float = 90):
        deadline = time.monotonic() + timeout_s
        while not (value := self.js(expression)):
            assert time.monotonic() < deadline, f"timed out waiting for {expression}"
            time.sleep(0.2)
        return value


def plugin_frame(browser: Browser, *, timeout_s: float = 120) -> Frame:
    """The tab's iframe (plugin_entry.html) once its module has rendered a run."""
    deadline = time.monotonic() + timeout_s
    while True:
        children = browser.page("Page.getFrameTree")["frameTree"].get("childFrames", [])
        found = [c["frame"]["id"] for c in children if "plugin_entry.html" in c["frame"]["url"]]
        if found:
            frame = Frame(browser, found[0])
            state = frame.js("document.body && document.body.dataset.ready")
            assert state != "error", frame.js("document.body.innerText")
            if state == "true":
                return frame
        assert time.monotonic() < deadline, "the Overlap tab did not render"
        time.sleep(0.3)


def lane_pixels(frame: Frame, mode: str) -> dict[str, int]:
    """How many canvas pixels of the mode's timeline have each lane colour."""
    data = frame.js(f"""(() => {{
        const c = document.querySelector('canvas[data-mode="{mode}"]');
        return Array.from(c.getContext('2d').getImageData(0, 0, c.width, c.height).data); }})()""")
    counts = dict.fromkeys(COLORS, 0)
    by_rgb = {rgb: name for name, rgb in COLORS.items()}
    for i in range(0, len(data), 4):
        name = by_rgb.get((data[i], data[i + 1], data[i + 2]))
        if name:
            counts[name] += 1
    return counts


@pytest.fixture()
def browser():
    b = Browser()
    yield b
    b.close()


def test_overlap_tab_renders_offline_with_the_records_numbers(browser, tensorboard, tb_logdir, tmp_path):  # noqa: F811
    metrics = json.loads((tb_logdir / "compare" / "metrics.json").read_text())
    browser.page("Page.navigate", url=f"{tensorboard}/#{'profile_overlap'}")
    frame = plugin_frame(browser)
    assert frame.js("document.getElementById('po-run').selectedOptions[0].text").startswith("compare")
    assert frame.js("document.getElementById('po-view').value") == "all"

    # Every mode's timeline, stacked, drawn with compute and comm; split also overlaps.
    assert frame.js("[...document.querySelectorAll('canvas[data-mode]')].map(c => c.dataset.mode)") == MODES
    for mode in MODES:
        pixels = lane_pixels(frame, mode)
        assert pixels["compute"] > 100 and pixels["comm"] > 100, (mode, pixels)
    assert lane_pixels(frame, "split")["overlap"] > 20
    assert lane_pixels(frame, "sequential")["overlap"] == 0  # sequential overlap_us is 0 on both ranks

    # The rank table shows the record's numbers (formatted with thousands separators only).
    rows = frame.js("""[...document.querySelectorAll('table')].filter(t => t.tHead.innerText.includes('wait_us'))
        .flatMap(t => [...t.tBodies[0].rows].map(r => [...r.cells].map(c => c.innerText)))""")
    for mode in MODES:
        for rec in metrics["modes"][mode]["analysis"]["ranks"]:
            row = next(r for r in rows if r[0] == mode and r[1].split()[0] == str(rec["rank"]))
            shown = [float(x.replace(",", "")) for x in row[2:9]]
            assert shown == [
                rec[k] for k in ("comm_us", "compute_us", "overlap_us", "exposed_comm_us", "overlap_pct", "wait_us", "transfer_us")
            ]
    assert frame.js("[...document.querySelectorAll('tr.po-slow')].map(r => r.cells[0].innerText + ' ' + r.cells[1].innerText)") == [
        f"{mode} {min(metrics['modes'][mode]['analysis']['ranks'], key=lambda r: r['wait_us'])['rank']} ◆" for mode in MODES
    ]
    # Per-step and per-collective tables, and the explain panel for 2 ranks.
    text = frame.js("document.body.innerText")
    num_steps = sum(len(r["steps"]) for m in MODES for r in metrics["modes"][m]["analysis"]["ranks"])
    assert (
        frame.js(
            "[...document.querySelectorAll('table')].filter(t => t.tHead.innerText.includes('step_us'))"
            ".reduce((n, t) => n + t.tBodies[0].rows.length, 0)"
        )
        == num_steps
    )
    assert "reduce_scatter" in text and "busbw GB/s" in text
    assert "with this run's 2 ranks" in text and "[4, 6]" in text  # ranks hold [1, 2] and [3, 4]
    # The integrity panel: a line per mode when every check is ok, else the checks that are not.
    for mode in MODES:
        checks = metrics["modes"][mode]["analysis"]["integrity"]["checks"]
        bad = [c for c in checks if c["status"] != "ok"]
        assert (f"{mode}: {len(bad)} of {len(checks)} checks not ok" if bad else f"{mode}: all {len(checks)} integrity checks ok") in text
        assert all(c["detail"] in text for c in bad)

    # Hover over split's comm lane of rank 0 (in page coordinates: the iframe's box plus the
    # canvas's box inside it) until a tooltip with the collective's bandwidth shows.
    owner = browser.page("DOM.getFrameOwner", frameId=frame.frame_id)["backendNodeId"]
    ix, iy = browser.page("DOM.getBoxModel", backendNodeId=owner)["model"]["content"][:2]
    cx, cy, cw = frame.js("""(() => { const r = document.querySelector('canvas[data-mode="split"]').getBoundingClientRect();
        return [r.x, r.y, r.width]; })()""")
    y = iy + cy + 22 + 12 + 2 + 14 * 1.5  # axis, rank 0's phase band (12 px) and gap, its compute lane (14 px), its comm lane
    tips = []
    for i in range(80):
        x = ix + cx + 70 + i * (cw - 80) / 80
        browser.page("Input.dispatchMouseEvent", type="mouseMoved", x=x, y=y)
        tip = frame.js("(t => t.style.display === 'block' ? t.innerText : '')(document.querySelectorAll('.po-tip')[1])")
        if tip:
            tips.append(tip)
            if "busbw" in tip:
                break
    assert tips and "busbw" in tips[-1] and "rank 0 · comm" in tips[-1], tips

    # Wheel zoom narrows the view; the note says what was drawn.
    before = int(frame.js("document.querySelectorAll('.po-panel')[1].dataset.spansInView"))
    for _ in range(6):
        browser.page("Input.dispatchMouseEvent", type="mouseWheel", x=ix + cx + cw / 2, y=y, deltaX=0, deltaY=-400)
    after = int(
        frame.wait(f"(p => p.dataset.spansInView !== String({before}) && p.dataset.spansInView)(document.querySelectorAll('.po-panel')[1])")
    )
    assert after < before
    assert "spans in view" in frame.js("document.querySelectorAll('.po-note')[1].innerText")

    shot = tmp_path / "overlap_tab.png"
    shot.write_bytes(base64.b64decode(browser.page("Page.captureScreenshot", format="png")["data"]))
    print(f"screenshot: {shot}")

    requests = [e["params"]["request"]["url"] for e in browser.events if e.get("method") == "Network.requestWillBeSent"]
    assert any("/data/plugin/profile_overlap/timeline" in u for u in requests)
    outside = [u for u in requests if not u.startswith((tensorboard + "/", "data:", "blob:", "about:"))]
    assert outside == [], f"requests outside the TensorBoard server: {outside}"
    errors = [
        e["params"]
        for e in browser.events
        if e.get("method") == "Runtime.exceptionThrown"
        or (e.get("method") == "Runtime.consoleAPICalled" and e["params"]["type"] == "error")
        or (e.get("method") == "Log.entryAdded" and e["params"]["entry"]["level"] == "error")
    ]
    assert errors == [], f"console errors: {json.dumps(errors)[:2000]}"


EXPOSED_COLORS = {"wait": (0xC0, 0x39, 0x2B), "transfer": (0x7B, 0x3F, 0x00)}
"""The exposed shades of static/exposed.js."""


def test_overlap_tab_shades_exposed_time_and_zooms_to_a_top_call(browser, tensorboard, tb_logdir, tmp_path):  # noqa: F811
    metrics = json.loads((tb_logdir / "compare" / "metrics.json").read_text())
    browser.page("Page.navigate", url=f"{tensorboard}/#{'profile_overlap'}")
    frame = plugin_frame(browser)
    shades = {}
    for mode in MODES:
        data = frame.js(f"""(() => {{
            const c = document.querySelector('canvas[data-mode="{mode}"]');
            return Array.from(c.getContext('2d').getImageData(0, 0, c.width, c.height).data); }})()""")
        rgb = [(data[i], data[i + 1], data[i + 2]) for i in range(0, len(data), 4)]
        shades[mode] = {name: rgb.count(colour) for name, colour in EXPOSED_COLORS.items()}
        panel = f"document.querySelector('canvas[data-mode=\"{mode}\"]').closest('.po-panel')"
        assert int(frame.js(f"{panel}.dataset.exposedPieces")) > 0
        # The top calls table is the record's, row for row.
        shown = frame.js(f"[...{panel}.querySelectorAll('.po-calls tbody tr')].map(r => r.cells[0].innerText)")
        top = metrics["modes"][mode]["analysis"]["exposed"]["top"]
        assert shown == [f"{c['kind']} #{c['call']} in {c['phase']}" for c in top]
    # split-blocking exposes all of its communication: its transfer is drawn.
    assert shades["split-blocking"]["transfer"] > 20, shades
    assert sum(s["wait"] for s in shades.values()) > 0, shades

    # A row zooms its panel to that call: fewer spans in view, and the call's time on screen.
    panel = "document.querySelector('canvas[data-mode=\"sequential\"]').closest('.po-panel')"
    before = int(frame.js(f"{panel}.dataset.spansInView"))
    frame.js(f"{panel}.querySelector('.po-calls tr.po-zoomable').click()")
    frame.wait(f"+{panel}.dataset.spansInView < {before}")
    shot = browser.page("Page.captureScreenshot", format="png")
    (tmp_path / "exposed.png").write_bytes(base64.b64decode(shot["data"]))
    errors = [e for e in browser.events if e.get("method") == "Runtime.exceptionThrown"]
    assert not errors, errors


def test_the_heatmap_of_every_mode_draws_and_hover_names_the_rank_time_and_what_ran(browser, tensorboard):  # noqa: F811
    browser.page("Page.navigate", url=f"{tensorboard}/#{'profile_overlap'}")
    frame = plugin_frame(browser)
    assert frame.js("[...document.querySelectorAll('.po-heatmap')].map(s => s.dataset.mode)") == MODES
    # Drawn: some pixels are not white (compute at least), on a canvas of one pixel per rank and bin.
    drawn = frame.js("""(() => { const c = document.querySelector('.po-heatmap[data-mode="split"] canvas.po-heat');
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        let n = 0; for (let i = 0; i < d.length; i += 4) if (d[i] < 250 || d[i + 2] < 250) n++;
        return [c.height, n]; })()""")
    assert drawn[0] == 2 and drawn[1] > 20
    tip = frame.js("""(() => { const s = document.querySelector('.po-heatmap[data-mode="split"]');
        const c = s.querySelector('canvas.po-heat'); const b = c.getBoundingClientRect();
        c.dispatchEvent(new MouseEvent('mousemove', {clientX: b.left + b.width / 2, clientY: b.top + b.height * 0.75, bubbles: true}));
        return s.querySelector('.po-heat-tip').textContent; })()""")
    assert tip.startswith("rank 1, ") and "exposed wait" in tip and "compute" in tip and " ms (" in tip
    # The toggle repaints with calls in flight: purple appears (a collective is in flight on some bin).
    purple = """(() => { const c = document.querySelector('.po-heatmap[data-mode="split"] canvas.po-heat');
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        let n = 0; for (let i = 0; i < d.length; i += 4) if (d[i] === 115 && d[i + 1] === 51 && d[i + 2] === 153) n++;
        return n; })()"""
    before = frame.js(purple)
    frame.js("""(() => { const t = document.querySelector('.po-heatmap[data-mode="split"] select');
        t.value = 'flight'; t.dispatchEvent(new Event('change')); })()""")
    assert before == 0 and frame.js(purple) > 0


HOSTILE = "gloo:<img src=x onerror=document.title='pwned'>"
"""A gloo event name of a hostile trace: live markup wherever a page inserts it as HTML."""


@pytest.fixture(scope="module")
def hostile_logdir(tmp_path_factory) -> Path:
    """logdir/hostile: `analyze --tensorboard` of the checked-in gloo traces with their all_reduce
    renamed HOSTILE (the gloo event, and the range around it; its c10d op dropped, so the kind is the
    event's name), and logdir/broken: a run whose metrics.json nests deeper than msgspec decodes."""
    root = tmp_path_factory.mktemp("hostile")
    traces = root / "traces"
    traces.mkdir()
    for path in (DATA / "gloo_2rank").glob("*.pt.trace.json.gz"):
        trace = json.loads(gzip.decompress(path.read_bytes()))
        events = [e for e in trace["traceEvents"] if e.get("name") != "c10d::allreduce_"]
        for e in events:
            if e.get("name") in ("gloo:all_reduce", "sequential/all_reduce"):
                e["name"] = HOSTILE
        trace["traceEvents"] = events
        (traces / path.name).write_bytes(gzip.compress(json.dumps(trace).encode()))
    logdir = root / "logdir"
    analysis = analyze_dir(traces)
    write_plugin_data(logdir / "hostile", folder_metrics(analysis, out_dir=str(logdir / "hostile")), timeline_of({FOREIGN_MODE: analysis}))
    kinds = {
        c["kind"]
        for r in json.loads((logdir / "hostile" / "metrics.json").read_text())["modes"]["trace"]["analysis"]["ranks"]
        for c in r["collectives"]
    }
    assert HOSTILE in kinds, kinds
    (logdir / "broken").mkdir()
    (logdir / "broken" / "metrics.json").write_text('{"schema_version": 1, "x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    return logdir


@pytest.fixture(scope="module")
def hostile_tensorboard(hostile_logdir):
    yield from serve_tensorboard(hostile_logdir)


def test_a_hostile_event_name_shows_as_text_in_the_tooltip_and_a_broken_run_is_listed(browser, hostile_tensorboard):
    browser.page("Page.navigate", url=f"{hostile_tensorboard}/#{'profile_overlap'}")
    frame = plugin_frame(browser)
    # The broken run is listed with its one-line reason; the hostile one renders.
    assert frame.js("[...document.querySelectorAll('#po-broken li')].map(li => li.dataset.run)") == ["broken"]
    assert "nests deeper than any metrics record" in frame.js("document.querySelector('#po-broken li').innerText")
    assert frame.js("[...document.getElementById('po-run').options].map(o => o.text)") == ["hostile"]
    # Hover every lane position of the panel until a tooltip names the hostile collective.
    tip = frame.js(f"""(() => {{
        const c = document.querySelector('canvas[data-mode="trace"]'), tip = c.parentNode.querySelector('.po-tip');
        const box = c.getBoundingClientRect();
        for (let y = 22; y < box.height; y += 2) for (let x = 70; x < box.width; x += 3) {{
            c.dispatchEvent(new MouseEvent('mousemove', {{clientX: box.left + x, clientY: box.top + y, bubbles: true}}));
            if (tip.style.display === 'block' && tip.textContent.includes({json.dumps(HOSTILE)}) && tip.textContent.includes('all ')) {{
                return {{text: tip.innerText, elements: [...tip.querySelectorAll('*')].map(e => e.tagName)}};
            }}
        }}
        return null; }})()""")
    assert tip is not None, "no tooltip named the hostile collective"
    # The label (the tooltip's title) and the collective's kind both show literally, as text.
    assert tip["text"].startswith(HOSTILE + "\n") and f"{HOSTILE} on rank " in tip["text"], tip
    assert "IMG" not in tip["elements"] and set(tip["elements"]) <= {"B", "DIV"}, tip
    assert frame.js("document.querySelectorAll('img').length") == 0
    assert frame.js("document.title") != "pwned"


@pytest.fixture(scope="module")
def gloo_tensorboard(tmp_path_factory):
    """`analyze --tensorboard` of the checked-in gloo traces, where the durations name rank 1 as the
    rank the others wait for and the aligned clock names rank 0 (tests/test_durations_and_arrivals.py)."""
    logdir = tmp_path_factory.mktemp("gloo") / "logdir"
    analysis = analyze_dir(DATA / "gloo_2rank")
    assert (analysis.slowest_rank, analysis.clock_slowest_rank) == (1, 0)
    write_plugin_data(logdir / "gloo", folder_metrics(analysis, out_dir=str(logdir / "gloo")), timeline_of({FOREIGN_MODE: analysis}))
    yield from serve_tensorboard(logdir)


def test_where_the_durations_and_the_clock_name_different_ranks_the_tab_says_so(browser, gloo_tensorboard):
    browser.page("Page.navigate", url=f"{gloo_tensorboard}/#{'profile_overlap'}")
    frame = plugin_frame(browser)
    words = " ".join(frame.js("document.body.innerText").split())
    assert (
        "trace: rank 1 waits least by duration, but on the aligned clock rank 0 started last at 100% of its matched calls "
        "(rank 1 at 0%)" in words
    ), words
    assert frame.js("[...document.querySelectorAll('tr.po-slow')].map(r => r.cells[1].innerText)") == ["1 ◆"]
    note = frame.js("document.querySelector('canvas[data-mode=\"trace\"]').closest('.po-panel').querySelector('.po-note').innerText")
    assert "◆ marks the rank that waits least by duration; the aligned clock names rank 0 (the two disagree)." in note, note
