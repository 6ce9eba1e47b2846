"""The 1,024-rank case (benchmarks/many_ranks.py: a late rank, a slow node of 8 ranks, an optimizer
band): analyze's time and console lines, the sizes of timeline.json, metrics.json and report.html,
the heatmap PNG, and how long the Overlap tab takes to load in headless Chromium.

    python benchmarks/bench_scale.py [--ranks 1024] [--out /tmp/scale]   # figures as JSON on stdout

The tab's load time runs from navigation to the tab's `data-ready` (its metrics, timeline and
heatmap drawn), with TensorBoard already answering and the run's replies not yet cached; the
frame's time is the tab's own part of it (its iframe's start to drawn), without TensorBoard's page.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "benchmarks")]

from many_ranks import planted, write  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", type=int, default=1024)
    p.add_argument("--out", type=Path, default=Path("/tmp/po-scale"))
    p.add_argument("--no-browser", action="store_true")
    a = p.parse_args()
    traces, logdir = a.out / "traces", a.out / "logdir"
    if not traces.is_dir():
        write(traces, a.ranks)
    tb = logdir / "scale"
    figures: dict = {"ranks": a.ranks, "late_rank": planted(a.ranks)[0], "slow_node": planted(a.ranks)[1]}
    figures["traces_mb"] = round(sum(f.stat().st_size for f in traces.iterdir()) / 1e6, 1)
    t = time.perf_counter()
    run = subprocess.run(
        [sys.executable, "-m", "profile_overlap", "analyze", str(traces), "--json", str(a.out / "a.json"), "--tensorboard", str(tb)],
        capture_output=True, text=True, check=True, env={"COLUMNS": "160", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    figures["analyze_s"] = round(time.perf_counter() - t, 2)
    figures["console_lines"] = len(run.stdout.splitlines())
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "profile_overlap", "report", str(tb), "--format", "html", "--out", str(a.out)], check=True,
                   capture_output=True, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)})  # fmt: skip
    figures["report_s"] = round(time.perf_counter() - t, 2)
    for name, path in (
        ("timeline_json", tb / "timeline.json"),
        ("metrics_json", tb / "metrics.json"),
        ("report_html", a.out / "report.html"),
    ):
        figures[f"{name}_mb"] = round(path.stat().st_size / 1e6, 2)
    if not a.no_browser:
        figures["tab_load_s"], figures["tab_frame_s"] = tab_load_s(logdir, a.out / "tab.png")
    print(json.dumps(figures, indent=1))


def tab_load_s(logdir: Path, screenshot: Path) -> tuple[float, float]:
    """(navigation to drawn, TensorBoard's own page included; the tab's frame alone: its start to drawn)."""
    import base64

    from test_tb_plugin import serve_tensorboard
    from test_tb_plugin_browser import Browser, plugin_frame

    server = serve_tensorboard(logdir)
    base = next(server)
    browser = Browser(width=1400, height=1600)
    try:
        t = time.perf_counter()
        browser.page("Page.navigate", url=f"{base}/#profile_overlap")
        frame = plugin_frame(browser)
        seconds = time.perf_counter() - t
        frame_s = int(frame.js("document.body.dataset.readyMs")) / 1e3
        frame.js("document.querySelector('.po-heatmap').scrollIntoView()")
        time.sleep(0.5)
        shot = browser.page("Page.captureScreenshot", format="png")
        screenshot.write_bytes(base64.b64decode(shot["data"]))
    finally:
        browser.close()
        server.close()
    return round(seconds, 2), round(frame_s, 2)


if __name__ == "__main__":
    main()
