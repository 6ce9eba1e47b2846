"""A rank entry for the launcher test: writes how many intra-op threads torch gives this rank."""

from __future__ import annotations

import os
from pathlib import Path


def report(config) -> int:
    import torch

    Path(config.job.out, f"rank{os.environ['RANK']}").write_text(str(torch.get_num_threads()))
    return 0
