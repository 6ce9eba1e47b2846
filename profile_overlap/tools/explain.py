"""`explain`: the original demo's worked example, with real tensors and no process group.

Rank r holds 4 consecutive numbers (rank 0: [1, 2, 3, 4], ..., rank 3: [13..16]). The sums are
computed with torch exactly as the collectives define them: all_reduce gives every rank the sum;
reduce_scatter gives rank r the r-th 1/N chunk of the sum; all_gather concatenates the chunks.
"""

from __future__ import annotations


def worked_example(world_size: int):
    """The per-rank inputs and the three collectives' results, as plain lists."""
    import torch

    inputs = [torch.arange(r * world_size + 1, (r + 1) * world_size + 1, dtype=torch.float32) for r in range(world_size)]
    total = torch.stack(inputs).sum(dim=0)  # what all_reduce(SUM) leaves on every rank
    shards = list(total.chunk(world_size))  # reduce_scatter: rank r keeps chunk r of the sum
    gathered = torch.cat(shards)  # all_gather of the shards, on every rank
    return inputs, total, shards, gathered
