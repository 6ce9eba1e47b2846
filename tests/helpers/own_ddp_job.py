"""A user's own DDP training script, profiled with torch.profiler as users do, with one change:
on_trace_ready=profile_overlap.trace_handler(out) where it had tensorboard_trace_handler(out).

    torchrun --standalone --nproc-per-node 2 tests/helpers/own_ddp_job.py OUT [--steps N] [--skip-rank R]
    python tests/helpers/own_ddp_job.py OUT --no-dist          # one process, no torch.distributed

--skip-rank R: rank R trains without any profiler (a rank that never profiles).
"""

import argparse

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile, record_function, schedule

import profile_overlap
from profile_overlap.run import models
from profile_overlap.run.config import Config


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--skip-rank", type=int, default=None)
    parser.add_argument("--no-dist", action="store_true")
    args = parser.parse_args()
    if not args.no_dist:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if not args.no_dist else 0
    config = Config.of(model="transformer", dim=64, layers=2, heads=4, seq_len=16, batch=4)
    net = models.build_model(config, dtype=torch.float32, device=torch.device("cpu"))
    model = net if args.no_dist else torch.nn.parallel.DistributedDataParallel(net, bucket_cap_mb=0.1)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    def train_step(step: int) -> None:
        data = models.batch(config, rank=rank, step=step, dtype=torch.float32, device=torch.device("cpu"))
        with record_function("forward"):
            loss = models.loss(model, data)
        with record_function("backward"):
            loss.backward()
        with record_function("optimizer"):
            optimizer.step()
            optimizer.zero_grad()

    if rank == args.skip_rank:
        # This rank makes no handler, so nothing of ours guards its exit: torch 2.13's own DDP-on-gloo
        # teardown can abort (the group freed during finalization) or hang (freed under the GIL) at
        # exit, with or without any profiler (run/teardown.py). The test is about the report, so
        # the rank takes the same guard the handler gives the profiled ranks.
        from profile_overlap.run.teardown import hold_default_group, release_group_defaults

        release_group_defaults()
        hold_default_group()
        for step in range(args.steps):
            train_step(step)
    else:
        with profile(
            activities=[ProfilerActivity.CPU],
            record_shapes=True,
            schedule=schedule(wait=1, warmup=1, active=2),
            on_trace_ready=profile_overlap.trace_handler(args.out),  # was: torch.profiler.tensorboard_trace_handler(args.out)
        ) as prof:
            for step in range(args.steps):
                train_step(step)
                prof.step()
    print(f"rank {rank}: trained {args.steps} steps", flush=True)
    if not args.no_dist:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
