"""The Overlap tab: a TensorBoard dynamic plugin serving run folders to one ES module.

Registered in pyproject.toml under `[project.entry-points."tensorboard_plugins"]`, so after
`pip install -e .`, `tensorboard --logdir runs` shows the tab. A run folder is any folder under
the logdir that holds metrics.json (our runs, and `analyze DIR --tensorboard` output); its
timeline.json is optional. Routes, under /data/plugin/profile_overlap/:

    index.js, timeline.js,          the frontend: ES modules and a style sheet (no build step, no
    exposed.js,
    common.js, style.css            external request)
    runs                            {"runs": [{"run", "modes", "mode_titles", "world_size", "status", "has_timeline",
                                    "perfetto", "error"}], "phases"}
                                    (status: status.json's state, e.g. succeeded or failed)
    metrics?run=R                   R/metrics.json, byte for byte
    timeline?run=R&mode=M           one mode of R/timeline.json (each rank's steps, spans and, where
                                    the file has them, phase windows); &max_spans=K merges each rank's
                                    spans of each kind down to K (the reply says how many it merged)
    heatmap?run=R&mode=M            the mode's rank x time heatmap (record/heatmap.py: at most
                                    MAX_ROWS x BINS cells per layer), or 404 when the timeline has none
    perfetto?run=R                  R/perfetto.json.gz byte for byte, as a download, where
                                    `profile_overlap perfetto R` wrote one (the runs route's "perfetto")

`run` is a path relative to the logdir; anything that resolves outside it is refused.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import msgspec
from tensorboard.backend import http_util
from tensorboard.plugins import base_plugin
from werkzeug import wrappers

from profile_overlap.analysis.spans import coarsen
from profile_overlap.core import modes as registry
from profile_overlap.core.errors import UserError
from profile_overlap.core.files import METRICS_JSON, PERFETTO_TRACE, STATUS_JSON, TIMELINE_JSON
from profile_overlap.record.folder import RunStatus
from profile_overlap.record.load import load_metrics
from profile_overlap.record.timeline import TimelineRank, TimelineSpan, load_timeline

PLUGIN_NAME = "profile_overlap"
TAB_NAME = "Overlap"
MIN_MAX_SPANS = 16
CACHED_REPLIES = 8
"""Timeline replies kept serialised: a 64-rank timeline.json takes seconds to parse, and the tab
asks for each of a run's modes in turn."""
_STATIC = {
    "/index.js": ("index.js", "text/javascript"),
    "/timeline.js": ("timeline.js", "text/javascript"),
    "/exposed.js": ("exposed.js", "text/javascript"),
    "/heatmap.js": ("heatmap.js", "text/javascript"),
    "/common.js": ("common.js", "text/javascript"),
    "/style.css": ("style.css", "text/css"),
}


class RequestError(Exception):
    """A bad request: answered with its HTTP code and a one-line message, never a traceback."""

    def __init__(self, message: str, *, code: int = 400) -> None:
        super().__init__(message)
        self.code = code


def find_runs(logdir: Path) -> list[Path]:
    """Every folder at or under `logdir` that holds metrics.json, sorted. Hidden folders are
    skipped, and the walk does not descend into a run (its subfolders hold traces)."""
    runs = []
    for folder, subdirs, files in os.walk(logdir):
        if METRICS_JSON in files:
            runs.append(Path(folder))
            subdirs[:] = []
        else:
            subdirs[:] = sorted(d for d in subdirs if not d.startswith("."))
    return sorted(runs)


def describe_run(logdir: Path, run_dir: Path) -> dict[str, Any]:
    """One row of the run picker, read from the run's own files."""
    entry: dict[str, Any] = {
        "run": run_dir.relative_to(logdir).as_posix(),
        "modes": [],
        "mode_titles": {},
        "world_size": None,
        "status": None,
        "has_timeline": (run_dir / TIMELINE_JSON).is_file(),
        "perfetto": (run_dir / PERFETTO_TRACE).is_file(),
        "error": None,
    }
    try:
        record = load_metrics(run_dir / METRICS_JSON)
        entry["modes"] = list(record.modes)
        entry["mode_titles"] = {mode: registry.title(mode) for mode in entry["modes"]}
        entry["world_size"] = record.env.world_size
    except UserError as err:
        entry["error"] = f"unreadable {METRICS_JSON}: {err}"
    try:
        entry["status"] = msgspec.json.decode((run_dir / STATUS_JSON).read_bytes(), type=RunStatus).state
    except (OSError, msgspec.DecodeError):
        pass
    return entry


def merge_spans(spans: Sequence[TimelineSpan], *, max_spans: int) -> Sequence[TimelineSpan]:
    """At most `max_spans` spans of each kind, merged as the analysis merges the timeline
    (`spans.coarsen`: the largest gaps stay). A merged span keeps its first piece's step and its
    longest piece's label. Within the budget, `spans` is returned as is."""
    if max(sum(s.kind == "comm" for s in spans), sum(s.kind == "compute" for s in spans)) <= max_spans:
        return spans
    out: list[TimelineSpan] = []
    for kind in ("comm", "compute"):
        mine = [s for s in spans if s.kind == kind]
        if len(mine) <= max_spans:
            out.extend(mine)
            continue
        first, ends, longest = coarsen([s.start_us for s in mine], [s.end_us for s in mine], max_spans=max_spans)
        for a, e, best in zip(first.tolist(), ends.tolist(), longest.tolist()):
            out.append(TimelineSpan(mine[a].step, float(mine[a].start_us), e, kind, mine[best].label))
    out.sort(key=lambda s: s.start_us)
    return out


class OverlapPlugin(base_plugin.TBPlugin):
    plugin_name = PLUGIN_NAME

    def __init__(self, context: base_plugin.TBContext) -> None:
        self._logdir_flag = context.logdir
        self._replies: OrderedDict[tuple[str, int, int, str | int | None], dict[str, bytes]] = OrderedDict()
        """(timeline.json, its mtime and size, max_spans) -> each mode's serialised reply."""
        self._lock = threading.Lock()  # TensorBoard serves requests from several threads

    # ------------------------------------------------------------- TensorBoard's interface

    def get_plugin_apps(self):
        apps = {route: self._serve_static for route in _STATIC}
        apps.update({"/runs": self._serve_runs, "/metrics": self._serve_metrics, "/timeline": self._serve_timeline})
        apps["/heatmap"] = self._serve_heatmap
        apps["/perfetto"] = self._serve_perfetto
        return apps

    def is_active(self) -> bool:
        logdir = self._logdir()
        return logdir is not None and bool(find_runs(logdir))

    def frontend_metadata(self):
        return base_plugin.FrontendMetadata(es_module_path="/index.js", tab_name=TAB_NAME)

    # ------------------------------------------------------------- paths

    def _logdir(self) -> Path | None:
        """The local logdir; None for none or a remote one (gs://, s3://), which we do not read."""
        if not self._logdir_flag or "://" in self._logdir_flag:
            return None
        return Path(self._logdir_flag).expanduser().resolve()

    def _run_dir(self, request) -> Path:
        logdir = self._logdir()
        if logdir is None:
            raise RequestError("TensorBoard was started without a local --logdir", code=404)
        run = request.args.get("run")
        if run is None:
            raise RequestError("missing ?run=: pass a run from the runs route")
        run_dir = (logdir / run).resolve()
        if not run_dir.is_relative_to(logdir):
            raise RequestError(f"run {run!r} is outside the logdir", code=403)
        if not (run_dir / METRICS_JSON).is_file():
            raise RequestError(f"run {run!r} has no {METRICS_JSON}", code=404)
        return run_dir

    # ------------------------------------------------------------- routes

    @wrappers.Request.application  # type: ignore[arg-type]  # werkzeug's stub takes functions of the request alone; it passes self through
    def _serve_static(self, request):
        name, mimetype = _STATIC[request.path[request.path.rindex("/") :]]
        content = resources.files(__package__).joinpath("static").joinpath(name).read_bytes()
        return http_util.Respond(request, content, mimetype)

    @wrappers.Request.application  # type: ignore[arg-type]  # werkzeug's stub takes functions of the request alone; it passes self through
    def _serve_runs(self, request):
        logdir = self._logdir()
        runs = [describe_run(logdir, d) for d in find_runs(logdir)] if logdir else []
        reply = {"logdir": str(logdir) if logdir else None, "runs": runs, "phases": list(registry.PHASES)}
        return http_util.Respond(request, reply, "application/json")

    @wrappers.Request.application  # type: ignore[arg-type]  # werkzeug's stub takes functions of the request alone; it passes self through
    def _serve_metrics(self, request):
        try:
            # Byte for byte: the tab shows the record's own numbers, never a re-serialisation.
            content = (self._run_dir(request) / METRICS_JSON).read_bytes()
        except RequestError as err:
            return _error(request, err)
        return http_util.Respond(request, content, "application/json")

    @wrappers.Request.application  # type: ignore[arg-type]  # werkzeug's stub takes functions of the request alone; it passes self through
    def _serve_perfetto(self, request):
        try:
            path = self._run_dir(request) / PERFETTO_TRACE
            if not path.is_file():
                raise RequestError(
                    f"run {request.args.get('run')!r} has no {PERFETTO_TRACE}: profile_overlap perfetto RUN writes it", code=404
                )
        except RequestError as err:
            return _error(request, err)
        response = http_util.Respond(request, path.read_bytes(), "application/gzip")
        response.headers["Content-Disposition"] = f'attachment; filename="{PERFETTO_TRACE}"'
        return response

    @wrappers.Request.application  # type: ignore[arg-type]  # werkzeug's stub takes functions of the request alone; it passes self through
    def _serve_timeline(self, request):
        try:
            return http_util.Respond(request, self._timeline(request), "application/json")
        except RequestError as err:
            return _error(request, err)

    @wrappers.Request.application  # type: ignore[arg-type]  # as _serve_timeline
    def _serve_heatmap(self, request):
        try:
            return http_util.Respond(request, self._timeline(request, heatmap=True), "application/json")
        except RequestError as err:
            return _error(request, err)

    def _timeline(self, request, *, heatmap: bool = False) -> bytes:
        """One mode's reply, serialised; every mode of the file is prepared on the first request."""
        run_dir = self._run_dir(request)
        mode = request.args.get("mode")
        asked = request.args.get("max_spans") if not heatmap else None
        max_spans: int | None = None
        if asked is not None:
            try:
                max_spans = int(asked)
            except ValueError:
                raise RequestError(f"max_spans={asked!r} is not a whole number") from None
            if max_spans < MIN_MAX_SPANS:
                raise RequestError(f"max_spans={max_spans} is below {MIN_MAX_SPANS}")
        path = run_dir / TIMELINE_JSON
        try:
            stat = path.stat()
        except OSError:
            raise RequestError(f"this run has no {TIMELINE_JSON} (it was not profiled)", code=404) from None
        key = (str(path), stat.st_mtime_ns, stat.st_size, "heatmap" if heatmap else max_spans)
        with self._lock:
            replies = self._replies.get(key)
            if replies is None:
                replies = heatmap_replies(path) if heatmap else timeline_replies(path, max_spans=max_spans)
                self._replies[key] = replies
                while len(self._replies) > CACHED_REPLIES:
                    self._replies.popitem(last=False)
            self._replies.move_to_end(key)
        if mode not in replies:
            raise RequestError(f"mode {mode!r} is not in this run's timeline (it has {', '.join(replies) or 'none'})", code=404)
        return replies[mode]


def heatmap_replies(path: Path) -> dict[str, bytes]:
    """Per mode of a timeline.json that has a heatmap: the heatmap route's reply (the Heatmap itself)."""
    try:
        timeline = load_timeline(path)
    except UserError as err:
        raise RequestError(f"unreadable {TIMELINE_JSON}: {err}", code=500) from None
    return {mode: msgspec.json.encode(drawn.heatmap) for mode, drawn in timeline.modes.items() if drawn.heatmap is not None}


def timeline_replies(path: Path, *, max_spans: int | None) -> dict[str, bytes]:
    """Per mode of a timeline.json: the serialised reply of the timeline route."""
    try:
        timeline = load_timeline(path)
    except UserError as err:
        raise RequestError(f"unreadable {TIMELINE_JSON}: {err}", code=500) from None
    replies = {}
    for mode, drawn in timeline.modes.items():
        ranks = drawn.ranks
        num_in_file = sum(len(r.spans) for r in ranks)
        if max_spans is not None:
            ranks = tuple(msgspec.structs.replace(r, spans=tuple(merge_spans(r.spans, max_spans=max_spans))) for r in ranks)
        replies[mode] = msgspec.json.encode(
            TimelineReply(
                mode=mode,
                ranks=ranks,
                max_spans=max_spans,
                num_spans_in_file=num_in_file,
                num_spans_served=sum(len(r.spans) for r in ranks),
            )
        )
    return replies


class TimelineReply(msgspec.Struct, frozen=True, kw_only=True):
    """The timeline route's reply: one mode's ranks, their spans merged to at most max_spans per kind."""

    mode: str
    ranks: tuple[TimelineRank, ...]
    max_spans: int | None
    num_spans_in_file: int
    num_spans_served: int


def _error(request, err: RequestError):
    return http_util.Respond(request, {"error": str(err)}, "application/json", code=err.code)


class OverlapLoader(base_plugin.TBLoader):
    """The entry point TensorBoard loads; the plugin needs no flags of its own."""

    def load(self, context: base_plugin.TBContext) -> OverlapPlugin:
        return OverlapPlugin(context)
