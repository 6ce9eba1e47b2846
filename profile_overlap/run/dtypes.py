"""Torch dtypes from the names in the one dtype table (run/config.py DTYPE_BYTES, which imports no torch)."""

from __future__ import annotations

import torch

from profile_overlap.run.config import DTYPE_BYTES


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype called `name` (a key of DTYPE_BYTES: torch's own names)."""
    if name not in DTYPE_BYTES:
        raise ValueError(f"dtype {name!r} is not one of {', '.join(DTYPE_BYTES)}")
    return getattr(torch, name)
