"""`perfetto`: every rank of a run, job or trace folder in one Chrome trace-event file (gzipped JSON)
for the Perfetto UI, on the clock the analysis aligned the ranks to.

    source (perfetto_source) -> analyze_dir per mode (keep_spans) -> per rank: scan its files
    (perfetto_read), the analysis tracks (perfetto_tracks), lanes so every slice nests
    (perfetto_lanes) -> write: metadata, analysis tracks, each file's events rewritten, arrows.

A rank is the process "rank R (host)"; its threads and streams are its tracks, and a slice that
partly overlapped another on its track moves to an extra track ("stream 20 (2)"). Times: a rank's
own time − its clock offset (ClockAlignment.offset), less the file's origin `time_origin_us`;
modes of a run that overlap in time are laid one after another. Nothing is measured here.
"""

from __future__ import annotations

import gzip
import itertools
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import numpy as np

from profile_overlap.analysis.cross_rank import TraceAnalysis
from profile_overlap.analysis.folder import analyze_dir
from profile_overlap.core.errors import UserError
from profile_overlap.core.io import replace_atomically
from profile_overlap.tools import perfetto_tracks as pt
from profile_overlap.tools.perfetto_lanes import assign_lanes
from profile_overlap.tools.perfetto_read import Event, FileScan, TrackKey, rewrite, scan, to_ns
from profile_overlap.tools.perfetto_source import Source

MODE_GAP_NS = 10_000_000
"""Between two modes laid one after another (their traces overlapped in time)."""
RUN_PID = 0
"""The process of the mode markers; rank r is process r + 1."""
OURS = "profile_overlap"
"""The pid part of the analysis tracks' keys in a rank's track table."""
GZIP_LEVEL = 6
HEAD = b'{"traceEvents":[\n{"ph":"M","name":"process_name","pid":0,"tid":0,"args":{"name":"modes"}}'
"""How every merged file begins (its first event names the modes process): how `is_merged` knows one."""
_ENC = msgspec.json.Encoder()


@dataclass(frozen=True)
class PerfettoFile:
    """What was written (printed by the command)."""

    path: Path
    modes: tuple[str, ...]
    ranks: tuple[int, ...]
    slices: int
    moved: int
    """Slices moved off their original track because they partly overlapped another there."""
    arrows: int
    dropped_flows: int
    """The traces' own flows left out because an end is missing (or outside --steps)."""
    size_bytes: int
    traces_bytes: int
    """The trace files read, as stored (gzipped for runs and jobs)."""


@dataclass
class _Rank:
    rank: int
    pid: int
    host: str | None
    tracks: dict[TrackKey, int] = field(default_factory=dict)
    names: dict[TrackKey, str] = field(default_factory=dict)
    process_names: dict[str, str] = field(default_factory=dict)
    scans: list[tuple[FileScan, int, int, tuple[int, int] | None]] = field(default_factory=list)
    """(scan, origin µs, shift ns, window ns) per file."""
    drawn: list[tuple[str, pt.RankTracks]] = field(default_factory=list)
    """(mode, tracks) per mode."""


def _steps_for(kind: str, steps: tuple[int | None, int | None] | None) -> tuple[int | None, int | None] | None:
    """The step windows the record measured in: runs and jobs measure their profiled steps."""
    if steps is not None:
        return steps
    return (None, None) if kind in ("run", "job") else None


def _extent_us(a: TraceAnalysis, cut: bool) -> tuple[float, float]:
    """A mode's first and last moment on the aligned clock (its step windows when cut)."""
    lo, hi = math.inf, -math.inf
    for r in a.ranks:
        off = a.clocks.offset(r.rank)
        if cut and r.steps:
            lo = min(lo, min(s.start_us for s in r.steps) - off)
            hi = max(hi, max(s.start_us + s.step_us for s in r.steps) - off)
        elif r.facts is not None:
            lo, hi = min(lo, r.facts.first_event_us - off), max(hi, r.facts.last_event_us - off)
    return lo, hi


def write_perfetto(source: Source, out: Path, *, steps=None, warn=None) -> PerfettoFile:
    """Analyze each mode of `source`, then write the merged trace to `out` (atomically)."""
    analyses = [
        (m.mode, analyze_dir(m.folder, steps=_steps_for(source.kind, steps), keep_spans=True, skip_bad=source.kind == "job", warn=warn))
        for m in source.modes
    ]
    cut = steps is not None
    mode_shift_ns, prev_end = [], None
    for _, a in analyses:
        lo, hi = _extent_us(a, cut)
        lo_ns, hi_ns = round(lo * 1000), round(hi * 1000)
        shift = 0 if prev_end is None or lo_ns > prev_end else prev_end + MODE_GAP_NS - lo_ns
        mode_shift_ns.append(shift)
        prev_end = hi_ns + shift
    ranks: dict[int, _Rank] = {}
    flow_ids = itertools.count(1)
    arrows: list[pt.Arrow] = []
    for (mode, a), mshift in zip(analyses, mode_shift_ns):
        drawn, base = {}, {}
        for r in a.ranks:
            rk = ranks.setdefault(r.rank, _Rank(r.rank, r.rank + 1, source.hosts.get(r.rank)))
            shift_ns = round(a.clocks.offset(r.rank) * 1000) - mshift
            origin = math.floor(r.facts.first_event_us) if r.facts is not None else 0
            window = None
            if cut and r.steps:
                window = (
                    to_ns(min(s.start_us for s in r.steps), origin, shift_ns),
                    to_ns(max(s.start_us + s.step_us for s in r.steps), origin, shift_ns),
                )
            for path in r.files:
                fs = scan(
                    Path(path),
                    rk.tracks,
                    rk.names,
                    rk.process_names,
                    origin_us=origin,
                    shift_ns=shift_ns,
                    window_ns=window,
                    next_flow_id=flow_ids.__next__,
                )
                rk.scans.append((fs, origin, shift_ns, window))
            tracks = pt.rank_tracks(r, lambda us, o=origin, s=shift_ns: to_ns(us, o, s), mode)
            base[r.rank] = sum(len(t.slices) for _, t in rk.drawn)
            rk.drawn.append((mode, tracks))
            drawn[r.rank] = tracks
        mode_arrows = pt.call_arrows(a, drawn) + [x for r in a.ranks for x in pt.waited_arrows(r, drawn[r.rank])]
        arrows += [
            pt.Arrow(x.cat, x.name, (x.src[0], base[x.src[0]] + x.src[1]), (x.dst[0], base[x.dst[0]] + x.dst[1])) for x in mode_arrows
        ]
    return _write(source, out, analyses, mode_shift_ns, ranks, arrows, flow_ids, cut)


def _num(text: str) -> tuple[int, int | str]:
    return (0, int(text)) if text.lstrip("-").isdigit() else (1, text)


def _meta(pid: int, tid: int, name: str, value) -> Event:
    key = "sort_index" if name.endswith("sort_index") else "labels" if name == "process_labels" else "name"
    return Event(ph="M", name=name, pid=pid, tid=tid, args=msgspec.Raw(_ENC.encode({key: value})))


@dataclass
class _Layout:
    """One rank's tracks in the merged file: a tid per (track, lane), and the lanes of its slices."""

    tid_of: dict[tuple[int, int], int]
    names: list[tuple[int, str]]
    lanes: np.ndarray
    moved: int


def _layout(rk: _Rank) -> _Layout:
    ours = {name: rk.tracks.setdefault((OURS, name), len(rk.tracks)) for name in pt.TRACKS}
    synth = [s for _, t in rk.drawn for s in t.slices]
    tracks = [fs.x_track[fs.x_keep] for fs, *_ in rk.scans] + [np.array([ours[s.track] for s in synth], dtype=np.int32)]
    starts = [fs.x_start_ns[fs.x_keep] for fs, *_ in rk.scans] + [np.array([s.start_ns for s in synth], dtype=np.int64)]
    durs = [fs.x_dur_ns[fs.x_keep] for fs, *_ in rk.scans] + [np.array([s.dur_ns for s in synth], dtype=np.int64)]
    track = np.concatenate(tracks).astype(np.int32)
    flat = np.zeros(len(rk.tracks), dtype=bool)
    flat[[ours[n] for n in pt.FLAT]] = True
    lanes = assign_lanes(track, np.concatenate(starts), np.concatenate(durs), flat=flat)
    used = set(zip(track.tolist(), lanes.tolist())) | {(code, 0) for code in rk.tracks.values()}
    keys = {code: key for key, code in rk.tracks.items()}

    def order(pair: tuple[int, int]):
        pid, tid = keys[pair[0]]
        first = (0, pt.TRACKS.index(tid), (0, 0)) if pid == OURS else (1, _num(pid), _num(tid))
        return (*first, pair[1])

    def plain(key: TrackKey) -> str:
        pid, tid = key
        if pid == OURS:
            return tid
        return (rk.names.get(key) or (f"thread {tid}" if tid.strip() else "")).strip() or pid.strip() or "no thread"

    taken = Counter(plain(key) for key in rk.tracks)
    tid_of, names = {}, []
    for i, (code, lane) in enumerate(sorted(used, key=order)):
        tid_of[(code, lane)] = rk.pid * 100_000 + i + 1
        name = plain(keys[code])
        if taken[name] > 1:  # two processes of the rank name a thread alike
            name = f"{rk.process_names.get(keys[code][0]) or keys[code][0]}: {name}"
        names.append((tid_of[(code, lane)], name if lane == 0 else f"{name} ({lane + 1})"))
    n_orig = sum(int(fs.x_keep.sum()) for fs, *_ in rk.scans)
    return _Layout(tid_of, names, lanes, int((lanes[:n_orig] > 0).sum()))


def _write(source, out, analyses, mode_shift_ns, ranks: dict[int, _Rank], arrows, flow_ids, cut) -> PerfettoFile:
    firsts = [fs.t_min_ns for rk in ranks.values() for fs, *_ in rk.scans if fs.t_min_ns is not None]
    firsts += [min(s.start_ns for s in t.slices) for rk in ranks.values() for _, t in rk.drawn if t.slices]
    base = (min(firsts) // 1000) * 1000 if firsts else 0
    layouts = {rank: _layout(rk) for rank, rk in ranks.items()}
    slice_tid: dict[tuple[int, int], int] = {}
    head: list[Event] = [_meta(RUN_PID, RUN_PID, "process_name", "modes"), _meta(RUN_PID, RUN_PID, "process_sort_index", -1)]
    head.append(_meta(RUN_PID, 1, "thread_name", "modes"))
    for (mode, a), shift in zip(analyses, mode_shift_ns):
        lo, hi = _extent_us(a, cut)
        start = round(lo * 1000) + shift - base
        args = {"folder": str(next(m.folder for m in source.modes if m.mode == mode)), "ranks": [r.rank for r in a.ranks]}
        head.append(_slice(RUN_PID, 1, start, round(hi * 1000) + shift - base - start, mode, args, cat="mode"))
    body: list[Event] = []
    for rank, rk in sorted(ranks.items()):
        lay = layouts[rank]
        head.append(_meta(rk.pid, 0, "process_name", f"rank {rank} ({rk.host})" if rk.host else f"rank {rank}"))
        head.append(_meta(rk.pid, 0, "process_sort_index", rank))
        head.append(_meta(rk.pid, 0, "process_labels", _clock_label(analyses, rank)))
        for i, (tid, name) in enumerate(lay.names):
            head += [_meta(rk.pid, tid, "thread_name", name), _meta(rk.pid, tid, "thread_sort_index", i)]
        ours = {name: rk.tracks[(OURS, name)] for name in pt.TRACKS}
        n_orig = sum(int(fs.x_keep.sum()) for fs, *_ in rk.scans)
        synth = [s for _, t in rk.drawn for s in t.slices]
        for i, (s, lane) in enumerate(zip(synth, lay.lanes[n_orig:].tolist())):
            tid = lay.tid_of[(ours[s.track], lane)]
            slice_tid[(rank, i)] = tid
            body.append(_slice(rk.pid, tid, s.start_ns - base, s.dur_ns, s.name, s.args, cat="profile_overlap"))
        for _, t in rk.drawn:
            for ts, level in t.counter:
                body.append(
                    Event(
                        ph="C", name=pt.IN_FLIGHT, pid=rk.pid, ts=(ts - base) / 1000, args=msgspec.Raw(_ENC.encode({"collectives": level}))
                    )
                )
    synth = {rank: [s for _, t in rk.drawn for s in t.slices] for rank, rk in ranks.items()}
    flows: list[Event] = []
    drawn_arrows = 0
    for x in arrows:
        (sr, si), (dr, di) = x.src, x.dst
        src, dst = synth[sr][si], synth[dr][di]
        # Perfetto joins a flow only forwards in time, each end inside its slice (the lanes are flat,
        # so a time inside a slice binds to it): as early in the source as it can, no earlier in the target.
        t_src = src.start_ns + min(src.dur_ns // 2, 1000)
        t_dst = min(max(t_src, dst.start_ns + min(dst.dur_ns // 2, 1000)), dst.start_ns + dst.dur_ns - min(dst.dur_ns // 2, 1000))
        if t_dst < t_src:
            continue  # the target ended before the source began: possible only within the clocks' uncertainty
        fid = next(flow_ids)
        for rank, i, ph, t in ((sr, si, "s", t_src), (dr, di, "f", t_dst)):
            tid = slice_tid[(rank, i)]
            flows.append(
                Event(
                    ph=ph, cat=x.cat, name=x.name, pid=ranks[rank].pid, tid=tid, ts=(t - base) / 1000, id=fid, bp="e" if ph == "f" else None
                )
            )
        drawn_arrows += 1
    meta = _record(source, analyses, mode_shift_ns, base)

    def write(tmp: Path) -> None:
        with gzip.open(tmp, "wb", compresslevel=GZIP_LEVEL) as f:
            f.write(b'{"traceEvents":[\n')
            first = True

            def emit(events: list[Event]) -> None:
                nonlocal first
                if events:
                    if not first:
                        f.write(b",\n")
                    f.write(_ENC.encode(events)[1:-1])
                    first = False

            emit(head)
            emit(body)
            for rank, rk in sorted(ranks.items()):
                _rewrite_rank(rk, layouts[rank], base, emit)
            emit(flows)
            f.write(b'\n],"profile_overlap":' + _ENC.encode(meta) + b"}\n")

    try:
        replace_atomically(out, write)
    except OSError as err:
        raise UserError(f"cannot write {out}: {err.strerror}; pick a writable --out with room for the file") from None
    return PerfettoFile(
        path=out,
        modes=tuple(m for m, _ in analyses),
        ranks=tuple(sorted(ranks)),
        slices=sum(int(fs.x_keep.sum()) for rk in ranks.values() for fs, *_ in rk.scans),
        moved=sum(lay.moved for lay in layouts.values()),
        arrows=drawn_arrows,
        dropped_flows=sum(fs.dropped_flows for rk in ranks.values() for fs, *_ in rk.scans),
        size_bytes=out.stat().st_size,
        traces_bytes=sum(fs.path.stat().st_size for rk in ranks.values() for fs, *_ in rk.scans),
    )


def _slice(pid: int, tid: int, start_ns: int, dur_ns: int, name: str, args: dict, *, cat: str) -> Event:
    return Event(ph="X", cat=cat, name=name, pid=pid, tid=tid, ts=start_ns / 1000, dur=dur_ns / 1000, args=msgspec.Raw(_ENC.encode(args)))


def _clock(a: TraceAnalysis, rank: int) -> dict:
    clocks = a.clocks
    unc = clocks.uncertainty_us.get(rank)
    return {
        "reference_rank": clocks.reference_rank,
        "clock_offset_us": _finite(clocks.offsets_us.get(rank)),
        "clock_uncertainty_us": _finite(unc),
        "moved": clocks.applies(rank),
    }


def _finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else round(x, 3)


def _clock_label(analyses, rank: int) -> str:
    """The process's label: each mode's clock offset of the rank, and whether its times moved."""
    parts = []
    for mode, a in analyses:
        if any(r.rank == rank for r in a.ranks):
            c = _clock(a, rank)
            off = "unknown" if c["clock_offset_us"] is None else f"{c['clock_offset_us']:,.1f} us"
            unc = "" if c["clock_uncertainty_us"] is None else f" ± {c['clock_uncertainty_us']:,.1f} us"
            parts.append(f"{mode}: clock {off}{unc} vs rank {c['reference_rank']} ({'moved' if c['moved'] else 'not moved'})")
    return "; ".join(parts)


def _record(source: Source, analyses, mode_shift_ns, base_ns: int) -> dict:
    """The file's own metadata (a top-level key the viewer ignores and scripts can read)."""
    return {
        "source": str(source.root),
        "kind": source.kind,
        "time_origin_us": base_ns / 1000,
        "time": "a rank's own time − clock_offset_us where moved, + mode shift_us, − time_origin_us",
        "modes": [
            {
                "mode": mode,
                "shift_us": shift / 1000,
                "ranks": [
                    {"rank": r.rank, "host": source.hosts.get(r.rank), "steps": [s.step for s in r.steps], **_clock(a, r.rank)}
                    for r in a.ranks
                ],
            }
            for (mode, a), shift in zip(analyses, mode_shift_ns)
        ],
    }


def _rewrite_rank(rk: _Rank, lay: _Layout, base: int, emit) -> None:
    """Every file of the rank, its slices on the tid of their lane."""
    done = 0
    for fs, origin, shift_ns, window in rk.scans:
        kept = int(fs.x_keep.sum())
        x_tid = np.zeros(fs.x_keep.size, dtype=np.int64)
        lanes = lay.lanes[done : done + kept]
        x_tid[fs.x_keep] = [lay.tid_of[(c, ln)] for c, ln in zip(fs.x_track[fs.x_keep].tolist(), lanes.tolist())]
        done += kept
        lane_at: dict[tuple[int, int], int] = {}
        for c, s, ln in zip(fs.x_track[fs.x_keep].tolist(), fs.x_start_ns[fs.x_keep].tolist(), lanes.tolist()):
            if ln < lane_at.get((c, s), 1 << 30):
                lane_at[(c, s)] = ln
        flow_tid = [lay.tid_of[(c, lane_at.get((c, t), 0))] for c, t in fs.flow_ends]
        track_tid = {key: lay.tid_of[(code, 0)] for key, code in rk.tracks.items()}
        rewrite(
            fs.path,
            fs,
            pid=rk.pid,
            x_tid=x_tid,
            flow_tid=flow_tid,
            track_tid=track_tid,
            origin_us=origin,
            shift_ns=shift_ns,
            base_ns=base,
            window_ns=window,
            emit=emit,
        )


def is_merged(path: Path) -> bool:
    """Whether `path` is a file this command wrote (which it may replace; nothing else)."""
    try:
        with gzip.open(path) as f:
            return f.read(len(HEAD)) == HEAD
    except (OSError, EOFError):
        return False
