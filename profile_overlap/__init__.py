"""profile_overlap: measure how much communication hides behind compute when all_reduce is
split into reduce_scatter + all_gather (ZeRO/FSDP), from real torch.profiler traces."""

__version__ = "0.1.0"
