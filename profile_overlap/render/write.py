"""Writing a run's report files (report.html, report.md with timeline.png, report.json) and the
comparison of two runs."""

from __future__ import annotations

import re
from functools import partial
from pathlib import Path

import msgspec

from profile_overlap.core.files import REPORT_HTML, REPORT_JSON, REPORT_MD, TIMELINE_PNG
from profile_overlap.core.io import ensure_writable_dir, replace_atomically, write_bytes_atomic, write_json_atomic, write_text_atomic
from profile_overlap.record.analysis import builtin
from profile_overlap.record.folder import Run, load_run
from profile_overlap.record.metrics import RunMetrics
from profile_overlap.record.timeline import Timeline
from profile_overlap.render.compare import build_compare, compare_record
from profile_overlap.render.document import Picture
from profile_overlap.render.report import build

FORMATS = ("html", "md", "json")


def write(
    run_dir: Path,
    metrics: RunMetrics | None = None,
    *,
    timeline: Timeline | None = None,
    out: Path | None = None,
    formats: tuple[str, ...] = FORMATS,
) -> list[Path]:
    """Write report.html / report.md (+ timeline.png) / report.json for one run. At the end of a
    run, `outputs.render_all` passes the metrics and timeline it holds (nothing is read back; its
    status.json still says running then); without them, the run folder is read (load_run)."""
    run = load_run(Path(run_dir)) if metrics is None else Run(dir=Path(run_dir), metrics=metrics, timeline=timeline, status=None)
    return write_run(run, out=out, formats=formats)


def write_run(run: Run, *, out: Path | None = None, formats: tuple[str, ...] = FORMATS) -> list[Path]:
    """The report files of a run already read (`report RUN_DIR` gates on the same record)."""
    out = Path(out) if out else run.dir
    ensure_writable_dir(out)
    report = build(run)
    svg, png = _drawn(run, formats)
    return write_files(report, run.metrics, svg, png, out=out, formats=formats)


def write_files(report, metrics: RunMetrics, svg: str | None, png: bytes | None, *, out: Path, formats: tuple[str, ...]) -> list[Path]:
    """A built report's files in `out`: report.html (the timeline as SVG), report.md (+ timeline.png)
    and report.json (the record). Shared by runs and by profiled jobs."""
    written = []
    if "html" in formats:
        from profile_overlap.render import html as report_html

        written.append(write_text_atomic(out / REPORT_HTML, report_html.render(report, figure_svg=svg)))
    if "md" in formats:
        from profile_overlap.render import markdown as report_md

        if png is not None:
            written.append(replace_atomically(out / TIMELINE_PNG, partial(_write_bytes, data=png)))
        for picture in (b for section in report.sections for b in section.blocks if isinstance(b, Picture)):
            written.append(replace_atomically(out / picture.name, partial(_write_bytes, data=picture.png)))
        written.append(write_text_atomic(out / REPORT_MD, report_md.render(report, figure_png=TIMELINE_PNG if png else None)))
    if "json" in formats:
        write_bytes_atomic(out / REPORT_JSON, [metrics.json_bytes(indent=2)])
        written.append(out / REPORT_JSON)
    return written


def write_compare(a: Run, b: Run, *, out: Path | None = None, formats: tuple[str, ...] = FORMATS) -> list[Path]:
    """The before/after report of two runs already read (`report --compare` gates on b)."""
    out = Path(out) if out else Path.cwd()
    ensure_writable_dir(out)
    stem = f"compare-{_safe(a.name)}-vs-{_safe(b.name)}"
    report = build_compare(a, b)
    written = []
    if "html" in formats:
        from profile_overlap.render import html as report_html

        written.append(write_text_atomic(out / f"{stem}.html", report_html.render(report, figure_svg=None)))
    if "md" in formats:
        from profile_overlap.render import markdown as report_md

        written.append(write_text_atomic(out / f"{stem}.md", report_md.render(report, figure_png=None)))
    if "json" in formats:
        write_json_atomic(out / f"{stem}.json", compare_record(a, b))
        written.append(out / f"{stem}.json")
    return written


_last_drawn: tuple[bytes, str | None, bytes | None] | None = None
"""(the record drawn, its SVG, its PNG): the last timeline drawn in this process."""


def _drawn(run: Run, formats: tuple[str, ...]) -> tuple[str | None, bytes | None]:
    """The run's timeline as SVG (for report.html) and PNG (for report.md), each drawn once per
    record: `report` on a job's traces writes the report of the record it builds twice, into the
    job folder as the record is built, then where it was asked to."""
    global _last_drawn
    html, md = "html" in formats, "md" in formats
    if not run.timeline or not run.timeline.modes or not (html or md):
        return None, None
    key = msgspec.json.encode((run.metrics, run.timeline), enc_hook=builtin)
    last = _last_drawn if _last_drawn is not None and _last_drawn[0] == key else None
    if last is not None and (last[1] is not None or not html) and (last[2] is not None or not md):
        return last[1] if html else None, last[2] if md else None
    from profile_overlap.render import timeline

    fig = timeline.figure(run.metrics, run.timeline)
    svg, png = timeline.to_svg(fig) if html else None, timeline.png_bytes(fig) if md else None
    _last_drawn = (key, svg, png)
    return svg, png


def _write_bytes(path: Path, *, data: bytes) -> None:
    path.write_bytes(data)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)
