"""`perfetto`: every rank of a run, job or trace folder in one Chrome trace-event file (gzipped JSON)
for the Perfetto UI, on the clock the analysis aligned the ranks to.

    source (source.py) -> analyze_dir per mode (keep_spans) -> per rank: scan its files
    (read.py), the analysis tracks (tracks.py), lanes so every slice nests
    (lanes.py) -> write: metadata, analysis tracks, each file's events rewritten, arrows.

A rank is the process "rank R (host)"; its threads and streams are its tracks, and a slice that
partly overlapped another on its track moves to an extra track ("stream 20 (2)"). Times: a rank's
own time − its clock offset (ClockAlignment.offset), less the file's origin `time_origin_us`;
modes of a run that overlap in time are laid one after another. Nothing is measured here.

It reads the traces, not the record: it draws every event of every file and every interval the
analysis found (each call, the hidden and exposed communication, the waits), which the record
only sums. Those come from the one analysis entry point, `analyze_dir` with AnalysisOptions(keep_spans=True).
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import itertools
import math
from dataclasses import dataclass
from pathlib import Path

import msgspec

from profile_overlap.analysis.folder import analyze_dir
from profile_overlap.analysis.options import AnalysisOptions
from profile_overlap.analysis.world.cross_rank import TraceAnalysis
from profile_overlap.core.errors import UserError
from profile_overlap.core.io import replace_atomically
from profile_overlap.tools.perfetto import tracks as pt
from profile_overlap.tools.perfetto.layout import OURS, Rank, arrow_events, drawn_events, layout, meta_event, rewrite_rank, slice_event
from profile_overlap.tools.perfetto.read import MAX_US, Event, scan, times_in_range, to_ns
from profile_overlap.tools.perfetto.source import Source

MODE_GAP_NS = 10_000_000
"""Between two modes laid one after another (their traces overlapped in time)."""
RUN_PID = 0
"""The process of the mode markers; rank r is process r + 1."""
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
    options = AnalysisOptions(steps=_steps_for(source.kind, steps), keep_spans=True, skip_bad=source.kind == "job")
    analyses = [(m.mode, analyze_dir(m.folder, options, warn=warn)) for m in source.modes]
    cut = steps is not None
    mode_shift_ns, prev_end = [], None
    for _, a in analyses:
        for r in a.ranks:
            with times_in_range(f"rank {r.rank}'s trace ({', '.join(r.files)})"):
                for t in (r.facts.first_event_us, r.facts.last_event_us) if r.facts is not None else ():
                    to_ns(t, 0, 0)  # raises TimeOutOfRange
        lo, hi = _extent_us(a, cut)
        for t in (lo, hi):
            if not -MAX_US < t < MAX_US:
                raise UserError(
                    f"the traces under {a.source} have events at {t:.4g} µs, beyond what a Perfetto trace holds (±{MAX_US:.0e} µs): "
                    "a corrupt trace; remove it from the folder"
                )
        lo_ns, hi_ns = round(lo * 1000), round(hi * 1000)
        shift = 0 if prev_end is None or lo_ns > prev_end else prev_end + MODE_GAP_NS - lo_ns
        mode_shift_ns.append(shift)
        prev_end = hi_ns + shift
    ranks: dict[int, Rank] = {}
    flow_ids = itertools.count(1)
    arrows: list[pt.Arrow] = []
    for (mode, a), mshift in zip(analyses, mode_shift_ns):
        drawn, base = {}, {}
        # Wait vs transfer where the causes could tell them apart (not on a rank without peers).
        split_known = {rank for rank, e in a.exposed.ranks.items() if e.wait_us is not None} if a.exposed is not None else set()
        waits = {x.rank: x.wait for x in a.causes.splits if x.rank in split_known} if a.causes is not None else {}
        for r in a.ranks:
            rk = ranks.setdefault(r.rank, Rank(r.rank, r.rank + 1, source.hosts.get(r.rank)))
            shift_ns = round(a.clocks.offset(r.rank) * 1000) - mshift
            origin = math.floor(r.facts.first_event_us) if r.facts is not None else 0
            # The analysis keeps any time a trace gives; the merged file's clock has a range.
            with times_in_range(f"rank {r.rank}'s trace ({', '.join(r.files)})"):
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
                tracks = pt.rank_tracks(r, functools.partial(to_ns, origin_us=origin, shift_ns=shift_ns), mode, wait=waits.get(r.rank))
            base[r.rank] = sum(len(t.slices) for _, t in rk.drawn)
            rk.drawn.append((mode, tracks))
            drawn[r.rank] = tracks
        mode_arrows = pt.call_arrows(a, drawn) + [x for r in a.ranks for x in pt.waited_arrows(r, drawn[r.rank])]
        arrows += [
            pt.Arrow(x.cat, x.name, (x.src[0], base[x.src[0]] + x.src[1]), (x.dst[0], base[x.dst[0]] + x.dst[1])) for x in mode_arrows
        ]
    return _write(source, out, analyses, mode_shift_ns, ranks, arrows, flow_ids, cut)


def _write(source, out, analyses, mode_shift_ns, ranks: dict[int, Rank], arrows, flow_ids, cut) -> PerfettoFile:
    firsts = [fs.t_min_ns for rk in ranks.values() for fs, *_ in rk.scans if fs.t_min_ns is not None]
    firsts += [min(s.start_ns for s in t.slices) for rk in ranks.values() for _, t in rk.drawn if t.slices]
    base = (min(firsts) // 1000) * 1000 if firsts else 0
    layouts = {rank: layout(rk) for rank, rk in ranks.items()}
    head: list[Event] = [meta_event(RUN_PID, RUN_PID, "process_name", "modes"), meta_event(RUN_PID, RUN_PID, "process_sort_index", -1)]
    head.append(meta_event(RUN_PID, 1, "thread_name", "modes"))
    for (mode, a), shift in zip(analyses, mode_shift_ns):
        lo, hi = _extent_us(a, cut)
        start = round(lo * 1000) + shift - base
        args = {"folder": str(next(m.folder for m in source.modes if m.mode == mode)), "ranks": [r.rank for r in a.ranks]}
        head.append(slice_event(RUN_PID, 1, start, round(hi * 1000) + shift - base - start, mode, args, cat="mode"))
    synth = {rank: [s for _, t in rk.drawn for s in t.slices] for rank, rk in ranks.items()}
    synth_tid = {}
    for rank, rk in sorted(ranks.items()):
        lay = layouts[rank]
        head.append(meta_event(rk.pid, 0, "process_name", f"rank {rank} ({rk.host})" if rk.host else f"rank {rank}"))
        head.append(meta_event(rk.pid, 0, "process_sort_index", rank))
        head.append(meta_event(rk.pid, 0, "process_labels", _clock_label(analyses, rank)))
        for i, (tid, name) in enumerate(lay.names):
            head += [meta_event(rk.pid, tid, "thread_name", name), meta_event(rk.pid, tid, "thread_sort_index", i)]
        ours = {name: rk.tracks[(OURS, name)] for name in pt.TRACKS}
        n_orig = sum(int(fs.x_keep.sum()) for fs, *_ in rk.scans)
        synth_tid[rank] = [lay.tid_of[(ours[s.track], lane)] for s, lane in zip(synth[rank], lay.lanes[n_orig:].tolist())]
    flows, drawn_arrows = arrow_events(arrows, ranks, synth, synth_tid, base, flow_ids)
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
            for rank, rk in sorted(ranks.items()):
                for chunk in drawn_events(rk, synth[rank], synth_tid[rank], base):
                    emit(chunk)
            for rank, rk in sorted(ranks.items()):
                rewrite_rank(rk, layouts[rank], base, emit)
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


@dataclass(frozen=True)
class _Clock:
    """A rank's clock against the reference rank's, as the process's args in the trace (field order: the keys')."""

    reference_rank: int
    clock_offset_us: float | None
    clock_uncertainty_us: float | None
    moved: bool


def _clock(a: TraceAnalysis, rank: int) -> _Clock:
    clocks = a.clocks
    unc = clocks.uncertainty_us.get(rank)
    return _Clock(clocks.reference_rank, _finite(clocks.offsets_us.get(rank)), _finite(unc), clocks.applies(rank))


def _finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else round(x, 3)


def _clock_label(analyses, rank: int) -> str:
    """The process's label: each mode's clock offset of the rank, and whether its times moved."""
    parts = []
    for mode, a in analyses:
        if any(r.rank == rank for r in a.ranks):
            c = _clock(a, rank)
            off = "unknown" if c.clock_offset_us is None else f"{c.clock_offset_us:,.1f} us"
            unc = "" if c.clock_uncertainty_us is None else f" ± {c.clock_uncertainty_us:,.1f} us"
            parts.append(f"{mode}: clock {off}{unc} vs rank {c.reference_rank} ({'moved' if c.moved else 'not moved'})")
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
                    {
                        "rank": r.rank,
                        "host": source.hosts.get(r.rank),
                        "steps": [s.step for s in r.steps],
                        **dataclasses.asdict(_clock(a, r.rank)),
                    }
                    for r in a.ranks
                ],
            }
            for (mode, a), shift in zip(analyses, mode_shift_ns)
        ],
    }


def is_merged(path: Path) -> bool:
    """Whether `path` is a file this command wrote (which it may replace; nothing else)."""
    try:
        with gzip.open(path) as f:
            return f.read(len(HEAD)) == HEAD
    except (OSError, EOFError):
        return False
