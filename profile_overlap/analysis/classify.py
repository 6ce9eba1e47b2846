"""Names -> classes: the one table of the name patterns that decide what an event is.

Communication, compute or ignored (kernels); a collective op or not (CPU events); and which
collective (`collective_kind`). Everything here looks at names only. To teach the analysis a new
library or spelling, change this table; the rest of the analysis reads it.
"""

from __future__ import annotations

import re

from profile_overlap.core.modes import PHASES

COMM_LIBRARIES = ("nccl", "rccl")
"""Collective libraries, by the prefix of their kernels (`ncclDevKernel_...`) and of the CPU
annotations they record (`nccl:all_reduce`)."""
LIBRARY_OP_PREFIXES = tuple(f"{lib}:" for lib in COMM_LIBRARIES)
GLOO_EVENT_PREFIX = "gloo:"
"""gloo's own annotations of its work items (on its worker threads)."""
C10D_PREFIX = "c10d::"
"""The c10d dispatcher op of a collective, on the thread that called it."""
RECORD_PARAM_COMMS = "record_param_comms"
"""PyTorch's annotation carrying a collective's sizes."""
COLLECTIVE_OP_PREFIXES = (*LIBRARY_OP_PREFIXES, GLOO_EVENT_PREFIX, C10D_PREFIX)
"""CPU events of a collective op, in any backend."""

_LIB = "|".join(COMM_LIBRARIES)
# Kernel classes, by name only. Never via `External id`: in current PyTorch an NCCL kernel's
# External id points at `record_param_comms`, which made the TensorBoard plugin count NCCL
# kernels as computation.
COMM_KERNEL_RE = re.compile(rf"^(?:{_LIB})|(?:{_LIB})(?:Dev)?Kernel")
MEMORY_KERNEL_RE = re.compile(r"Memcpy|Memset")
SYNC_KERNEL_RE = re.compile(r"^(?:Event|Stream|Context|Device) Sync")
PROFILER_STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")
_PHASE_RE = re.compile(rf"^(?:(?:##\s*)?({'|'.join(PHASES)})(?:\s*##)?|(Optimizer\.step#.*))$", re.IGNORECASE)


def phase_of(name: str) -> str | None:
    """The phase a record_function label opens: `forward`, `backward` or `optimizer` (any case;
    our pipelines label their steps so), the same inside `## ... ##` (`## forward ##`, as
    torchrec's training pipelines and HTA's test traces write them), or torch.optim's
    `Optimizer.step#<Class>.step`; else None."""
    m = _PHASE_RE.match(name)
    if m is None:
        return None
    return m.group(1).lower() if m.group(1) else "optimizer"


ENGINE_PHASE_PREFIXES = (
    ("FSDP::root_pre_forward", "forward"),
    ("FSDP::pre_forward", "forward"),
    ("FSDP::post_forward", "forward"),
    ("FSDP::pre_backward", "backward"),
    ("FSDP::backward_prefetch", "backward"),
    ("FSDP::post_backward", "backward"),
    ("FSDP::root_post_backward", "backward"),
    ("DistributedDataParallel.forward", "forward"),
    ("Optimizer.step#", "optimizer"),
)
"""record_function labels of torch's engines, by prefix (FSDP2's carry a module suffix, e.g.
`FSDP::pre_forward (blocks.0)`), and the phase a collective issued inside them belongs to.
FSDP::all_gather itself says nothing: it runs in forward and in the backward prefetch, so the
label around it decides."""


def phase_hint(enclosing: list[str], *, in_autograd: bool) -> str | None:
    """The phase of a collective issued inside these labels (innermost first) when no phase
    window covers it: the first engine label that names one; else backward when autograd's
    engine issued it (DDP's gradient hooks); else None."""
    for name in enclosing:
        for prefix, phase in ENGINE_PHASE_PREFIXES:
            if name.startswith(prefix):
                return phase
    return "backward" if in_autograd else None


AUTOGRAD_FRAME_RE = re.compile(r"^autograd::engine::evaluate_function: |^torch::autograd::|Backward\d*$")
"""The autograd engine's frames around a backward node (CPU ops). Gradient hooks run inside them
(ours, DDP's, FSDP's), and a hook that waits for a collective blocks the thread there, so on CPU
these frames count as compute only through the operators they run."""

# Collective kinds in PyTorch's terms, from any spelling (`allreduce`, `nccl:_all_gather_base`,
# `c10d::_reduce_scatter_base_`, kernel `ncclDevKernel_ReduceScatter_...`): key is the name with
# prefixes, underscores and variant suffixes removed, lower case.
_KIND = {
    "allreduce": "all_reduce",
    "reducescatter": "reduce_scatter",
    "allgather": "all_gather",
    "broadcast": "broadcast",
    "alltoall": "all_to_all",
    "sendrecv": "send_recv",
    "send": "send_recv",
    "recv": "send_recv",
    "reduce": "reduce",
    "gather": "gather",
    "scatter": "scatter",
    "barrier": "barrier",
}
_KIND_NOISE = re.compile(
    "^(?:" + "|".join(re.escape(p) for p in COLLECTIVE_OP_PREFIXES) + r")|base|intotensor|tensor|coalesced|single|_|\s"
)
_KERNEL_KIND = re.compile(rf"(?:{_LIB})(?:Dev)?Kernel_([A-Za-z]+)|^(?:{_LIB})([A-Za-z]+)")


def collective_kind(name: str) -> str | None:
    """PyTorch's name for a collective from any of its spellings, or None."""
    if m := _KERNEL_KIND.search(name):
        name = m.group(1) or m.group(2)
    key = _KIND_NOISE.sub("", name.lower())
    return _KIND.get(key)


def is_collective_op(name: str) -> bool:
    """A CPU event that describes a collective (its arguments carry the sizes and group)."""
    return name.startswith((*COLLECTIVE_OP_PREFIXES, RECORD_PARAM_COMMS))
