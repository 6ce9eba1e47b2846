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
                                    spans of each kind down to K (rounded down to a power of two,
                                    16 to 65536; the reply says which, and how many it merged)
    heatmap?run=R&mode=M            the mode's rank x time heatmap (record/heatmap.py: at most
                                    MAX_ROWS x BINS cells per layer), or 404 when the timeline has none
    perfetto?run=R                  R/perfetto.json.gz byte for byte, as a download, where
                                    `profile_overlap perfetto R` wrote one (the runs route's "perfetto")

`run` is a path relative to the logdir; anything that resolves outside it is refused. Only regular
files that resolve inside the logdir are read or served: a run's metrics.json, timeline.json or
perfetto.json.gz that is a symlink to a file outside it (or a FIFO, a device, a folder) is refused
with a 403, and listed by the runs route as a broken run with that reason. Every error is a 4xx
with {"error": one line}: 400 for a malformed parameter, 403 for what is not served, 404 for what
is not there, 422 for a run file that is there but cannot be read.
"""

from __future__ import annotations

import os
import stat
import threading
from collections import OrderedDict
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

import msgspec
from tensorboard.backend import http_util
from tensorboard.plugins import base_plugin
from werkzeug import wrappers

from profile_overlap.analysis.rank.spans import coarsen
from profile_overlap.core import modes as registry
from profile_overlap.core.errors import UserError
from profile_overlap.core.files import ADVICE_JSON, METRICS_JSON, PERFETTO_TRACE, STATUS_JSON, TIMELINE_JSON
from profile_overlap.record.advice import SHOWN, decode_advice
from profile_overlap.record.folder import RunStatus
from profile_overlap.record.load import decode_metrics
from profile_overlap.record.timeline import Timeline, TimelineRank, TimelineSpan, decode_timeline
from profile_overlap.render.advice import item_line

PLUGIN_NAME = "profile_overlap"
TAB_NAME = "Overlap"
MIN_MAX_SPANS = 16
MAX_MAX_SPANS = 1 << 16
"""The most spans per rank and kind a reply is merged to; a larger max_spans is served as this. Each
max_spans asked is rounded down to a power of two, so a timeline has at most 13 merged replies
(16 ... 65536): distinct values cannot make the server merge, or cache, without bound."""
CACHED_FILES = 4
"""timeline.json files kept parsed, with each variant of their replies serialised: a 64-rank
timeline.json takes seconds to parse, and the tab asks for each of a run's modes in turn."""
HEATMAP = "heatmap"
"""The variant of a timeline's replies that the heatmap route serves (the others: a max_spans or None)."""
MAX_SHOWN = 100
"""Characters of a request's parameter echoed in an error message."""
MAX_ERROR = 600
"""Characters of an error message, at most."""
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


def one_line(text: str) -> str:
    """`text` as one line of printable characters (others as Python escapes), at most MAX_ERROR long:
    a message may quote a trace's or a request's text."""
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return text if len(text) <= MAX_ERROR else text[: MAX_ERROR - 1] + "…"


def shown(value: str) -> str:
    """A request parameter as an error message quotes it: repr, cut to MAX_SHOWN characters."""
    text = repr(value)
    return text if len(text) <= MAX_SHOWN else f"{text[:MAX_SHOWN]}… ({len(value):,} characters)"


def has_control(text: str) -> bool:
    """Whether `text` holds a control character (C0, DEL or C1): no run or mode name does."""
    return any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in text)


def regular_file(logdir: Path, path: Path) -> Path | None:
    """`path` resolved, where it is a regular file inside `logdir` (which is resolved); None where
    nothing is there; RequestError (403) where something is that we do not read: a symlink that
    leads outside the logdir, a FIFO, a device, a folder."""
    shown_as = path.relative_to(logdir).as_posix() if path.is_relative_to(logdir) else path.name
    try:
        real = path.resolve()
    except (OSError, RuntimeError) as err:  # RuntimeError: a symlink loop, up to Python 3.12
        raise RequestError(f"{shown_as} cannot be resolved ({err}): fix or remove it", code=403) from None
    if not real.is_relative_to(logdir):
        raise RequestError(f"{shown_as} leads outside the logdir (a symlink): the tab reads only files inside it", code=403)
    try:
        mode = real.stat().st_mode
    except FileNotFoundError:
        return None
    except OSError as err:
        raise RequestError(f"{shown_as} cannot be read: {err.strerror}", code=403) from None
    if not stat.S_ISREG(mode):
        raise RequestError(f"{shown_as} is not a regular file: the tab reads only regular files", code=403)
    return real


def read_regular(path: Path) -> bytes:
    """The bytes of `path`, a regular file that regular_file returned. Opened without following a
    symlink swapped in since, and without blocking on a FIFO; checked again once open."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise RequestError(f"{path.name} is not a regular file: the tab reads only regular files", code=403)
            return f.read()
    except OSError as err:
        raise RequestError(f"{path.name} cannot be read: {err.strerror}", code=403) from None


def served(logdir: Path, path: Path) -> bool:
    """Whether the routes would read `path`: a regular file inside the logdir."""
    try:
        return regular_file(logdir, path) is not None
    except RequestError:
        return False


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


class RunRow(msgspec.Struct, kw_only=True):
    """One row of the run picker (the tab's /runs reply), read from the run's own files."""

    run: str
    """The run's folder, relative to the logdir."""
    modes: list[str] = []
    mode_titles: dict[str, str] = {}
    """Each mode's title from the registry (core/modes.py)."""
    world_size: int | None = None
    status: str | None = None
    """status.json's state; None without a readable one."""
    has_timeline: bool = False
    perfetto: bool = False
    advice: list[str] = []
    """The advice's first items, one line each (render/advice.item_line)."""
    error: str | None = None
    """Why the run cannot be shown, in one line (the tab lists it as broken)."""


def describe_run(logdir: Path, run_dir: Path) -> RunRow:
    """One row of the run picker, read from the run's own files. A run whose metrics.json or
    advice.json cannot be read has its one-line reason as `error`."""
    real_logdir = logdir.resolve()
    real_run = run_dir.resolve()
    row = RunRow(
        run=run_dir.relative_to(logdir).as_posix(),
        has_timeline=served(real_logdir, real_run / TIMELINE_JSON),
        perfetto=served(real_logdir, real_run / PERFETTO_TRACE),
    )
    if has_control(row.run):
        row.error = one_line(f"the folder's name {row.run!r} holds a control character: rename it")
        return row
    try:
        path = regular_file(real_logdir, real_run / METRICS_JSON)
        if path is None:
            raise RequestError(f"{METRICS_JSON} is a dangling symlink")
        record = decode_metrics(read_regular(path), path=run_dir / METRICS_JSON)
        row.modes = list(record.modes)
        row.mode_titles = {mode: registry.title(mode) for mode in row.modes}
        row.world_size = record.env.world_size
    except RequestError as err:
        row.error = one_line(str(err))
    except UserError as err:
        row.error = one_line(f"unreadable {METRICS_JSON}: {err}")
    try:
        path = regular_file(real_logdir, real_run / ADVICE_JSON)
        advice = decode_advice(read_regular(path), path=run_dir / ADVICE_JSON) if path else None
        row.advice = [item_line(n, i) for n, i in enumerate(advice.items[:SHOWN], 1)] if advice else []
    except (RequestError, UserError) as err:
        row.error = one_line(str(err))
    try:
        path = regular_file(real_logdir, real_run / STATUS_JSON)
        row.status = msgspec.json.decode(read_regular(path), type=RunStatus).state if path else None
    except (RequestError, msgspec.DecodeError, RecursionError):
        pass  # a run without a readable status.json shows without one
    return row


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
        self._files: OrderedDict[tuple[str, int, int], PreparedTimeline] = OrderedDict()
        """(timeline.json, its mtime and size) -> the file parsed, and its replies; CACHED_FILES at most."""
        self._lock = threading.Lock()  # TensorBoard serves requests from several threads; held only to find an entry

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
        malformed = RequestError(f"run={shown(run)} is not a folder's path: pass a run from the runs route")
        if has_control(run):  # a NUL, a newline: no run the runs route lists
            raise malformed
        try:
            run_dir = (logdir / run).resolve()
        except (OSError, RuntimeError, ValueError):  # too long a name, a symlink loop (RuntimeError up to 3.12)
            raise malformed from None
        if not run_dir.is_relative_to(logdir):
            raise RequestError(f"run {shown(run)} is outside the logdir", code=403)
        try:
            run_dir.stat()
        except (FileNotFoundError, NotADirectoryError):
            raise RequestError(f"run {shown(run)} has no {METRICS_JSON}", code=404) from None
        except OSError:  # a name too long
            raise malformed from None
        try:
            found = regular_file(logdir, run_dir / METRICS_JSON)
        except RequestError as err:
            raise RequestError(f"run {shown(run)}: {err}", code=err.code) from None
        if found is None:
            raise RequestError(f"run {shown(run)} has no {METRICS_JSON}", code=404)
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
        return http_util.Respond(request, msgspec.json.encode(reply), "application/json")

    @wrappers.Request.application  # type: ignore[arg-type]  # werkzeug's stub takes functions of the request alone; it passes self through
    def _serve_metrics(self, request):
        try:
            # Byte for byte: the tab shows the record's own numbers, never a re-serialisation.
            content = read_regular(self._run_file(request, METRICS_JSON, missing=f"{METRICS_JSON} is gone"))
        except RequestError as err:
            return _error(request, err)
        return http_util.Respond(request, content, "application/json")

    @wrappers.Request.application  # type: ignore[arg-type]  # werkzeug's stub takes functions of the request alone; it passes self through
    def _serve_perfetto(self, request):
        try:
            missing = f"this run has no {PERFETTO_TRACE}: profile_overlap perfetto RUN writes it"
            content = read_regular(self._run_file(request, PERFETTO_TRACE, missing=missing))
        except RequestError as err:
            return _error(request, err)
        response = http_util.Respond(request, content, "application/gzip")
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

    def _run_file(self, request, name: str, *, missing: str) -> Path:
        """The run's file `name`, resolved, where it is a regular file inside the logdir (else RequestError)."""
        run_dir = self._run_dir(request)
        logdir = self._logdir()
        assert logdir is not None  # _run_dir refuses a request without one
        path = regular_file(logdir, run_dir / name)
        if path is None:
            raise RequestError(missing, code=404)
        return path

    def _timeline(self, request, *, heatmap: bool = False) -> bytes:
        """One mode's reply, serialised; every mode of the file is prepared on the first request."""
        mode = request.args.get("mode")
        variant = HEATMAP if heatmap else served_max_spans(request.args.get("max_spans"))
        if mode is None:
            raise RequestError("missing ?mode=: pass one of the run's modes (the runs route's modes)")
        if has_control(mode):
            raise RequestError(f"mode={shown(mode)} is not a mode's name: pass one of the run's modes (the runs route's modes)")
        path = self._run_file(request, TIMELINE_JSON, missing=f"this run has no {TIMELINE_JSON} (it was not profiled)")
        try:
            info = path.stat()
        except OSError:
            raise RequestError(f"this run has no {TIMELINE_JSON} (it was not profiled)", code=404) from None
        key = (str(path), info.st_mtime_ns, info.st_size)
        with self._lock:
            prepared = self._files.get(key)
            if prepared is None:
                prepared = self._files[key] = PreparedTimeline(path)
                while len(self._files) > CACHED_FILES:
                    self._files.popitem(last=False)
            self._files.move_to_end(key)
        replies = prepared.replies(variant)  # parsed and merged under the file's own lock, not the plugin's
        if mode not in replies:
            raise RequestError(f"mode {shown(mode)} is not in this run's timeline (it has {', '.join(replies) or 'none'})", code=404)
        return replies[mode]


def served_max_spans(asked: str | None) -> int | None:
    """The max_spans a reply is merged to: None when not asked; else the whole number asked, at least
    MIN_MAX_SPANS, at most MAX_MAX_SPANS, rounded down to a power of two (the reply says which)."""
    if asked is None:
        return None
    if not (asked.isascii() and asked.isdigit()):
        raise RequestError(f"max_spans={shown(asked)} is not a whole number: ask for {MIN_MAX_SPANS} to {MAX_MAX_SPANS}")
    if len(asked) > len(str(MAX_MAX_SPANS)):  # no int() of a thousand digits
        return MAX_MAX_SPANS
    value = int(asked)
    if value < MIN_MAX_SPANS:
        raise RequestError(f"max_spans={value} is below {MIN_MAX_SPANS}: ask for {MIN_MAX_SPANS} to {MAX_MAX_SPANS}")
    return 1 << (min(value, MAX_MAX_SPANS).bit_length() - 1)


class PreparedTimeline:
    """One version of one timeline.json: parsed on the first request, then each variant of its
    replies (HEATMAP, a max_spans, or None for every span) serialised once. The variants are bounded
    (served_max_spans), so this holds at most 15 of them."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._timeline: Timeline | None = None
        self._failure: str | None = None
        """Why the file cannot be read, kept: a damaged file is not parsed again on each request."""
        self._replies: dict[str | int | None, dict[str, bytes]] = {}

    def replies(self, variant: str | int | None) -> dict[str, bytes]:
        with self._lock:
            if variant not in self._replies:
                timeline = self._parsed()
                if isinstance(variant, str):  # HEATMAP
                    self._replies[variant] = heatmap_replies(timeline)
                else:
                    self._replies[variant] = timeline_replies(timeline, max_spans=variant)
            return self._replies[variant]

    def _parsed(self) -> Timeline:
        if self._timeline is None and self._failure is None:
            try:
                self._timeline = decode_timeline(read_regular(self.path), path=TIMELINE_JSON)
            except UserError as err:
                self._failure = f"unreadable {TIMELINE_JSON}: {err}"
        if self._timeline is None:
            raise RequestError(self._failure or f"unreadable {TIMELINE_JSON}", code=422)
        return self._timeline


def heatmap_replies(timeline: Timeline) -> dict[str, bytes]:
    """Per mode of a timeline that has a heatmap: the heatmap route's reply (the Heatmap itself)."""
    return {mode: msgspec.json.encode(drawn.heatmap) for mode, drawn in timeline.modes.items() if drawn.heatmap is not None}


def timeline_replies(timeline: Timeline, *, max_spans: int | None) -> dict[str, bytes]:
    """Per mode of a timeline: the serialised reply of the timeline route."""
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
    return http_util.Respond(request, {"error": one_line(str(err))}, "application/json", code=err.code)


class OverlapLoader(base_plugin.TBLoader):
    """The entry point TensorBoard loads; the plugin needs no flags of its own."""

    def load(self, context: base_plugin.TBContext) -> OverlapPlugin:
        return OverlapPlugin(context)
