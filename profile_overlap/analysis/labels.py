"""Labels for events: the record_function annotation open around them (`Labeller.label`, for the
timeline's spans), and the phase that the engine labels around a collective name (`Labeller.hint`)."""

from __future__ import annotations

import numpy as np

from profile_overlap.analysis.classify import AUTOGRAD_FRAME_RE, PROFILER_STEP_RE, phase_hint
from profile_overlap.analysis.trace import CPU_OP, USER_ANNOTATION, Trace
from profile_overlap.core import intervals as iv


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
            codes = np.array([self.code(cpu.names[cpu.name[r]]) for r in rows], dtype=np.int32)
            starts, ends = cpu.ts[rows], cpu.ts[rows] + cpu.dur[rows]
            self.by_tid[int(tid)] = (starts, ends, codes, _parents(starts, ends))

    def hint(self, t: float, tid: int) -> str | None:
        """classify.phase_hint of the labels open on thread `tid` at time `t`."""
        names = []
        ranges = self.by_tid.get(int(tid))
        if ranges is not None and not np.isnan(t):
            starts, ends, codes, parent = ranges
            j = int(np.searchsorted(starts, t, side="right")) - 1
            while j >= 0:
                if ends[j] > t:
                    names.append(self.names[codes[j]])
                j = int(parent[j])
        frames = self.autograd.get(int(tid))
        in_autograd = frames is not None and not np.isnan(t) and bool(iv.covers(frames, np.array([t]))[0])
        return phase_hint(names, in_autograd=in_autograd)

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
        """t: event times; tid: thread codes (-1: none); fallback: label codes to use otherwise."""
        out = fallback.astype(np.int32, copy=True)
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
        return out


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
