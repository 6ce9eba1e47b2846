"""A small transformer trained with FSDP2 (torch's fully_shard), profiled with profile_overlap.

    torchrun --standalone --nproc-per-node 2 examples/fsdp2_train.py [--out runs/fsdp2-example] [--steps 20]
    tensorboard --logdir runs/fsdp2-example

CPU: gloo; with GPUs: NCCL, one rank per GPU. Each block, the embedding and the head are sharded
units: their parameters are all-gathered before use (the next unit's prefetched) and their
gradients reduce-scattered in backward. Without our labels, FSDP's own ranges (FSDP::pre_forward,
...), autograd's frames and torch.optim's range still give each step's phases. At the end, rank 0 writes <out>/<job>/report.html.
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.profiler import record_function

import profile_overlap
from profile_overlap.run.models import VOCAB, Transformer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/fsdp2-example", help="log_dir: one job folder per run goes in it")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--batch", type=int, default=8, help="sequences per rank and step")
    parser.add_argument("--seq-len", type=int, default=64)
    args = parser.parse_args()

    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()

    torch.manual_seed(0)  # the same initial weights on every rank before sharding
    model = Transformer(layers=args.layers, dim=args.dim, heads=4, seq_len=args.seq_len).to(device)
    mesh = init_device_mesh(device.type, (world,))
    for unit in model.units():  # the embedding, each block, the head
        fully_shard(unit, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = torch.Generator().manual_seed(rank)

    with profile_overlap.profile(args.out, wait=1, warmup=1, active=2) as prof:
        for _ in range(args.steps):
            tokens = torch.randint(VOCAB, (args.batch, args.seq_len + 1), generator=data).to(device)
            with record_function("forward"):
                logits = model(tokens[:, :-1])
                loss = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
            with record_function("backward"):
                loss.backward()
            with record_function("optimizer"):
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            prof.step()
    if rank == 0:
        print(f"trained {args.steps} steps (last loss {loss.item():.3f}); profile in {prof.handler.job_dir}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
