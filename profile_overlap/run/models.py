"""The two workloads, as ordinary nn.Modules with a real loss, so torch's own engines (DDP, FSDP2)
can wrap them as they are.

- mlp: K layers of d x d weights with tanh, and a mean-squared-error loss against a target.
- transformer: a token and a position embedding, K pre-norm decoder blocks (causal self-attention
  through scaled_dot_product_attention, a 4d MLP, LayerNorm), a final LayerNorm and an LM head
  over VOCAB tokens; next-token cross-entropy.

`units()` lists the communication units in forward order, like FSDP's per-block units: one per
layer (mlp); the embedding, one per block, and the head (transformer). Every rank and every mode
builds the same initial weights from the seed, and `batch(step)` gives each rank its own seeded
batch per step, the same in every mode, drawn on the run's device.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

VOCAB = 256
"""Tokens of the transformer's synthetic vocabulary."""


class MLP(nn.Module):
    def __init__(self, *, layers: int, dim: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(dim, dim, bias=False) for _ in range(layers))

    def units(self) -> list[nn.Module]:
        return list(self.layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return x

    def loss(self, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return loss(self, batch)


class Block(nn.Module):
    """One pre-norm decoder block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, *, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, 4 * dim)
        self.down = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, t, d))
        return x + self.down(F.gelu(self.up(self.ln2(x))))


class Embedding(nn.Module):
    def __init__(self, *, dim: int, seq_len: int) -> None:
        super().__init__()
        self.tokens = nn.Embedding(VOCAB, dim)
        self.positions = nn.Embedding(seq_len, dim)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.tokens(tokens) + self.positions(torch.arange(tokens.shape[1], device=tokens.device))


class Head(nn.Module):
    def __init__(self, *, dim: int) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(dim)
        self.out = nn.Linear(dim, VOCAB, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.ln(x))


class Transformer(nn.Module):
    def __init__(self, *, layers: int, dim: int, heads: int, seq_len: int) -> None:
        super().__init__()
        self.embed = Embedding(dim=dim, seq_len=seq_len)
        self.blocks = nn.ModuleList(Block(dim=dim, heads=heads) for _ in range(layers))
        self.head = Head(dim=dim)

    def units(self) -> list[nn.Module]:
        return [self.embed, *self.blocks, self.head]

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(x)

    def loss(self, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return loss(self, batch)


def loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """The training loss of `model` (an MLP or Transformer, or a wrapper around one, such as DDP,
    called as a whole so that its hooks run): MSE against the target (mlp), next-token
    cross-entropy (transformer)."""
    inputs, targets = batch
    out = model(inputs)
    if targets.is_floating_point():
        return F.mse_loss(out.float(), targets.float())
    return F.cross_entropy(out.float().flatten(0, 1), targets.flatten())


def build_model(config, *, dtype: torch.dtype, device: torch.device) -> MLP | Transformer:
    """The same initial weights on every rank and in every mode: built on the CPU under a seeded RNG."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.workload.seed)
        model: MLP | Transformer
        w = config.workload
        if w.model == "mlp":
            model = MLP(layers=w.layers, dim=w.dim)
        else:
            model = Transformer(layers=w.layers, dim=w.dim, heads=w.heads, seq_len=w.seq_len)
    return model.to(device=device, dtype=dtype)


def unit_param_bytes(config) -> tuple[tuple[int, ...], ...]:
    """Bytes of each parameter of the run's model, unit by unit (`units()`), each unit's in
    `parameters()` order (DDP's bucket order), in the run's dtype: built on the meta device, so
    nothing is allocated. The record keeps it (RunMetrics.unit_param_bytes) for `advise`."""
    from profile_overlap.run.dtypes import torch_dtype

    net = build_model(config, dtype=torch_dtype(config.workload.dtype), device=torch.device("meta"))
    return tuple(tuple(p.numel() * p.element_size() for p in unit.parameters()) for unit in net.units())


def batch(config, *, rank: int, step: int, dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's batch of step `step`, drawn on `device` by a generator on that device seeded with
    (seed, rank, step): the same data in every mode, and on a GPU no host work and no host-to-device
    copy inside the timed step (issue 39: the host draw and its blocking copy took about 0.7 s per
    step against about 45 ms of GPU math at the GPU check's sizes). On the CPU the generator, the
    draws and so the numbers are those of the CPU generator as before; a CUDA generator draws other
    numbers from the same seed (Philox), the same in every mode."""
    w = config.workload
    gen = torch.Generator(device=device).manual_seed(hash((w.seed, rank, step)) & 0x7FFF_FFFF_FFFF)
    if w.model == "mlp":
        x = torch.randn(w.batch, w.dim, generator=gen, device=device)
        target = torch.randn(w.batch, w.dim, generator=gen, device=device) * 0.5
        return x.to(dtype), target.to(dtype)
    tokens = torch.randint(VOCAB, (w.batch, w.seq_len + 1), generator=gen, device=device)
    return tokens[:, :-1], tokens[:, 1:]
