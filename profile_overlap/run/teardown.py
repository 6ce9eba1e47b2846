"""What a profiled job needs so that `destroy_process_group()` really ends its process group.

`torch.distributed.nn.functional` declares its collectives with `group=group.WORLD` as a default
argument, and Python evaluates a default once, when the module is imported. torch.profiler imports
that module on its first trace (prepare_trace touches torch._inductor, which pulls it in). In a job
whose process group exists by then, which is every ordinary script, ten of its functions' defaults
hold the default ProcessGroup for the life of the interpreter. destroy_process_group drops torch's
own references but cannot free the group: gloo's worker threads (pt_gloo_runloop) and its TCP loop
live on, and the group is destroyed during interpreter finalization. A worker still releasing its
last work item then (a tensor's Python object needs the GIL, and a finalizing interpreter answers
with pthread_exit through a noexcept destructor) aborts the process after a run that succeeded:
"terminate called without an active exception", SIGABRT (issue 11: about 1 run in 20 to 1 in 4).

`release_group_defaults()` imports the module now and puts None wherever one of its defaults holds
the default process group. None is what those defaults are when the module is imported before
init_process_group, and what the functions take to mean "the default group, looked up at call
time": their behaviour does not change, and no reference to the group is left. It is idempotent
and cheap, so it runs where a job meets us (run.job after init_process_group, api's TraceHandler
when it is made), whatever the order of the user's imports and init_process_group. It relies only
on the module's functions carrying the group as a plain default, as they have since torch 1.x.

That is not enough in a user's job, where the process group usually outlives destroy_process_group
anyway: the user's DDP model holds it until the model is freed, typically when `main()` returns.
Then ~ProcessGroupGloo runs on the main thread, which holds the GIL, and joins the gloo workers. A
gloo worker drops the last reference to each work item it ran, and a work item made during backward
carries the autograd engine's context object (a Python object, stashed in thread-local state by
torch.autograd.graph._engine_run_backward), so the worker needs the GIL to drop the last one of a
backward, while holding the group's work mutex. If the main thread frees the group before that
worker got the GIL, each waits for the other: the job hangs after training (seen in 3 of 6 runs of a
plain DDP script once the defaults above no longer kept the group alive; gdb showed exactly this).
So a profiled job's default group is also held by `hold_default_group()` until exit, and
`_release_held_group` (an atexit hook, run after the trace handler has finished) first lets the
gloo workers finish (it releases the GIL for a moment) and only then drops the last reference, while
the interpreter is fully alive. A gloo job that never called destroy_process_group gets it called
there, since the group would otherwise be destroyed during finalization.
tests/test_teardown.py checks the outcome on real ranks: no gloo thread is left when the interpreter
starts to finalize, for our runs and for a user's script under both APIs, with and without
destroy_process_group; benchmarks/stress_user_job.sh repeats the user's script.
"""

from __future__ import annotations

import atexit
import time
import types

SETTLE_S = 0.1
"""How long the main thread releases the GIL before the group's last reference goes: a gloo worker
waiting for the GIL takes it at once, this covers its scheduling on a loaded machine."""

_held: list = []


def release_group_defaults() -> int:
    """Import torch.distributed.nn.functional (if not yet) and replace every default argument of its
    functions that holds the current default process group by None. Returns how many it replaced."""
    import torch.distributed as dist

    if not dist.is_available():
        return 0
    import torch.distributed.nn.functional as functional

    world = dist.group.WORLD if dist.is_initialized() else None
    if world is None:  # no group yet: the defaults hold None already
        return 0
    replaced = 0
    for fn in vars(functional).values():
        if not isinstance(fn, types.FunctionType):
            continue
        if fn.__defaults__ and any(value is world for value in fn.__defaults__):
            replaced += sum(value is world for value in fn.__defaults__)
            fn.__defaults__ = tuple(None if value is world else value for value in fn.__defaults__)
        if fn.__kwdefaults__ and any(value is world for value in fn.__kwdefaults__.values()):
            replaced += sum(value is world for value in fn.__kwdefaults__.values())
            fn.__kwdefaults__ = {key: None if value is world else value for key, value in fn.__kwdefaults__.items()}
    return replaced


def wait_for_collectives(device) -> None:
    """Before a profiler stops on a GPU: wait until every collective of the default group has
    ended and NCCL's watchdog has let go of its Work. On NCCL, Work.wait() only makes the current
    stream wait: the kernel may still run, and the watchdog thread keeps a copy of each Work (with
    the profiler's record-function callback it carries) in its list until it sees the kernel done,
    polling every 100 ms. Stopping the profiler before that lets the Work outlive the session, the
    way a gloo Work did before run/profiler.py waited for it (a late free of the profiler's
    thread-local state). So: synchronize the device, then ProcessGroup._wait_for_pending_works
    (torch 2.13, NCCL only: it returns once the watchdog's lists are empty). Nothing on CPU or
    before CUDA is initialised; on gloo, Work.wait() already blocks until the collective ends."""
    import torch
    import torch.distributed as dist

    if device.type != "cuda" or not torch.cuda.is_initialized():
        return
    torch.cuda.synchronize(device)
    group = dist.group.WORLD if dist.is_available() and dist.is_initialized() else None
    if group is not None and dist.get_backend() == "nccl":
        group._wait_for_pending_works()


def hold_default_group() -> None:
    """Keep a reference to the default gloo process group until exit (see the module docstring), so
    that it is never freed on the main thread while a gloo worker still waits for the GIL. Once per
    process; nothing without a gloo process group."""
    import torch.distributed as dist

    if _held or not (dist.is_available() and dist.is_initialized()) or "gloo" not in str(dist.get_backend()):
        return
    _held.append(dist.group.WORLD)
    atexit.register(_release_held_group)


def _release_held_group() -> None:
    import torch.distributed as dist

    group = _held.pop()
    # A job that never destroyed its group would have it destroyed during finalization.
    if dist.is_initialized() and dist.group.WORLD is group:
        dist.destroy_process_group()
    time.sleep(SETTLE_S)  # the GIL is free: a worker waiting for it finishes its last release
    del group  # the last reference, unless the job still holds one: the group ends here, its workers joined
