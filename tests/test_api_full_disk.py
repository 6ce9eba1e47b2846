"""A full disk under trace_handler never stops training: every write the training process makes
for us (the trace, its cleanup, the done mark) warns once and training goes on."""

from __future__ import annotations

import errno
import warnings

import torch

import profile_overlap
from profile_overlap.api import layout
from profile_overlap.core import io


def _full_disk(path, *args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device", str(path))


def test_a_full_disk_with_analyze_off_warns_once_and_training_goes_on(tmp_path, monkeypatch):
    handler = profile_overlap.trace_handler(tmp_path / "logs", analyze=False)  # no worker: the training process writes
    # The disk fills after the handler started: our gzip of the trace and every atomic write (the done mark) fail.
    monkeypatch.setattr(layout.gzip, "open", _full_disk)
    monkeypatch.setattr(io, "_create_beside", _full_disk)
    x = torch.randn(64, 64)
    prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], on_trace_ready=handler,
                                  schedule=torch.profiler.schedule(wait=0, warmup=1, active=1, repeat=1))  # fmt: skip
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        prof.start()
        for _ in range(3):
            x = x @ x / 64
            prof.step()
        prof.stop()  # raised OSError [Errno 28] from the done mark before
        handler.close()
    ours = [str(w.message) for w in caught if "profile_overlap" in str(w.message)]
    assert len(ours) == 1 and "Training goes on" in ours[0] and "No space left on device" in ours[0], ours
    assert not list(handler.job_dir.glob(layout.PARTIAL_PREFIX + "*"))  # nothing partial left
