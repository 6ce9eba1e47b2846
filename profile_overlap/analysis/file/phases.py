"""A trace's phase windows: the step's forward/backward/optimizer labels where it has them, else
the phases found from what torch records anyway (docs/metrics.md "Phases").

Labels win step by step: a `ProfilerStep` with a label keeps its labelled windows, one without
gets windows inferred from, in this order of trust, the engines' own ranges (FSDP2, DDP,
torch.optim, our schedules; classify.ENGINE_RANGES), then autograd's engine frames (backward),
then the step itself (forward: from the step's start, or the end of an optimizer range before
the backward, to the backward's start). Each window keeps the source it came from.

Every window is found on the CPU's clock, from ranges on the main thread (labels) or any thread
(evidence). On GPU it then moves to the device (`_on_device`): the span of the kernels launched,
from any thread, while it was open. Kineto's own device copy of a label (gpu_user_annotation) is
not used: it gets only the kernels of the innermost annotation open on the launching thread, and
none launched by another thread, so a backward label's copy lacks the kernels of autograd's
thread (on HTA's DDP trace, 633 of the range's 102,956 µs).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from profile_overlap.analysis.file.steps import in_launch_order
from profile_overlap.analysis.read.classify import (
    AUTOGRAD_SOURCE,
    BACKWARD_FRAME_RE,
    GRADIENT_SEED_OP,
    STEP_SOURCE,
    engine_range,
    is_phase_label,
    phase_of,
)
from profile_overlap.analysis.read.trace import CPU_OP, USER_ANNOTATION, Trace
from profile_overlap.core import intervals as iv
from profile_overlap.core.codes import coded_in
from profile_overlap.core.modes import PHASES

LABELS_SOURCE = "labels"
"""The source of a window taken from a forward/backward/optimizer label (or, in a labelled step,
torch.optim's Optimizer.step range, which has always counted as the optimizer's label)."""
FORWARD, BACKWARD, OPTIMIZER = (PHASES.index(p) for p in ("forward", "backward", "optimizer"))


def unions_of_phases(phase: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[iv.Union, ...]:
    """Per classify.PHASES, the union of that phase's windows (phase, start, end: their columns, as
    in PhaseWindows), empty for a phase without any: built once per rank and shared by its measures."""
    return tuple(iv.union(start[phase == i], end[phase == i]) for i in range(len(PHASES)))


@dataclass(frozen=True)
class PhaseWindows:
    """Phase windows as columns, one row per range (a phase may have several in a step)."""

    phase: np.ndarray
    """Index into classify.PHASES."""
    start: np.ndarray
    end: np.ndarray
    source: np.ndarray
    """Where each window came from (object array of str): LABELS_SOURCE, an engine's name
    (classify.ENGINE_RANGES), AUTOGRAD_SOURCE or STEP_SOURCE."""

    @staticmethod
    def of(rows: list[tuple[int, float, float, str]]) -> PhaseWindows:
        rows = sorted(rows, key=lambda r: (r[1], r[0]))
        return PhaseWindows(
            np.array([r[0] for r in rows], dtype=np.int64),
            np.array([r[1] for r in rows], dtype=np.float64),
            np.array([r[2] for r in rows], dtype=np.float64),
            np.array([r[3] for r in rows], dtype=object),
        )


def phase_windows(
    trace: Trace, main: int | None, steps: list[tuple[int, float, float]], kernels: tuple[np.ndarray, ...] | None = None
) -> PhaseWindows:
    """Every phase window of one trace. steps: (number, start, end) of its ProfilerStep ranges on
    the CPU. kernels: on GPU traces, (launch, start, end) of the kernels that count, to move each
    window from the CPU's time to the device's (the span of the kernels launched inside it); None
    on CPU."""
    labelled = _labelled_ranges(trace, main)
    real = [(s, e) for p, s, e, is_label in labelled if is_label]
    unlabelled = [(lo, hi) for _, lo, hi in steps if not any(s < hi and e > lo for s, e in real)]
    # In a step without labels, torch.optim's Optimizer.step is evidence (below), not a label.
    rows = [(p, s, e, LABELS_SOURCE) for p, s, e, is_label in labelled if is_label or not any(s < hi and e > lo for lo, hi in unlabelled)]
    if unlabelled:
        evidence = _evidence(trace)
        seeds = _gradient_seeds(trace, main)
        for lo, hi in unlabelled:
            rows += _infer(evidence.starting_in(lo, hi), lo, hi, seeds)
    if kernels is not None:
        rows = _on_device(rows, _by_launch(kernels))
    return PhaseWindows.of(rows)


def _labelled_ranges(trace: Trace, main: int | None) -> list[tuple[int, float, float, bool]]:
    """(phase, start, end, is a real label) of every labelled range (classify.phase_of) on the
    main thread, on the CPU's clock (on GPU traces too: `phase_windows` moves them to the device).
    torch.optim's Optimizer.step counts here too (is a real label: False)."""
    cpu = trace.cpu
    if not len(cpu) or main is None:
        return []
    code_phase = {i: PHASES.index(p) for i, n in enumerate(cpu.names) if (p := phase_of(n))}
    if not code_phase:
        return []
    rows = np.flatnonzero(coded_in(cpu.name, code_phase, len(cpu.names)) & (cpu.tid == main) & (cpu.cat == USER_ANNOTATION))
    real = {i for i in code_phase if is_phase_label(cpu.names[i])}
    return [(code_phase[int(cpu.name[r])], float(cpu.ts[r]), float(cpu.ts[r] + cpu.dur[r]), int(cpu.name[r]) in real) for r in rows]


@dataclass(frozen=True, eq=False)
class _Evidence:
    """Ranges that place a phase in a step without labels, in start order (columns of equal length)."""

    phase: np.ndarray
    """Index into PHASES."""
    source: np.ndarray
    """Index into `names`."""
    start: np.ndarray
    end: np.ndarray
    names: list[str]
    """The sources (engine names, AUTOGRAD_SOURCE), each once."""

    def starting_in(self, lo: float, hi: float) -> _Evidence:
        i, j = self.start.searchsorted([lo, hi], side="left")
        return _Evidence(self.phase[i:j], self.source[i:j], self.start[i:j], self.end[i:j], self.names)


def _evidence(trace: Trace) -> _Evidence:
    """The evidence columns, in start order, of the engines' ranges (user
    annotations on any thread) and autograd's backward frames (CPU ops on any thread: the calling
    thread on CPU, autograd's own on GPU)."""
    cpu = trace.cpu
    sources: list[str] = []
    phase_of_code = np.full(len(cpu.names), -1, dtype=np.int64)
    source_of_code = np.full(len(cpu.names), -1, dtype=np.int64)
    cat_of_code = np.full(len(cpu.names), -1, dtype=np.int64)
    for i, name in enumerate(cpu.names):
        if (hit := engine_range(name)) is not None:
            phase, source, cat = PHASES.index(hit[0]), hit[1], USER_ANNOTATION
        elif BACKWARD_FRAME_RE.match(name):
            phase, source, cat = BACKWARD, AUTOGRAD_SOURCE, CPU_OP
        else:
            continue
        if source not in sources:
            sources.append(source)
        phase_of_code[i], source_of_code[i], cat_of_code[i] = phase, sources.index(source), cat
    if not sources:
        return _Evidence(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0), sources)
    rows = np.flatnonzero(cat_of_code[cpu.name] == cpu.cat)
    rows = rows[cpu.ts[rows].argsort(kind="stable")]
    code = cpu.name[rows]
    return _Evidence(phase_of_code[code], source_of_code[code], cpu.ts[rows], cpu.ts[rows] + cpu.dur[rows], sources)


def _gradient_seeds(trace: Trace, main: int | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """On the main thread, each `aten::ones_like` (in start order): its start, its end, and the start
    of the first CPU op after its end (inf: none; -inf when its end is unknown). `loss.backward()`
    seeds the backward with the gradient ones_like(loss) before autograd's engine runs its first node."""
    cpu = trace.cpu
    none = np.zeros(0), np.zeros(0), np.zeros(0)
    codes = [i for i, n in enumerate(cpu.names) if n == GRADIENT_SEED_OP]
    if main is None or not len(cpu) or not codes:
        return none
    ops = (cpu.tid == main) & (cpu.cat == CPU_OP)
    seeds = np.flatnonzero(ops & coded_in(cpu.name, codes, len(cpu.names)))
    if not seeds.size:
        return none
    seeds = seeds[cpu.ts[seeds].argsort(kind="stable")]
    seed_start, seed_end = cpu.ts[seeds], cpu.ts[seeds] + cpu.dur[seeds]
    starts = cpu.ts[ops]
    del ops
    starts.sort()  # in place, NaN last: the ops' starts are needed only for this, not kept
    finite = int(starts.searchsorted(np.inf, side="right"))
    i = starts[:finite].searchsorted(seed_end, side="right")
    following = np.where(i < finite, starts[np.minimum(i, max(finite - 1, 0))], np.inf)
    following[np.isnan(seed_end)] = -np.inf
    return seed_start, seed_end, following


def _seeded_at(b0: float, seeds: tuple[np.ndarray, np.ndarray, np.ndarray]) -> float:
    """The backward's start: its first evidence b0, or earlier, the start of the gradient seed
    (`aten::ones_like`) when that is the main thread's last operator before b0 (no op starts
    after the seed's end and before b0)."""
    seed_start, seed_end, following = seeds
    k = int(seed_start.searchsorted(b0, side="left")) - 1
    if k < 0 or seed_end[k] > b0:
        return b0
    return float(seed_start[k]) if following[k] >= b0 else b0


def _infer(
    ev: _Evidence,
    lo: float,
    hi: float,
    seeds: tuple[np.ndarray, np.ndarray, np.ndarray],
) -> list[tuple[int, float, float, str]]:
    """The phase windows of one step [lo, hi) without labels, from the evidence starting in it;
    each window keeps the source of the evidence that opens it.

    backward: from its first evidence (autograd frame or engine range), or from the gradient seed
    of `loss.backward()` just before it (_seeded_at), to the optimizer's start, or to its last
    evidence's end when no optimizer follows. optimizer: from the first optimizer range after the
    backward's start to the last one's end; optimizer ranges that end before the backward starts
    (a zero_grad at the step's start) are windows of their own. forward: from its first engine
    range, else from the step's start or the end of such an early optimizer range, to the
    backward's start (without a backward: the optimizer's start, or its last range's end).
    """
    phase, source, start, end, names = ev.phase, ev.source, ev.start, ev.end, ev.names
    rows: list[tuple[int, float, float, str]] = []
    backward = np.flatnonzero(phase == BACKWARD)
    b0 = _seeded_at(float(start[backward[0]]), seeds) if backward.size else None  # evidence is in start order
    optimizer = np.flatnonzero(phase == OPTIMIZER)
    early = optimizer[end[optimizer] <= b0] if b0 is not None else optimizer[:0]
    late = np.setdiff1d(optimizer, early)
    rows += [(OPTIMIZER, float(start[i]), float(end[i]), names[source[i]]) for i in early]
    o0 = float(start[late[0]]) if late.size else None
    until = b0 if b0 is not None else o0 if o0 is not None else hi
    forward = np.flatnonzero((phase == FORWARD) & (start < until))
    if forward.size:
        end_f = until if (b0 is not None or o0 is not None) else float(end[forward].max())
        rows.append((FORWARD, float(start[forward[0]]), end_f, names[source[forward[0]]]))
    elif b0 is not None:
        rows.append((FORWARD, max([lo, *end[early].tolist()]), b0, STEP_SOURCE))
    if b0 is not None:
        end_b = o0 if o0 is not None else float(end[backward].max())
        rows.append((BACKWARD, b0, end_b, names[source[backward[0]]]))
    if o0 is not None:
        rows.append((OPTIMIZER, o0, float(end[late].max()), names[source[late[0]]]))
    return [(p, max(a, lo), min(b, hi), s) for p, a, b, s in rows if min(b, hi) > max(a, lo)]


def _by_launch(kernels: tuple[np.ndarray, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(launch, start, end) of the kernels with a known launch, in launch order."""
    launch, start, end = kernels
    if in_launch_order(launch):
        return launch, start, end  # already so (events.extract sorts them): no copies
    known = ~np.isnan(launch)
    order = launch[known].argsort(kind="stable")
    return launch[known][order], start[known][order], end[known][order]


def _on_device(rows: list[tuple[int, float, float, str]], device: tuple[np.ndarray, ...]) -> list[tuple[int, float, float, str]]:
    """GPU: each CPU window [a, b) -> the span on the device, from the first start to the last
    end, of the kernels whose launch (on any thread) lies in [a, b); dropped when it launched none.
    device: `_by_launch` of the kernels."""
    launch, start, end = device
    out = []
    for p, a, b, source in rows:
        i, j = launch.searchsorted([a, b], side="left")
        if j > i:
            out.append((p, float(start[i:j].min()), float(end[i:j].max()), source))
    return out
