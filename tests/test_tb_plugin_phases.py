"""The step's phases in the Overlap tab: the timeline route serves each rank's phase windows, and
the tab draws them as a band above each rank's lanes, with a legend, a tooltip and a per-phase
table (in headless Chromium, as test_tb_plugin_browser); foreign traces without phase labels get
no band."""

from __future__ import annotations

import base64
import json
import shutil
import time

import pytest

from test_tb_plugin import ROUTES, get_json, tb_logdir, tensorboard  # noqa: F401  (shared session fixtures)
from test_tb_plugin_browser import CHROMIUM, Browser, Frame, plugin_frame

pytestmark = pytest.mark.slow  # reads the shared compare run

PHASE_COLORS = {"forward": (0x99, 0xDD, 0xFF), "backward": (0xFB, 0xB4, 0xAE), "optimizer": (0xBB, 0xCC, 0x33)}
"""The band colours of static/common.js (and render/timeline.py)."""
LABEL_W, AXIS_H, BAND_H = 64, 22, 12
"""static/timeline.js geometry at up to 4 ranks: rank names, the time axis, the phase band."""


def test_timeline_route_serves_phase_windows(tensorboard, tb_logdir):  # noqa: F811
    record = json.loads((tb_logdir / "compare" / "timeline.json").read_text())
    assert "phases are [step, phase, start_us, end_us]" in record["schema"]
    for mode in ("sequential", "split", "split-blocking"):
        for max_spans in ("", "&max_spans=16"):
            reply = get_json(tensorboard + f"{ROUTES}/timeline?run=compare&mode={mode}{max_spans}")
            for served, original in zip(reply["ranks"], record["modes"][mode]["ranks"]):
                # Served as in the file, merged or not (the server merges spans only).
                assert served["phases"] == original["phases"]
                steps = {s["step"] for s in original["steps"]}
                assert {(st, name) for st, name, *_ in served["phases"]} == {
                    (st, name) for st in steps for name in ("forward", "backward", "optimizer")
                }
                assert all(a < b for *_, a, b in served["phases"])
    # Foreign traces without forward/backward/optimizer labels: no windows.
    foreign = get_json(tensorboard + f"{ROUTES}/timeline?run=foreign/overlap&mode=trace")
    assert [r["phases"] for r in foreign["ranks"]] == [[], []]


def phase_pixels(frame: Frame, mode: str) -> dict[str, int]:
    data = frame.js(f"""(() => {{
        const c = document.querySelector('canvas[data-mode="{mode}"]');
        return Array.from(c.getContext('2d').getImageData(0, 0, c.width, c.height).data); }})()""")
    by_rgb = {rgb: name for name, rgb in PHASE_COLORS.items()}
    counts = dict.fromkeys(PHASE_COLORS, 0)
    for i in range(0, len(data), 4):
        name = by_rgb.get((data[i], data[i + 1], data[i + 2]))
        if name:
            counts[name] += 1
    return counts


def choose(frame: Frame, select: str, value: str) -> None:
    """Pick an option as a user would (the change event reaches the page's handler)."""
    frame.js(f"(s => {{ s.value = {json.dumps(value)}; s.dispatchEvent(new Event('change')); }})(document.getElementById('{select}'))")
    time.sleep(0.2)
    frame.wait("document.body.dataset.ready === 'true'")


@pytest.mark.skipif(not shutil.which(CHROMIUM), reason=f"{CHROMIUM} not found: apt-get install -y chromium")
def test_overlap_tab_draws_the_phase_band_of_split(tensorboard, tb_logdir, tmp_path):  # noqa: F811
    metrics = json.loads((tb_logdir / "compare" / "metrics.json").read_text())
    record = json.loads((tb_logdir / "compare" / "timeline.json").read_text())["modes"]["split"]["ranks"]
    browser = Browser()
    try:
        browser.page("Page.navigate", url=f"{tensorboard}/#profile_overlap")
        frame = plugin_frame(browser)
        choose(frame, "po-view", "split")
        assert frame.js("[...document.querySelectorAll('canvas')].map(c => c.dataset.mode)") == ["split"]

        # The band: every phase window of the file drawn, in the three colours, with a legend.
        assert int(frame.js("document.querySelector('.po-panel').dataset.phaseWindows")) == sum(len(r["phases"]) for r in record)
        pixels = phase_pixels(frame, "split")
        assert all(n > 200 for n in pixels.values()), pixels
        legend = frame.js("document.querySelector('.po-legend').innerText")
        assert all(f"{p} phase" in legend for p in PHASE_COLORS), legend

        # Hover over rank 0's band in the middle of its first backward window: the tooltip names
        # the phase and gives the record's numbers for it.
        owner = browser.page("DOM.getFrameOwner", frameId=frame.frame_id)["backendNodeId"]
        ix, iy = browser.page("DOM.getBoxModel", backendNodeId=owner)["model"]["content"][:2]
        cx, cy, cw = frame.js("""(() => { const r = document.querySelector('canvas[data-mode="split"]').getBoundingClientRect();
            return [r.x, r.y, r.width]; })()""")
        t0 = min(min(s["start_us"] for s in r["steps"]) for r in record)
        t0 = min(t0, *(sp[1] for r in record for sp in r["spans"]))
        t1 = max(max(s["start_us"] + s["step_us"] for s in r["steps"]) for r in record)
        t1 = max(t1, *(sp[2] for r in record for sp in r["spans"]))
        step, _, a, b = next(w for w in record[0]["phases"] if w[1] == "backward")
        x = ix + cx + LABEL_W + ((a + b) / 2 - t0) / (t1 - t0) * (cw - LABEL_W - 8)
        browser.page("Input.dispatchMouseEvent", type="mouseMoved", x=x, y=iy + cy + AXIS_H + BAND_H / 2)
        tip = frame.wait("(t => t.style.display === 'block' && t.innerText)(document.querySelector('.po-tip'))")
        steps = metrics["modes"]["split"]["analysis"]["ranks"][0]["steps"]
        rec = next(p for s in steps if s["step"] == step for p in s["phases"] if p["phase"] == "backward")
        assert tip.startswith("backward phase") and f"rank 0 · step {step}" in tip and "hidden behind compute" in tip, tip
        assert f"{rec['overlap_us'] / 1000:.3f} ms" in tip or f"{rec['overlap_us']:.1f} µs" in tip, (tip, rec)

        # The per-phase table: each rank's hidden (overlap_us) and exposed communication per phase.
        rows = frame.js("""[...document.querySelector('table[data-phases="split ranks"]').tBodies[0].rows]
            .map(r => [...r.cells].map(c => c.innerText.trim()))""")
        expected = [(r["rank"], p) for r in metrics["modes"]["split"]["analysis"]["ranks"] for p in r["phases"]]
        assert len(rows) == len(expected) == 2 * 3
        for row, (rank, p) in zip(rows, expected):
            assert row[:3] == ["split", str(rank), p["phase"]]
            assert [float(x.replace(",", "")) for x in row[6:8]] == [p["overlap_us"], p["exposed_comm_us"]]
        summary = (metrics.get("summary") or {}).get("modes", {}).get("split", {}).get("phases")
        if summary:  # the record summary's per-phase numbers, where the record has them
            shown = frame.js("""[...document.querySelector('table[data-phases="split summary"]').tBodies[0].rows]
                .map(r => [r.cells[1].innerText.trim(), r.cells[5].innerText, r.cells[6].innerText])""")
            assert shown == [[p["phase"], f"{p['hidden_ms']:.3f}", f"{p['exposed_comm_ms']:.3f}"] for p in summary]

        shot = tmp_path / "overlap_tab_phases.png"
        shot.write_bytes(base64.b64decode(browser.page("Page.captureScreenshot", format="png")["data"]))
        print(f"screenshot: {shot}")

        # Foreign traces have no phase labels: no band, no legend entry, no per-phase table.
        runs = frame.js("[...document.getElementById('po-run').options].map(o => o.text)")
        choose(frame, "po-run", str(next(i for i, text in enumerate(runs) if text.startswith("foreign"))))
        assert frame.js("[...document.querySelectorAll('canvas')].map(c => c.dataset.mode)") == ["trace"]
        assert phase_pixels(frame, "trace") == dict.fromkeys(PHASE_COLORS, 0)
        assert "phase" not in frame.js("document.querySelector('.po-legend').innerText")
        assert not frame.js("document.querySelector('table[data-phases]')")
        assert "null" not in frame.js("document.querySelector('main').innerText.split('\\n')")

        errors = [
            e["params"]
            for e in browser.events
            if e.get("method") == "Runtime.exceptionThrown"
            or (e.get("method") == "Runtime.consoleAPICalled" and e["params"]["type"] == "error")
            or (e.get("method") == "Log.entryAdded" and e["params"]["entry"]["level"] == "error")
        ]
        assert errors == [], f"console errors: {json.dumps(errors)[:2000]}"
    finally:
        browser.close()
