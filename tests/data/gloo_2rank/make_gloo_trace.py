"""Produce a tiny 2-rank gloo trace: torchrun --standalone --nproc-per-node 2 make_gloo_trace.py OUT"""
import os, sys
import torch, torch.distributed as dist
from torch.profiler import profile, schedule, ProfilerActivity, record_function, tensorboard_trace_handler

def main():
    out = sys.argv[1]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(rank)
    n = 1 << 17
    grad = torch.randn(n * world)
    shard = torch.empty(n)
    full = torch.empty(n * world)
    a = torch.randn(192, 192)
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=2),
                 record_shapes=True,
                 on_trace_ready=tensorboard_trace_handler(out, worker_name=f"host_{rank}", use_gzip=True)) as prof:
        for step in range(3):
            with record_function("split/reduce_scatter"):
                dist.reduce_scatter_tensor(shard, grad)
            with record_function("split/all_gather"):
                handle = dist.all_gather_into_tensor(full, shard, async_op=True)
            with record_function("forward/layer0"):
                for _ in range(4):
                    b = a @ a
            with record_function("split/wait"):
                handle.wait()
            with record_function("sequential/all_reduce"):
                dist.all_reduce(grad)
            prof.step()
    dist.destroy_process_group()

if __name__ == "__main__":
    main()
