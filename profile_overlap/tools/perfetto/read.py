"""One rank's trace file, read twice for `perfetto` (both passes stream, as the analysis does).

`scan` (pass 1) keeps per complete slice ("X") its track, start and duration in integer ns on the
merged clock, per flow event its track, time and id, and the tracks' names: enough to give every
slice a lane (lanes.py) and to keep only flows with both ends. `rewrite` (pass 2) decodes the
events again and hands them on with the track, time and flow id they get in the merged file; an
event's `args` pass through as the bytes they were, never decoded.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import numpy as np

from profile_overlap.analysis.read.stream import read_chunks, stream_events
from profile_overlap.analysis.read.trace import CHUNK_BYTES, decode_errors
from profile_overlap.core.errors import UserError

FLOW_PHASES = frozenset({"s", "t", "f"})
TRACK_META = frozenset({"thread_name", "thread_sort_index", "process_name", "process_sort_index", "process_labels"})
"""Metadata the merged file replaces with its own names and order."""


class Event(msgspec.Struct, omit_defaults=True, gc=False):
    """A trace event with the fields Kineto writes (others are not kept); args stay raw JSON."""

    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: int | str | None = None
    tid: int | str | None = None
    ts: float | None = None
    dur: float | None = None
    id: int | str | None = None
    bp: str | None = None
    s: str | None = None
    args: msgspec.Raw = msgspec.Raw()


class _MetaArgs(msgspec.Struct):
    name: str | None = None
    sort_index: int | None = None


_EVENTS = msgspec.json.Decoder(list[Event])
_META = msgspec.json.Decoder(_MetaArgs)
TrackKey = tuple[str, str]
"""(pid, tid) of a track in its own file, as strings."""


@dataclass
class FileScan:
    """Pass 1 over one file: what the lanes and the flows need."""

    path: Path
    x_track: np.ndarray
    """Per "X" event, in file order: its track code (into the rank's track table)..."""
    x_start_ns: np.ndarray
    """...its start on the merged clock (ns)..."""
    x_dur_ns: np.ndarray
    x_keep: np.ndarray
    """...and whether it lies in the window written (--steps)."""
    flow_ids: dict[tuple[str, str], int] = field(default_factory=dict)
    """(cat, id) of each flow whose start and finish both lie in the window -> its id in the merged file."""
    flow_ends: list[tuple[int, int]] = field(default_factory=list)
    """(track code, ts ns) of each flow event, in file order (for its lane)."""
    dropped_flows: int = 0
    """Flows missing an end (in the file, or cut by the window)."""
    t_min_ns: int | None = None
    """The earliest time of any event kept (None: none kept)."""


def _inside(t: int, window_ns: tuple[int, int] | None) -> bool:
    """t lies in the window (both ends included); everything does without one."""
    return window_ns is None or window_ns[0] <= t <= window_ns[1]


MAX_US = 4e15
"""The largest time or duration (µs, either sign) a merged file holds: ns in int64 reach 9.2e15 µs,
and the epoch clock is at 1.8e15 µs today. A trace with one beyond it is corrupt."""


class TimeOutOfRange(ValueError):
    """A time or duration beyond MAX_US."""


def to_ns(ts_us: float, origin_us: int, shift_ns: int) -> int:
    """A time in µs -> whole ns less shift_ns. Through a whole-µs origin near it: a trace on the
    epoch clock (1.7e15 µs) times 1000 is beyond what a float holds to the ns."""
    if not -MAX_US < ts_us < MAX_US:
        raise TimeOutOfRange(ts_us)
    return round((ts_us - origin_us) * 1000) + origin_us * 1000 - shift_ns


def dur_ns(dur_us: float) -> int:
    if not -MAX_US < dur_us < MAX_US:
        raise TimeOutOfRange(dur_us)
    return round(dur_us * 1000)


@contextmanager
def times_in_range(what: str) -> Iterator[None]:
    """TimeOutOfRange -> the one line naming `what` (a file, or a rank's files)."""
    try:
        yield
    except TimeOutOfRange as err:
        raise UserError(
            f"{what} has a time or duration of {err.args[0]:.4g} µs, beyond what a Perfetto trace holds (±{MAX_US:.0e} µs): "
            "a corrupt trace; remove it from the folder"
        ) from None


def scan(
    path: Path,
    tracks: dict[TrackKey, int],
    names: dict[TrackKey, str],
    process_names: dict[str, str],
    *,
    origin_us: int,
    shift_ns: int,
    window_ns: tuple[int, int] | None,
    next_flow_id: Callable[[], int],
) -> FileScan:
    """Pass 1. `tracks`, `names` and `process_names` are the rank's, filled in here; shift_ns: what
    to subtract from round(ts · 1000) to put the file on the merged clock; window_ns: keep only
    events that overlap it; origin_us: a whole µs near the file's times (see to_ns)."""
    starts, durs, codes = [], [], []
    flows: dict[tuple[str, str], list[bool]] = {}
    flow_ends: list[tuple[int, int]] = []
    flow_keys: list[tuple[str, str]] = []
    t_min: list[int | None] = [None]

    def on_events(events: list[Event]) -> None:
        for e in events:
            ph = e.ph
            if ph == "X":
                key = (str(e.pid), str(e.tid))
                codes.append(tracks.setdefault(key, len(tracks)))
                starts.append(to_ns(e.ts or 0.0, origin_us, shift_ns))
                durs.append(dur_ns(e.dur or 0.0))
            elif ph in FLOW_PHASES:
                key = (str(e.pid), str(e.tid))
                t = to_ns(e.ts or 0.0, origin_us, shift_ns)
                fk = (e.cat, str(e.id))
                inside = _inside(t, window_ns)
                ends = flows.setdefault(fk, [False, False, True])
                ends[0] |= ph == "s"
                ends[1] |= ph == "f"
                ends[2] &= inside
                flow_ends.append((tracks.setdefault(key, len(tracks)), t))
                flow_keys.append(fk)
            elif ph == "M" and e.args and e.name in ("thread_name", "process_name"):
                meta = _META.decode(e.args)
                if meta.name:
                    if e.name == "thread_name":
                        names[(str(e.pid), str(e.tid))] = meta.name
                    else:
                        process_names[str(e.pid)] = meta.name
            elif ph and ph != "M" and e.ts is not None:
                tracks.setdefault((str(e.pid), str(e.tid)), len(tracks))
                t = to_ns(e.ts, origin_us, shift_ns)
                if _inside(t, window_ns) and (t_min[0] is None or t < t_min[0]):
                    t_min[0] = t

    # Its own decoder: a field the analysis skips (id, bp, s) may be of a type perfetto cannot take.
    with decode_errors(path), times_in_range(str(path)):
        stream_events(read_chunks(path, CHUNK_BYTES), _EVENTS.decode, on_events)
    x_start = np.array(starts, dtype=np.int64)
    x_dur = np.maximum(np.array(durs, dtype=np.int64), 0)
    keep = np.ones(x_start.size, dtype=bool) if window_ns is None else (x_start <= window_ns[1]) & (x_start + x_dur >= window_ns[0])
    ids = {fk: next_flow_id() for fk, (s, f, inside) in flows.items() if s and f and inside}
    firsts = [t for t in (t_min[0], int(x_start[keep].min()) if keep.any() else None) if t is not None]
    return FileScan(
        path=path,
        x_track=np.array(codes, dtype=np.int32),
        x_start_ns=x_start,
        x_dur_ns=x_dur,
        x_keep=keep,
        flow_ids=ids,
        flow_ends=flow_ends,
        dropped_flows=len(flows) - len(ids),
        t_min_ns=min(firsts, default=None),
    )


def rewrite(
    path: Path,
    scan_: FileScan,
    *,
    pid: int,
    x_tid: np.ndarray,
    flow_tid: list[int],
    track_tid: dict[TrackKey, int],
    origin_us: int,
    shift_ns: int,
    base_ns: int,
    window_ns: tuple[int, int] | None,
    emit: Callable[[list[Event]], None],
) -> None:
    """Pass 2: every event of the file that is kept, on the rank's process `pid`: slices on the
    tid of their lane (x_tid, in file order), flow events on flow_tid (in file order) with their
    merged ids, everything else on track_tid of its own track; times on the merged clock less base_ns (µs)."""
    state = {"x": 0, "flow": 0}

    def on_events(events: list[Event]) -> None:
        out = []
        x, fl = state["x"], state["flow"]
        for e in events:
            ph = e.ph
            if ph == "X":
                if scan_.x_keep[x]:
                    e.pid, e.tid = pid, int(x_tid[x])
                    e.ts = float(scan_.x_start_ns[x] - base_ns) / 1000
                    e.dur = float(scan_.x_dur_ns[x]) / 1000
                    out.append(e)
                x += 1
            elif ph in FLOW_PHASES:
                new_id = scan_.flow_ids.get((e.cat, str(e.id)))
                if new_id is not None:
                    e.pid, e.tid, e.id = pid, flow_tid[fl], new_id
                    e.ts = (scan_.flow_ends[fl][1] - base_ns) / 1000
                    out.append(e)
                fl += 1
            elif ph == "M" or e.ts is None:
                continue  # track names and order are the merged file's own
            else:
                t = to_ns(e.ts, origin_us, shift_ns)
                if not _inside(t, window_ns):
                    continue
                e.pid, e.tid = pid, track_tid[(str(e.pid), str(e.tid))]
                e.ts = (t - base_ns) / 1000
                out.append(e)
        state["x"], state["flow"] = x, fl
        emit(out)

    with decode_errors(path), times_in_range(str(path)):
        stream_events(read_chunks(path, CHUNK_BYTES), _EVENTS.decode, on_events)
