"""A small transformer trained with FSDP2 over "dp" and tensor + sequence parallelism over "tp" on a
2-D DeviceMesh, profiled with profile_overlap.

    torchrun --standalone --nproc-per-node 4 examples/fsdp_tp_train.py [--out runs/fsdp-tp-example] [--steps 20] [--tp 2]
    tensorboard --logdir runs/fsdp-tp-example

CPU: gloo; with GPUs: NCCL, one rank per GPU. The world is a dp x tp mesh (`--tp` ranks per
tensor-parallel group, world / tp of them). Inside each tp group every block's attention and MLP
are split column-wise then row-wise (`parallelize_module`): the activations are sharded on the
sequence between blocks (sequence parallel), so each block all-gathers its input and
reduce-scatters its output over "tp", on the critical path. Across the dp groups each block and
the whole model are FSDP2 units (`fully_shard` over "dp"): parameters all-gathered before use and
gradients reduce-scattered in backward, which should hide behind compute. Both ranks of a tp group
train on the same batch. At the end, rank 0 writes <out>/<job>/report.html.
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import record_function

import profile_overlap

VOCAB = 256


class Attention(nn.Module):
    """Separate q, k, v projections, so that a column-wise split gives each tp rank whole heads."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.head_dim = dim // heads
        self.q, self.k, self.v = (nn.Linear(dim, dim, bias=False) for _ in range(3))
        self.out = nn.Linear(dim, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        # -1: the heads this rank holds (all of them without tensor parallelism).
        q, k, v = (p(x).view(b, t, -1, self.head_dim).transpose(1, 2) for p in (self.q, self.k, self.v))
        if x.is_cuda:  # torch picks the kernel (flash needs half precision; this model is float32)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # DTensor has no sharding rule for the CPU flash kernel: the math one, without a causal mask
            with sdpa_kernel(SDPBackend.MATH):
                y = F.scaled_dot_product_attention(q, k, v)
        return self.out(y.transpose(1, 2).reshape(b, t, -1))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.attn_norm, self.mlp_norm = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.up, self.down = nn.Linear(dim, 4 * dim, bias=False), nn.Linear(4 * dim, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x))
        return x + self.down(F.gelu(self.up(self.mlp_norm(x))))


class Transformer(nn.Module):
    def __init__(self, *, layers: int, dim: int, heads: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, VOCAB, bias=False)

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """The next-token loss: returned rather than the logits, which tensor parallelism hands back
        as a view (FSDP2 warns of in-place ops on a root module's view output)."""
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def tensor_parallel(model: Transformer, tp_mesh) -> None:
    """Megatron-style tensor parallelism with sequence parallelism between the blocks."""
    parallelize_module(
        model,
        tp_mesh,
        {
            "embed": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
            "norm": SequenceParallel(),
            "head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate()),
        },
    )
    for block in model.blocks:
        parallelize_module(
            block,
            tp_mesh,
            {
                "attn_norm": SequenceParallel(),
                "attn": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
                "attn.q": ColwiseParallel(),
                "attn.k": ColwiseParallel(),
                "attn.v": ColwiseParallel(),
                "attn.out": RowwiseParallel(output_layouts=Shard(1)),
                "mlp_norm": SequenceParallel(),
                "up": ColwiseParallel(input_layouts=Shard(1)),
                "down": RowwiseParallel(output_layouts=Shard(1)),
            },
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/fsdp-tp-example", help="log_dir: one job folder per run goes in it")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--tp", type=int, default=2, help="ranks per tensor-parallel group (the mesh's inner dimension)")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4, help="attention heads (a multiple of --tp)")
    parser.add_argument("--batch", type=int, default=8, help="sequences per dp group and step")
    parser.add_argument("--seq-len", type=int, default=64, help="tokens per sequence (a multiple of --tp)")
    args = parser.parse_args()

    world = int(os.environ.get("WORLD_SIZE", 1))  # torchrun's; checked before any rank waits for the others
    if args.tp < 1 or world % args.tp or args.heads % args.tp or args.seq_len % args.tp:
        if int(os.environ.get("RANK", 0)) == 0:
            print(f"fsdp_tp_train.py: --tp {args.tp} must divide the world size ({world}), --heads ({args.heads}) and --seq-len "
                  f"({args.seq_len}): pick another --tp, or start a multiple of it with torchrun --nproc-per-node", flush=True)  # fmt: skip
        raise SystemExit(2)

    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    dist.init_process_group("nccl" if cuda else "gloo")
    rank = dist.get_rank()
    mesh = init_device_mesh(device.type, (world // args.tp, args.tp), mesh_dim_names=("dp", "tp"))

    torch.manual_seed(0)  # the same initial weights on every rank before sharding
    model = Transformer(layers=args.layers, dim=args.dim, heads=args.heads).to(device)
    tensor_parallel(model, mesh["tp"])
    for block in model.blocks:
        fully_shard(block, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = torch.Generator().manual_seed(mesh["dp"].get_local_rank())  # one batch per tp group

    with profile_overlap.profile(args.out, wait=1, warmup=1, active=2) as prof:
        for _ in range(args.steps):
            tokens = torch.randint(VOCAB, (args.batch, args.seq_len + 1), generator=data).to(device)
            with record_function("forward"):
                loss = model(tokens[:, :-1], tokens[:, 1:])
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
