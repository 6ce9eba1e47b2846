"""A file's or a rank's collective calls as columns: a few numpy arrays rather than one Python
object per call (a 1 GB trace has about 300,000 calls, and objects cost ~200 bytes each where
columns cost ~60). Both read as sequences of CollectiveCall / CollectiveInstance where a
consumer wants objects (made on the fly); the per-call work reads the columns."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from profile_overlap.analysis.array_eq import ArrayEq
from profile_overlap.analysis.file.bandwidth import algbw_gbps, busbw_gbps
from profile_overlap.analysis.file.collectives import CollectiveCall, CollectiveInstance, CollectiveStats

UNKNOWN = -1
"""nbytes or group_size the trace does not give (None in the objects)."""
SEND, RECV = 1, -1
"""Calls.direction of a point-to-point send and recv."""


def _opt(values: list[int]) -> list[int | None]:
    return [None if v < 0 else v for v in values]


def _codes(table: dict[str, int], values: Sequence[str]) -> np.ndarray:
    return np.fromiter((table.setdefault(v, len(table)) for v in values), np.int32, len(values))


def _merged(tables: Sequence[tuple[str, ...]], codes: Sequence[np.ndarray]) -> tuple[tuple[str, ...], np.ndarray]:
    """Codes into several tables -> codes into one table (first seen first); -1 stays -1."""
    merged: dict[str, int] = {}
    out = []
    for table, code in zip(tables, codes):
        remap = np.append(_codes(merged, table), np.int32(-1))  # index -1 -> -1
        out.append(remap[code] if code.size else code.astype(np.int32))
    return tuple(merged), np.concatenate(out) if out else np.zeros(0, np.int32)


@dataclass(frozen=True, eq=False)
class Calls(ArrayEq):
    """Collective calls as read from one file (or a rank's files pooled), in the file's order."""

    kinds: tuple[str, ...]
    kind: np.ndarray
    """int32 code of each call's kind in `kinds`."""
    pgs: tuple[str, ...]
    pg: np.ndarray
    """int32 code of each call's process group in `pgs`."""
    nbytes: np.ndarray
    """int64; UNKNOWN when the trace does not size the call."""
    dur_us: np.ndarray
    start_us: np.ndarray
    launch_us: np.ndarray
    group_size: np.ndarray
    """int64; UNKNOWN when the trace does not say."""
    issued_us: np.ndarray
    """When the program issued it (CPU: its c10d op); NaN: at start_us (CollectiveCall.issued_us None)."""
    hints: tuple[str, ...]
    hint: np.ndarray
    """int32 code of each call's phase hint in `hints`; -1 for none."""
    peer: np.ndarray
    """int64: a point-to-point call's other rank (global), UNKNOWN for a collective or an unknown peer."""
    direction: np.ndarray
    """int8: SEND or RECV for a point-to-point call whose direction is known, else 0."""

    @staticmethod
    def build(
        *,
        kind: Sequence[str],
        pg: Sequence[str],
        nbytes: np.ndarray,
        dur_us: np.ndarray,
        start_us: np.ndarray,
        launch_us: np.ndarray,
        group_size: np.ndarray,
        issued_us: np.ndarray,
        hint: Sequence[str | None],
        peer: np.ndarray | None = None,
        direction: np.ndarray | None = None,
    ) -> Calls:
        kinds: dict[str, int] = {}
        pgs: dict[str, int] = {}
        hints: dict[str, int] = {}
        kind_code, pg_code = _codes(kinds, kind), _codes(pgs, pg)
        hint_code = np.fromiter((-1 if h is None else hints.setdefault(h, len(hints)) for h in hint), np.int32, len(hint))
        return Calls(
            kinds=tuple(kinds),
            kind=kind_code,
            pgs=tuple(pgs),
            pg=pg_code,
            nbytes=np.asarray(nbytes, np.int64),
            dur_us=np.asarray(dur_us, np.float64),
            start_us=np.asarray(start_us, np.float64),
            launch_us=np.asarray(launch_us, np.float64),
            group_size=np.asarray(group_size, np.int64),
            issued_us=np.asarray(issued_us, np.float64),
            hints=tuple(hints),
            hint=hint_code,
            peer=np.full(len(kind), UNKNOWN, np.int64) if peer is None else np.asarray(peer, np.int64),
            direction=np.zeros(len(kind), np.int8) if direction is None else np.asarray(direction, np.int8),
        )

    @staticmethod
    def concat(parts: Sequence[Calls]) -> Calls:
        kinds, kind = _merged([p.kinds for p in parts], [p.kind for p in parts])
        pgs, pg = _merged([p.pgs for p in parts], [p.pg for p in parts])
        hints, hint = _merged([p.hints for p in parts], [p.hint for p in parts])
        cat = {k: np.concatenate([getattr(p, k) for p in parts]) for k in _FLOATS_INTS}
        return Calls(kinds=kinds, kind=kind, pgs=pgs, pg=pg, hints=hints, hint=hint, **cat)

    def take(self, sel: np.ndarray) -> Calls:
        """The calls at the indices (or boolean mask) `sel`."""
        cols = {k: getattr(self, k)[sel] for k in (*_FLOATS_INTS, "kind", "pg", "hint")}
        return Calls(kinds=self.kinds, pgs=self.pgs, hints=self.hints, **cols)

    def issue_or_start(self) -> np.ndarray:
        """When each call was issued, else its start (CollectiveCall.issued_us or start_us)."""
        out: np.ndarray = np.where(np.isnan(self.issued_us), self.start_us, self.issued_us)
        return out

    def kind_names(self) -> list[str]:
        return [self.kinds[k] for k in self.kind.tolist()]

    def __len__(self) -> int:
        return int(self.start_us.size)

    def __iter__(self) -> Iterator[CollectiveCall]:
        hints = (*self.hints, None)  # code -1 -> None
        for k, pg, nb, dur, start, launch, group, issued, hint in zip(
            self.kind.tolist(),
            self.pg.tolist(),
            _opt(self.nbytes.tolist()),
            self.dur_us.tolist(),
            self.start_us.tolist(),
            self.launch_us.tolist(),
            _opt(self.group_size.tolist()),
            self.issued_us.tolist(),
            self.hint.tolist(),
        ):
            yield CollectiveCall(
                kind=self.kinds[k],
                pg=self.pgs[pg],
                nbytes=nb,
                dur_us=dur,
                start_us=start,
                launch_us=launch,
                group_size=group,
                issued_us=None if issued != issued else issued,
                phase_hint=hints[hint],
            )


_FLOATS_INTS = ("nbytes", "dur_us", "start_us", "launch_us", "group_size", "issued_us", "peer", "direction")


@dataclass(frozen=True, eq=False)
class Instances(ArrayEq):
    """One rank's calls in time order, each numbered among the calls of its kind and process
    group (`number_calls`): what cross-rank matching reads. Iterates as CollectiveInstance."""

    kinds: tuple[str, ...]
    kind: np.ndarray
    pgs: tuple[str, ...]
    pg: np.ndarray
    seq: np.ndarray
    """int64: order among the rank's calls of the same kind in the same process group."""
    nbytes: np.ndarray
    """int64; UNKNOWN when the trace does not size the call."""
    dur_us: np.ndarray
    start_us: np.ndarray
    group_size: np.ndarray
    """int64; UNKNOWN when the trace does not say."""

    def take(self, sel: np.ndarray) -> Instances:
        cols = {k: getattr(self, k)[sel] for k in ("kind", "pg", "seq", "nbytes", "dur_us", "start_us", "group_size")}
        return Instances(kinds=self.kinds, pgs=self.pgs, **cols)

    def __len__(self) -> int:
        return int(self.start_us.size)

    def __iter__(self) -> Iterator[CollectiveInstance]:
        for k, pg, seq, nb, dur, start, group in zip(
            self.kind.tolist(),
            self.pg.tolist(),
            self.seq.tolist(),
            _opt(self.nbytes.tolist()),
            self.dur_us.tolist(),
            self.start_us.tolist(),
            _opt(self.group_size.tolist()),
        ):
            yield CollectiveInstance(kind=self.kinds[k], pg=self.pgs[pg], seq=seq, nbytes=nb, dur_us=dur, start_us=start, group_size=group)


def number_calls(calls: Calls, *, rank: int | None = None) -> Instances:
    """The calls in time order (stable), each numbered among the calls of its kind and process group.
    A point-to-point call of `rank` with a known peer and direction is numbered on its link
    instead: the group "<pg> <sender>-><receiver>", so that the k-th send of a to b meets the
    k-th recv of b from a on the other rank (Instances.pgs gains the links)."""
    pgs = calls.pgs
    pg = calls.pg
    linked = (calls.direction != 0) & (calls.peer >= 0) & (rank is not None)
    if linked.any():
        names = {name: i for i, name in enumerate(pgs)}
        src = np.where(calls.direction == SEND, rank if rank is not None else 0, calls.peer)
        dst = np.where(calls.direction == SEND, calls.peer, rank if rank is not None else 0)
        pg = pg.copy()
        for i in linked.nonzero()[0].tolist():
            pg[i] = names.setdefault(f"{pgs[pg[i]]} {src[i]}->{dst[i]}", len(names))
        pgs = tuple(names)
    order = calls.start_us.argsort(kind="stable")
    n = order.size
    key = pg[order].astype(np.int64) * max(len(calls.kinds), 1) + calls.kind[order]
    by_key = key.argsort(kind="stable")  # time order kept within a key
    sorted_key = key[by_key]
    new = np.ones(n, dtype=bool)
    new[1:] = sorted_key[1:] != sorted_key[:-1]
    first = np.maximum.accumulate(np.where(new, np.arange(n), 0)) if n else np.zeros(0, np.int64)
    seq = np.empty(n, dtype=np.int64)
    seq[by_key] = np.arange(n) - first
    return Instances(
        kinds=calls.kinds,
        kind=calls.kind[order],
        pgs=pgs,
        pg=pg[order],
        seq=seq,
        nbytes=calls.nbytes[order],
        dur_us=calls.dur_us[order],
        start_us=calls.start_us[order],
        group_size=calls.group_size[order],
    )


def most_common(values: np.ndarray) -> int | None:
    """The most frequent value, the first met on a tie (as Counter.most_common); None if empty."""
    if not values.size:
        return None
    if values.min() == values.max():  # the usual case: one value (no sort)
        return int(values[0])
    uniq, first, count = np.unique(values, return_index=True, return_counts=True)
    best = np.flatnonzero(count == count.max())
    return int(uniq[best[np.argmin(first[best])]])


def collective_stats(instances: Instances, *, default_group_size: int | None = None) -> tuple[CollectiveStats, ...]:
    """Per kind: count, total bytes and time, and the bandwidths of the total (sums in time order)."""
    out = []
    codes = np.unique(instances.kind).tolist()
    for code in sorted(codes, key=lambda c: instances.kinds[c]):
        # One kind only (a DDP job's all_reduce): its columns are read in place, not copied (at 1 GB of
        # trace 305,200 calls, then the peak of finish_rank).
        sel = slice(None) if len(codes) == 1 else np.flatnonzero(instances.kind == code)
        nb, dur, groups = instances.nbytes[sel], instances.dur_us[sel], instances.group_size[sel]
        sized = nb >= 0
        every = bool(sized.all())
        # Python's sums in time order over the buffers (memoryviews): the same numbers one at a time, not a list of them all.
        nbytes = (sum(nb.data) if every else sum(nb[sized].data)) if sized.any() else None
        sized_us = sum(dur.data) if every else sum(dur[sized].data)
        del sized
        positive = groups > 0
        n = most_common(groups if positive.all() else groups[positive])
        del positive
        n = default_group_size if n is None else n
        kind = instances.kinds[code]
        out.append(
            CollectiveStats(
                kind=kind,
                count=int(nb.size),
                nbytes=nbytes,
                dur_us=sized_us if every else sum(dur.data),
                algbw_gbps=algbw_gbps(nbytes, sized_us) if nbytes else None,
                busbw_gbps=busbw_gbps(kind, nbytes, sized_us, n) if nbytes else None,
                group_size=n,
            )
        )
    return tuple(out)
