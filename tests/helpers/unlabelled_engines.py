"""A user's own job, not ours: DDP or FSDP2 training with torch.profiler and torch's own
tensorboard_trace_handler (or, with `ours`, profile_overlap.trace_handler), and no
forward/backward/optimizer labels. Run under torchrun:

    torchrun --standalone --nproc-per-node 2 tests/helpers/unlabelled_engines.py {ddp,fsdp2} OUT_DIR [ours]
"""

import sys

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

import profile_overlap
from profile_overlap.run import models
from profile_overlap.run.config import Config


def main() -> None:
    engine, out = sys.argv[1], sys.argv[2]
    ours = sys.argv[3:] == ["ours"]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    config = Config.of(model="transformer", dim=64, layers=2, heads=4, seq_len=16, batch=4)
    net = models.build_model(config, dtype=torch.float32, device=torch.device("cpu"))
    if engine == "ddp":
        model = torch.nn.parallel.DistributedDataParallel(net, bucket_cap_mb=0.1)
    else:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh("cpu", (world,))
        for unit in net.units():
            fully_shard(unit, mesh=mesh)
        model = fully_shard(net, mesh=mesh)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=0, warmup=1, active=2, repeat=1),
        record_shapes=ours,
        on_trace_ready=profile_overlap.trace_handler(out) if ours else tensorboard_trace_handler(out, worker_name=f"worker{rank}"),
    ) as prof:
        for step in range(3):
            loss = models.loss(model, models.batch(config, rank=rank, step=step, dtype=torch.float32, device=torch.device("cpu")))
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            prof.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
