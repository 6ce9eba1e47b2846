"""`analyze --hta-compat`: the numbers of Holistic Trace Analysis's get_comm_comp_overlap, by its
own rules (its last-step filter and its whole-microsecond times)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from profile_overlap.analysis.file.call_columns import Calls
from profile_overlap.analysis.file.events import EventIntervals


def hta_round(x: EventIntervals) -> EventIntervals:
    # HTA's parser stores times as whole microseconds: start rounded up, end rounded down.
    start = np.ceil(x.start)
    end = np.maximum(np.floor(x.end), start)
    return EventIntervals(start, end, np.ceil(x.launch), x.label)


@dataclass(frozen=True, eq=False)
class HtaCut:
    """What of a rank HTA counts: the two classes and the calls filtered, the steps kept, and why."""

    comm: EventIntervals
    compute: EventIntervals
    calls: Calls
    keep: np.ndarray
    """A mask over the rank's steps: which ones HTA keeps."""
    note: str | None
    """What was dropped, for the rank's notes; None when nothing was."""


def hta_filter(
    comm: EventIntervals,
    compute: EventIntervals,
    calls: Calls,
    step_num: np.ndarray,
    step_cpu_start: np.ndarray,
) -> HtaCut:
    """Holistic Trace Analysis's default (`include_last_profiler_step=False`), reproduced:
    HTA's `Trace._filter_irrelevant_gpu_kernels` keeps the CPU events that start before the
    *start* of the last ProfilerStep, then keeps only the GPU kernels whose `correlation`
    matches one of them. So a kernel belongs to the step of the runtime call that launched it,
    not to the step its own timestamp falls in, and a kernel with no launch event in the trace
    is dropped too. HTA's parser also rounds times to whole microseconds (start up, end
    down). With these two rules we reproduce HTA's 11.81 / 20.05 (trace_filter) and 14.31
    (nccl_data); by kernel timestamps alone nccl_data gives 14.76. HTA does nothing when a rank
    has fewer than two steps. On CPU traces (which HTA does not analyse) the same cut applies to
    the events' own start times. step_cpu_start: the `ProfilerStep` ranges' starts on the CPU
    (on GPU the step windows are on the device, but HTA cuts at the CPU's). Returns the two
    classes and the calls filtered, which steps to keep (a mask) and a note."""
    comm, compute = hta_round(comm), hta_round(compute)
    if step_num.size < 2:
        return HtaCut(comm, compute, calls, np.ones(step_num.size, dtype=bool), None)
    last = int(np.argmax(step_cpu_start))
    cut = math.ceil(step_cpu_start[last])
    comm = comm.take(comm.launch < cut)  # NaN (no launch event) compares False: dropped, as in HTA
    compute = compute.take(compute.launch < cut)
    calls = calls.take(np.ceil(calls.launch_us) < cut)  # NaN (no launch event): dropped, as the kernels
    keep = np.arange(step_num.size) != last
    note = f"--hta-compat: dropped the last profiler step (ProfilerStep#{int(step_num[last])}) as HTA does"
    return HtaCut(comm, compute, calls, keep, note)
