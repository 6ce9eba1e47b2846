"""profile_overlap: measure how much communication hides behind compute when all_reduce is
split into reduce_scatter + all_gather (ZeRO/FSDP), from real torch.profiler traces.

Profile your own job (docs/profile-your-job.md):

    with profile_overlap.profile("runs/myjob") as prof:      # a torch.profiler.profile
        ...; prof.step()
    torch.profiler.profile(..., on_trace_ready=profile_overlap.trace_handler("runs/myjob"))

The names below load on first use: importing the package starts nothing and imports no torch.
`__version__` is the installed distribution's (pyproject.toml's `version`, the one place it is written).
"""

from typing import Any

_LAZY = {
    "trace_handler": "profile_overlap.api.handler",
    "profile": "profile_overlap.api.handler",
    "build_job_record": "profile_overlap.api.job",
}
__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from profile_overlap.core.version import package_version

        return package_version()
    if name not in _LAZY:
        raise AttributeError(f"module 'profile_overlap' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_LAZY[name]), name)


def __dir__() -> list[str]:
    return sorted(__all__)
