"""A small transformer trained with DistributedDataParallel, profiled with profile_overlap.

    torchrun --standalone --nproc-per-node 2 examples/ddp_train.py [--out runs/ddp-example] [--steps 20]
    tensorboard --logdir runs/ddp-example        # the overlap scalars over training, and the Overlap tab

CPU: gloo; with GPUs: NCCL, one rank per GPU. The profiling is two lines: `profile_overlap.profile`
around the loop and `prof.step()` after each step (the same as torch.profiler.profile with
on_trace_ready=profile_overlap.trace_handler(...)). The record_function labels are optional: the
report and TensorBoard split communication by phase (forward, backward, optimizer) with them, and
without them from DDP's, autograd's and torch.optim's own ranges.
At the end, rank 0 writes the job's report: <out>/<job>/report.html.
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.profiler import record_function

import profile_overlap
from profile_overlap.run.models import VOCAB, Transformer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/ddp-example", help="log_dir: one job folder per run goes in it")
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
    rank = dist.get_rank()

    torch.manual_seed(0)  # the same initial weights on every rank (DDP also broadcasts rank 0's)
    net = Transformer(layers=args.layers, dim=args.dim, heads=4, seq_len=args.seq_len).to(device)
    model = DistributedDataParallel(net, bucket_cap_mb=1)  # small buckets: several all_reduces overlap backward
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = torch.Generator().manual_seed(rank)  # each rank its own batches

    # Cycles of 1 skipped step, 1 warmup step and 2 recorded steps, until the loop ends.
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
