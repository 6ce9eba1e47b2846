"""A user's plain DDP script, written the way most are: torch imported, the process group made
first, and only then the profiler, with nothing added for the profiler's sake.

    torchrun --standalone --nproc-per-node 2 tests/helpers/user_job.py OUT --api profile|handler [--no-destroy]

--api profile: `with profile_overlap.profile(OUT)`; --api handler: torch.profiler.profile with
on_trace_ready=profile_overlap.trace_handler(OUT). After destroy_process_group (or, with
--no-destroy, after training), and again in the last exit hook, just before the interpreter
finalizes, the rank writes the names of its live native threads to $THREADS_OUT/rank<r>.json when
THREADS_OUT is set. A gloo thread alive at the end means the group will be destroyed during
finalization, where a gloo worker can abort the process (tests/test_teardown.py).
"""

import argparse
import atexit
import json
import os
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.profiler import ProfilerActivity, schedule

import profile_overlap


def live_threads() -> list[str]:
    names = []
    for tid in sorted(os.listdir("/proc/self/task")):
        try:
            names.append(Path(f"/proc/self/task/{tid}/comm").read_text().strip())
        except OSError:  # the thread ended meanwhile
            pass
    return names


def record_threads(**threads: list[str]) -> None:
    if "THREADS_OUT" in os.environ:
        out = Path(os.environ["THREADS_OUT"]) / f"rank{os.environ['RANK']}.json"
        old = json.loads(out.read_text()) if out.exists() else {}
        out.write_text(json.dumps({**old, **threads}))


# The first exit hook registered is the last to run: the threads that finalization would meet.
atexit.register(lambda: record_threads(at_exit=live_threads()))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--api", choices=["profile", "handler"], required=True)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--no-destroy", action="store_true")
    args = parser.parse_args()

    dist.init_process_group("gloo")
    torch.manual_seed(dist.get_rank())
    model = DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 64)), bucket_cap_mb=0.05
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    if args.api == "profile":
        prof = profile_overlap.profile(args.out, wait=1, warmup=1, active=2)
    else:
        prof = torch.profiler.profile(
            activities=[ProfilerActivity.CPU],
            record_shapes=True,
            schedule=schedule(wait=1, warmup=1, active=2),
            on_trace_ready=profile_overlap.trace_handler(args.out),
        )
    with prof:
        for _ in range(args.steps):
            loss = model(torch.randn(32, 64)).square().mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            prof.step()
    if not args.no_destroy:
        dist.destroy_process_group()
    record_threads(after_training=live_threads())
    print(f"rank {os.environ['RANK']}: done", flush=True)


if __name__ == "__main__":
    main()
