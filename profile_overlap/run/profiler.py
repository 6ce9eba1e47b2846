"""Profiled steps: torch.profiler with a schedule, and a trace writer that never leaves a trace that
looks whole but is not (a full disk)."""

from __future__ import annotations

import errno
import gzip
import os
import shutil
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, schedule

from profile_overlap.core.errors import UserError
from profile_overlap.run.config import Config
from profile_overlap.run.teardown import wait_for_collectives
from profile_overlap.run.timing import sync


def _ends_with_brace(path: Path) -> bool:
    """A complete Chrome trace is one JSON object; Kineto's writer truncates silently when the
    disk fills, so check the last byte rather than trusting the export call."""
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        f.seek(max(0, f.tell() - 64))
        return f.read().rstrip().endswith(b"}")


def _trace_writer(trace_dir: Path, worker: str, *, use_gzip: bool, written: list[Path]):
    """Like torch's tensorboard_trace_handler (same <worker>.<span>.pt.trace.json[.gz] names, which
    torch-tb-profiler expects), but the trace is exported to a hidden partial file, checked, then
    compressed and renamed: a full disk leaves no trace that looks whole."""

    def handler(prof) -> None:
        name = f"{worker}.{time.time_ns()}.pt.trace.json"
        final = trace_dir / (name + (".gz" if use_gzip else ""))
        partial = trace_dir / f".partial-{name}"
        partial_gz = trace_dir / f".partial-{name}.gz"
        try:
            prof.export_chrome_trace(str(partial))
            if not partial.exists() or not _ends_with_brace(partial):
                raise OSError(errno.ENOSPC, "the profiler wrote an incomplete trace, most likely the disk is full")
            if use_gzip:
                with open(partial, "rb") as src, gzip.open(partial_gz, "wb", compresslevel=6) as dst:
                    shutil.copyfileobj(src, dst, length=1 << 20)
                os.replace(partial_gz, final)
                partial.unlink()
            else:
                os.replace(partial, final)
        except OSError as err:
            for leftover in trace_dir.glob(f".partial-{name}*"):  # ours, and Kineto's own .tmp
                leftover.unlink(missing_ok=True)
            raise UserError(
                f"writing trace {final} failed ({err.strerror or err}): free disk space or pick another --out", exit_code=1
            ) from None
        written.append(final)

    return handler


def _end_step_window(prof) -> None:
    """Close the open ProfilerStep range now, as prof.step() would (it skips a closed one)."""
    rec = getattr(prof, "step_rec_fn", None)
    if rec is not None:
        rec.__exit__(None, None, None)
        prof.step_rec_fn = None


def profiled_steps(step_fn, state, *, first_step: int, config: Config, trace_dir: Path, worker: str, device: torch.device) -> Path:
    """One profiler warmup step, then `config.schedule.profile_steps` recorded steps, traced to trace_dir.

    Collectives still in flight after the last recorded step (the split's all_gathers, meant for
    the next forward pass) are waited for after its ProfilerStep range closes and before the
    profiler stops: a c10d Work created while profiling holds the profiler's thread-local state,
    and if it outlives the session its destructor frees that state late and segfaults (torch
    2.13, gloo). On NCCL, waiting on a Work does not block the host, so the device is synchronized
    and NCCL's watchdog drained as well (teardown.wait_for_collectives).
    The analysis measures inside ProfilerStep ranges, so this wait is not counted.
    """
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    written: list[Path] = []
    with profile(
        activities=activities,
        schedule=schedule(wait=0, warmup=1, active=config.schedule.profile_steps, repeat=1),
        record_shapes=True,
        on_trace_ready=_trace_writer(trace_dir, worker, use_gzip=config.schedule.gzip, written=written),
    ) as prof:
        for i in range(config.schedule.profile_steps + 1):
            step_fn(state, first_step + i)
            if i == config.schedule.profile_steps:
                _end_step_window(prof)
                state.finish()
                wait_for_collectives(device)  # on NCCL, finish() only made the stream wait (run/teardown.py)
            prof.step()
    sync(device)
    assert len(written) == 1, f"expected one trace for {worker}, got {written}"
    return written[0]
