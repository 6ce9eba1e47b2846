"""Labels for events: the record_function annotation open around them (`Labeller.label`, for the
timeline's spans), and the phase that the engine labels around a collective name (`Labeller.hints`)."""

from __future__ import annotations

import numpy as np

from profile_overlap.analysis.read.classify import AUTOGRAD_FRAME_RE, PROFILER_STEP_RE, engine_range
from profile_overlap.analysis.read.trace import CPU_OP, USER_ANNOTATION, Trace
from profile_overlap.core import intervals as iv

BLOCK = 1 << 16
"""Events that `Labeller.label` and `Labeller.hints` walk up their labels at once."""


class Labeller:
    """Label events with the innermost record_function annotation (not ProfilerStep) open on
    their thread when they started (or were launched); else with their own name."""

    def __init__(self, trace: Trace) -> None:
        cpu = trace.cpu
        self.labels: dict[str, int] = {}
        self._names: list[str] = []
        self.by_tid: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}
        self.autograd: dict[int, iv.Union] = {}
        """Per thread, the union of autograd's engine frames (where gradient hooks issue collectives)."""
        if not len(cpu):
            return
        is_frame = np.array([bool(AUTOGRAD_FRAME_RE.search(n)) for n in cpu.names])[cpu.name] & (cpu.cat == CPU_OP)
        for tid in np.unique(cpu.tid[is_frame]):
            rows = np.flatnonzero(is_frame & (cpu.tid == tid))
            self.autograd[int(tid)] = iv.union(cpu.ts[rows], cpu.ts[rows] + cpu.dur[rows])
        is_step = np.array([bool(PROFILER_STEP_RE.match(n)) for n in cpu.names])
        sel = (cpu.cat == USER_ANNOTATION) & ~is_step[cpu.name]
        for tid in np.unique(cpu.tid[sel]):
            rows = np.flatnonzero(sel & (cpu.tid == tid))
            rows = rows[np.argsort(cpu.ts[rows], kind="stable")]
            # Each name coded once, in the order the rows first meet it (the order a code per row gives).
            names = cpu.name[rows]
            distinct, first = np.unique(names, return_index=True)
            code_of = np.zeros(int(distinct[-1]) + 1, dtype=np.int32)
            for k in np.argsort(first, kind="stable").tolist():
                code_of[distinct[k]] = self.code(cpu.names[distinct[k]])
            codes = code_of[names]
            starts, ends = cpu.ts[rows], cpu.ts[rows] + cpu.dur[rows]
            self.by_tid[int(tid)] = (starts, ends, codes, _parents(starts, ends))
        # Per label code (those of by_tid are all coded by now): the phase its engine range names, as
        # an index into _phases, or -1 (classify.engine_range, once per label rather than per call).
        self._phases = sorted({hit[0] for n in self.labels if (hit := engine_range(n)) is not None})
        self._engine_phase = np.array(
            [self._phases.index(hit[0]) if (hit := engine_range(n)) is not None else -1 for n in self.labels] or [-1], dtype=np.int64
        )

    def hints(self, t: np.ndarray, tid: np.ndarray) -> list[str | None]:
        """Per event, classify.phase_hint of the labels open on its thread at its time (t: times,
        NaN for unknown; tid: thread codes, -1 for none): the phase of the innermost open engine
        range, else "backward" inside autograd's frames, else None. Per thread, the events walk up
        their enclosing labels together, BLOCK events at a time (at 1 GB of trace, 305,200 calls on
        one thread, the whole at once held 27 MB of temporaries)."""
        t, tid = np.asarray(t, dtype=np.float64), np.asarray(tid)
        out: list[str | None] = []
        for lo in range(0, t.size, BLOCK):
            out += self._hints(t[lo : lo + BLOCK], tid[lo : lo + BLOCK].astype(np.int64))
        return out

    def _hints(self, t: np.ndarray, tid: np.ndarray) -> list[str | None]:
        hit = np.full(t.size, -1, dtype=np.int64)  # index into _phases
        known = ~np.isnan(t)
        for code, (starts, ends, codes, parent) in self.by_tid.items():
            rows = np.flatnonzero((tid == code) & known)
            if rows.size == 0:
                continue
            at = t[rows]
            j = np.searchsorted(starts, at, side="right") - 1
            found = np.full(rows.size, -1, dtype=np.int64)
            live = np.flatnonzero(j >= 0)
            while live.size:
                jj = j[live]
                phase = self._engine_phase[codes[jj]]
                ok = (ends[jj] > at[live]) & (phase >= 0)
                found[live[ok]] = phase[ok]
                j[live] = np.where(ok, -1, parent[jj])
                live = live[j[live] >= 0]
            hit[rows] = found
        out: list[str | None] = [None if h < 0 else self._phases[h] for h in hit.tolist()]
        for code, frames in self.autograd.items():
            rows = np.flatnonzero((tid == code) & known & (hit < 0))
            if rows.size:
                for r in rows[iv.covers(frames, t[rows])].tolist():
                    out[r] = "backward"
        return out

    @property
    def names(self) -> list[str]:
        if len(self._names) != len(self.labels):
            self._names = list(self.labels)
        return self._names

    def code(self, label: str) -> int:
        code = self.labels.get(label)
        if code is None:
            code = self.labels[label] = len(self.labels)
        return code

    def label(self, t: np.ndarray, tid: np.ndarray, fallback: np.ndarray) -> np.ndarray:
        """t: event times; tid: thread codes (-1: none); fallback: label codes to use otherwise.
        BLOCK events at a time (at 1 GB of trace, 610,400 kernels: 15 MB of temporaries at once)."""
        out = fallback.astype(np.int32, copy=True)
        for lo in range(0, out.size, BLOCK):
            self._label(t[lo : lo + BLOCK], tid[lo : lo + BLOCK], out[lo : lo + BLOCK])
        return out

    def _label(self, t: np.ndarray, tid: np.ndarray, out: np.ndarray) -> None:
        for code, (starts, ends, labels, parent) in self.by_tid.items():
            rows = np.flatnonzero(tid == code)
            if rows.size == 0:
                continue
            at = t[rows]
            # The last range opened before t; while it closed before t, its enclosing range.
            j = np.searchsorted(starts, at, side="right") - 1
            while True:
                closed = (j >= 0) & (ends[np.maximum(j, 0)] <= at)
                if not closed.any():
                    break
                j[closed] = parent[j[closed]]
            hit = j >= 0
            out[rows[hit]] = labels[j[hit]]


def _parents(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """For ranges in start order on one thread (properly nested), the index of each one's
    innermost enclosing range, or -1."""
    parent = np.full(starts.size, -1, dtype=np.int64)
    stack: list[int] = []
    for i, (a, b) in enumerate(zip(starts.tolist(), ends.tolist())):
        while stack and ends[stack[-1]] <= a:
            stack.pop()
        parent[i] = stack[-1] if stack else -1
        if b > a:
            stack.append(i)
    return parent
