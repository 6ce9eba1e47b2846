"""A rank of `perfetto`'s merged file: its files and drawn tracks, their lanes and tids (`layout`),
and its events as written (`drawn_events`, `arrow_events`, `rewrite_rank`)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import msgspec
import numpy as np

from profile_overlap.tools.perfetto import tracks as pt
from profile_overlap.tools.perfetto.lanes import assign_lanes
from profile_overlap.tools.perfetto.read import Event, FileScan, TrackKey, rewrite

OURS = "profile_overlap"
"""The pid part of the analysis tracks' keys in a rank's track table."""
_ENC = msgspec.json.Encoder()


@dataclass
class Rank:
    """One rank of the merged file, filled mode by mode: its files' scans and its drawn tracks."""

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


def _num(text: str) -> tuple[int, int | str]:
    return (0, int(text)) if text.lstrip("-").isdigit() else (1, text)


def meta_event(pid: int, tid: int, name: str, value) -> Event:
    key = "sort_index" if name.endswith("sort_index") else "labels" if name == "process_labels" else "name"
    return Event(ph="M", name=name, pid=pid, tid=tid, args=msgspec.Raw(_ENC.encode({key: value})))


@dataclass
class Layout:
    """One rank's tracks in the merged file: a tid per (track, lane), and the lanes of its slices."""

    tid_of: dict[tuple[int, int], int]
    names: list[tuple[int, str]]
    lanes: np.ndarray
    moved: int


def layout(rk: Rank) -> Layout:
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
    return Layout(tid_of, names, lanes, int((lanes[:n_orig] > 0).sum()))


def drawn_events(rk: Rank, synth: list[pt.Slice], tids: list[int], base: int, chunk: int = 20_000):
    """The rank's analysis tracks and its in-flight counter as events, a chunk at a time."""
    for lo in range(0, len(synth), chunk):
        yield [
            slice_event(rk.pid, tid, s.start_ns - base, s.dur_ns, s.name, s.args, cat="profile_overlap")
            for s, tid in zip(synth[lo : lo + chunk], tids[lo : lo + chunk])
        ]
    counter = [(ts, level) for _, t in rk.drawn for ts, level in t.counter]
    for lo in range(0, len(counter), chunk):
        yield [
            Event(ph="C", name=pt.IN_FLIGHT, pid=rk.pid, ts=(ts - base) / 1000, args=msgspec.Raw(_ENC.encode({"collectives": level})))
            for ts, level in counter[lo : lo + chunk]
        ]


def arrow_events(arrows, ranks: dict[int, Rank], synth, synth_tid, base: int, flow_ids) -> tuple[list[Event], int]:
    """The flow events of the arrows, and how many arrows were drawn."""
    flows: list[Event] = []
    drawn = 0
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
            pid, tid = ranks[rank].pid, synth_tid[rank][i]
            flows.append(
                Event(ph=ph, cat=x.cat, name=x.name, pid=pid, tid=tid, ts=(t - base) / 1000, id=fid, bp="e" if ph == "f" else None)
            )
        drawn += 1
    return flows, drawn


def slice_event(pid: int, tid: int, start_ns: int, dur_ns: int, name: str, args: dict, *, cat: str) -> Event:
    return Event(ph="X", cat=cat, name=name, pid=pid, tid=tid, ts=start_ns / 1000, dur=dur_ns / 1000, args=msgspec.Raw(_ENC.encode(args)))


def rewrite_rank(rk: Rank, lay: Layout, base: int, emit) -> None:
    """Every file of the rank, its slices on the tid of their lane."""
    done = 0
    for fs, origin, shift_ns, window in rk.scans:
        kept = int(fs.x_keep.sum())
        x_tid = np.zeros(fs.x_keep.size, dtype=np.int64)
        lanes = lay.lanes[done : done + kept]
        x_tid[fs.x_keep] = [lay.tid_of[(c, ln)] for c, ln in zip(fs.x_track[fs.x_keep].tolist(), lanes.tolist())]
        done += kept
        # A trace's flow binds to the slice that starts where it is: give it that slice's lane (the outermost's).
        lane_at: dict[tuple[int, int], int] = dict.fromkeys(fs.flow_ends, 1 << 30)
        for key, ln in zip(zip(fs.x_track[fs.x_keep].tolist(), fs.x_start_ns[fs.x_keep].tolist()), lanes.tolist()):
            if key in lane_at and ln < lane_at[key]:
                lane_at[key] = ln
        flow_tid = [lay.tid_of[(c, ln if (ln := lane_at[(c, t)]) < 1 << 30 else 0)] for c, t in fs.flow_ends]
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
