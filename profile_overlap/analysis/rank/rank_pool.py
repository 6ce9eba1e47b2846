"""A rank's events pooled from its trace files (successive profiler spans of one worker), and the
window of --steps cut from them: the first two parts of per_rank.finish_rank."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from profile_overlap.analysis.file.call_columns import Calls, Instances
from profile_overlap.analysis.file.events import EventIntervals, FileEvents
from profile_overlap.analysis.file.hta_compat import hta_filter
from profile_overlap.analysis.rank.rank_input import selected_steps
from profile_overlap.core import intervals as iv


@dataclass(frozen=True)
class Pooled:
    """Every file's events of one rank, end to end (labels renumbered into one table)."""

    labels: tuple[str, ...]
    comm: EventIntervals
    compute: EventIntervals
    step_num: np.ndarray
    step_start: np.ndarray
    step_end: np.ndarray
    step_cpu_start: np.ndarray
    calls: Calls


def pool(files: Sequence[FileEvents], *, hta_compat: bool, notes: list[str]) -> Pooled:
    """`files` (sorted by time) pooled; with hta_compat, filtered as HTA counts (a note appended to `notes`)."""
    labels, remap = _pool_labels(files)
    comm = _cat([f.comm for f in files], remap)
    compute = _cat([f.compute for f in files], remap)
    step_num = np.concatenate([f.step_num for f in files])
    step_start = np.concatenate([f.step_start for f in files])
    step_end = np.concatenate([f.step_end for f in files])
    step_cpu_start = np.concatenate([f.step_cpu_start for f in files])
    calls = Calls.concat([f.calls for f in files]) if len(files) > 1 else files[0].calls
    if hta_compat:
        cut = hta_filter(comm, compute, calls, step_num, step_cpu_start)
        comm, compute, calls, keep = cut.comm, cut.compute, cut.calls, cut.keep
        step_num, step_start, step_end, step_cpu_start = step_num[keep], step_start[keep], step_end[keep], step_cpu_start[keep]
        if cut.note:
            notes.append(cut.note)
    return Pooled(labels, comm, compute, step_num, step_start, step_end, step_cpu_start, calls)


def busy(files: Sequence[FileEvents], p: Pooled) -> tuple[iv.Union, iv.Union]:
    """The union of communication and of compute; no c10d time counts as compute, even of an
    operator that only partly overlaps a c10d operator."""
    exclude = iv.union(np.concatenate([f.exclude[0] for f in files]), np.concatenate([f.exclude[1] for f in files]))
    return iv.union(p.comm.start, p.comm.end), iv.difference(iv.union(p.compute.start, p.compute.end), exclude)


class StepWindow(NamedTuple):
    """What of a pooled rank lies in the --steps window (everything when none was given)."""

    windows: iv.Union | None
    """The selected steps' time, or None without --steps."""
    step_num: np.ndarray
    step_start: np.ndarray
    step_end: np.ndarray
    calls: Calls
    instances: Instances


def step_window(p: Pooled, every_call: Instances, *, steps: tuple[int | None, int | None] | None, rank: int) -> StepWindow:
    """The calls and steps inside `steps` (first, last); `every_call`: the calls numbered over the whole trace."""
    if steps is None:
        return StepWindow(None, p.step_num, p.step_start, p.step_end, p.calls, every_call)
    sel = selected_steps(p.step_num, steps, rank=rank)
    step_num, step_start, step_end = p.step_num[sel], p.step_start[sel], p.step_end[sel]
    windows = iv.union(step_start, step_end)
    calls = p.calls.take(iv.covers(windows, p.calls.start_us))
    instances = every_call.take(iv.covers(windows, every_call.start_us))
    return StepWindow(windows, step_num, step_start, step_end, calls, instances)


def _pool_labels(files: Sequence[FileEvents]) -> tuple[tuple[str, ...], list[np.ndarray]]:
    labels: dict[str, int] = {}
    remap = []
    for f in files:
        remap.append(np.array([labels.setdefault(lab, len(labels)) for lab in f.labels] or [0], dtype=np.int32))
    return tuple(labels), remap


def _cat(parts: list[EventIntervals], remap: list[np.ndarray]) -> EventIntervals:
    if len(parts) == 1 and np.array_equal(remap[0], np.arange(remap[0].size)):
        return parts[0]  # one file, its labels coded as they were: its own columns, not a copy (28 bytes an event)
    return EventIntervals(
        np.concatenate([p.start for p in parts]),
        np.concatenate([p.end for p in parts]),
        np.concatenate([p.launch for p in parts]),
        np.concatenate([m[p.label] if p.label.size else p.label for p, m in zip(parts, remap)]),
    )
