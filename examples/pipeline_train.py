"""A small transformer trained as a pipeline (torch.distributed.pipelining), profiled with
profile_overlap.

    torchrun --standalone --nproc-per-node 2 examples/pipeline_train.py [--schedule gpipe|1f1b] [--microbatches 4]
        [--out runs/pipeline-example] [--steps 20]
    tensorboard --logdir runs/pipeline-example

CPU: gloo; with GPUs: NCCL, one rank per GPU. Rank r is stage r of world-size stages (2 or 4):
the first holds the embedding, the last the final norm and the LM head, and the blocks are split
evenly between them (`--layers` a multiple of the stage count). Each step splits the batch into
`--microbatches` microbatches and runs them through the stages with torch's `ScheduleGPipe` (all
forwards, then all backwards) or `Schedule1F1B` (one forward, one backward in the steady state):
each stage receives its input activations from the stage before and its output gradients from
the stage after (send/recv), and waits for them: the pipeline's bubble. The ideal bubble of both
schedules is (p-1)/(m+p-1) of the step for p stages and m microbatches. At the end, rank 0 writes
<out>/<job>/report.html.
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe
from torch.profiler import record_function

import profile_overlap
from profile_overlap.run.models import VOCAB, Block, Embedding, Head

SCHEDULES = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}


class Stage(nn.Module):
    """One pipeline stage: the embedding on the first, then its share of the blocks, then the head
    on the last. Its forward takes what the previous stage sent (tokens on the first stage)."""

    def __init__(self, *, index: int, stages: int, layers: int, dim: int, heads: int, seq_len: int) -> None:
        super().__init__()
        per_stage = layers // stages
        self.embed = Embedding(dim=dim, seq_len=seq_len) if index == 0 else None
        self.blocks = nn.ModuleList(Block(dim=dim, heads=heads) for _ in range(per_stage))
        self.head = Head(dim=dim) if index == stages - 1 else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.embed is not None:
            x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x) if self.head is not None else x


def next_token_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/pipeline-example", help="log_dir: one job folder per run goes in it")
    parser.add_argument("--schedule", choices=sorted(SCHEDULES), default="1f1b")
    parser.add_argument("--microbatches", type=int, default=4, help="microbatches per step (a divisor of --batch)")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--layers", type=int, default=4, help="transformer blocks in all (a multiple of the stage count)")
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--batch", type=int, default=16, help="sequences per step")
    parser.add_argument("--seq-len", type=int, default=64)
    args = parser.parse_args()

    stages = int(os.environ.get("WORLD_SIZE", 1))  # torchrun's; checked before any rank waits for the others
    problem = (
        f"one stage per rank needs 2 or more ranks ({stages} here): start it with torchrun --nproc-per-node 2 or 4"
        if stages < 2
        else f"--layers {args.layers} is not a multiple of the {stages} stages: give each stage as many blocks"
        if args.layers % stages
        else f"--microbatches {args.microbatches} does not divide --batch {args.batch}: pick a divisor"
        if args.microbatches < 1 or args.batch % args.microbatches
        else None
    )
    if problem:
        if int(os.environ.get("RANK", 0)) == 0:
            print(f"pipeline_train.py: {problem}", flush=True)
        raise SystemExit(2)

    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    dist.init_process_group("nccl" if cuda else "gloo")
    rank = dist.get_rank()

    torch.manual_seed(rank)  # each stage its own layers
    module = Stage(index=rank, stages=stages, layers=args.layers, dim=args.dim, heads=4, seq_len=args.seq_len).to(device)
    stage = PipelineStage(module, stage_index=rank, num_stages=stages, device=device)
    schedule = SCHEDULES[args.schedule](stage, n_microbatches=args.microbatches, loss_fn=next_token_loss)
    optimizer = torch.optim.AdamW(module.parameters(), lr=1e-3)
    data = torch.Generator().manual_seed(0)  # the first and the last stage draw the same batch

    losses: list[torch.Tensor] = []
    with profile_overlap.profile(args.out, wait=1, warmup=1, active=2) as prof:
        for _ in range(args.steps):
            tokens = torch.randint(VOCAB, (args.batch, args.seq_len + 1), generator=data).to(device)
            losses = []
            # The schedule interleaves the microbatches' forwards and backwards: one range, no phases.
            if rank == 0:
                schedule.step(tokens[:, :-1])
            elif rank == stages - 1:
                schedule.step(target=tokens[:, 1:], losses=losses)
            else:
                schedule.step()
            with record_function("optimizer"):
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            prof.step()
    if rank == stages - 1:
        loss = torch.stack(losses).mean().item()
        print(
            f"stage {rank}: trained {args.steps} steps ({args.schedule}, {args.microbatches} microbatches, last loss {loss:.3f})",
            flush=True,
        )
    if rank == 0:
        print(f"profile in {prof.handler.job_dir}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
