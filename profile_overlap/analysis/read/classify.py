"""Names -> classes: the one table of the name patterns that decide what an event is.

Communication, compute or ignored (kernels); a collective op or not (CPU events); and which
collective (`collective_kind`). Everything here looks at names only. To teach the analysis a new
library or spelling, change this table; the rest of the analysis reads it.
"""

from __future__ import annotations

import functools
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
FUNCTIONAL_PREFIX = "_c10d_functional::"
"""DTensor's functional collectives and their wait (`_c10d_functional::wait_tensor`), on the calling thread."""
RECORD_PARAM_COMMS = "record_param_comms"
"""PyTorch's annotation carrying a collective's sizes."""
COLLECTIVE_OP_PREFIXES = (*LIBRARY_OP_PREFIXES, GLOO_EVENT_PREFIX, C10D_PREFIX)
"""CPU events of a collective op, in any backend."""

_LIB = "|".join(COMM_LIBRARIES)
# Kernel classes, by name only. Never via `External id`: in current PyTorch an NCCL kernel's
# External id points at `record_param_comms`, which made the TensorBoard plugin count NCCL
# kernels as computation.
DEVICE_COLLECTIVES = (
    ("multimem_all_reduce", "all_reduce"),
    ("one_shot_all_reduce", "all_reduce"),
    ("two_shot_all_reduce", "all_reduce"),
    ("cross_device_reduce", "all_reduce"),
    ("fused_all_gather_matmul", "all_gather"),
    ("fused_all_gather_scaled_matmul", "all_gather"),
    ("fused_matmul_reduce_scatter", "reduce_scatter"),
    ("fused_scaled_matmul_reduce_scatter", "reduce_scatter"),
)
"""Device-initiated collectives, by a word in the kernel's name, with their kind: torch's
symmetric-memory kernels (`multimem_all_reduce_kernel`, `one_shot_all_reduce_kernel`, ...), async
TP's fused all-gather/reduce-scatter matmuls, and custom all-reduce kernels (vLLM's
`cross_device_reduce_1stage`). They are communication, as NCCL's kernels are."""
_DEVICE_RE = "|".join(re.escape(word) for word, _ in DEVICE_COLLECTIVES)
COMM_KERNEL_RE = re.compile(rf"^(?:{_LIB})|(?:{_LIB})(?:Dev)?Kernel|{_DEVICE_RE}")
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


FSDP2, DDP, TORCH_OPTIM, SCHEDULES = "FSDP2", "DDP", "torch.optim", "profile_overlap"
"""The engines whose own ranges say which phase runs (ENGINE_RANGES)."""
SCHEDULE_OPTIMIZER_RANGE = "profile_overlap::optimizer_step"
"""The range our schedules (run/pipelines.py) open around their optimizer step, as torch.optim
opens `Optimizer.step#<Class>.step` around its own."""
SCHEDULE_WAIT_RANGES = ("split/wait_reduce_scatter", "split/wait_all_gather")
"""The ranges our schedules open around a wait for a collective, on the training thread. What runs
inside one is the collective finishing, not compute: gloo's reduce_scatter is an all_reduce whose
wait keeps this rank's chunk on the waiting thread (`aten::chunk`, then `aten::copy_` into the
output), in backward in split-blocking and in the optimizer in split."""
ENGINE_RANGES = (
    ("FSDP::root_pre_forward", "forward", FSDP2),
    ("FSDP::pre_forward", "forward", FSDP2),
    ("FSDP::post_forward", "forward", FSDP2),
    ("FSDP::pre_backward", "backward", FSDP2),
    ("FSDP::backward_prefetch", "backward", FSDP2),
    ("FSDP::post_backward", "backward", FSDP2),
    ("FSDP::root_post_backward", "backward", FSDP2),
    ("DistributedDataParallel.forward", "forward", DDP),
    ("Optimizer.step#", "optimizer", TORCH_OPTIM),
    ("Optimizer.zero_grad#", "optimizer", TORCH_OPTIM),
    (SCHEDULE_OPTIMIZER_RANGE, "optimizer", SCHEDULES),
)
"""record_function ranges of torch's engines (and ours), by prefix (FSDP2's carry a module
suffix, e.g. `FSDP::pre_forward (blocks.0)`), with the phase they run in and the engine. They
place a collective issued inside them (phase_hint) and, in a step without labels, the phases
themselves (analysis/file/phases.py). FSDP::all_gather itself says nothing: it runs in forward and in
the backward prefetch, so the range around it decides."""
AUTOGRAD_SOURCE = "autograd"
"""The source of a backward window found from autograd's engine frames (BACKWARD_FRAME_RE)."""
STEP_SOURCE = "step"
"""The source of a forward window found as the rest of the step before the backward."""
GRADIENT_SEED_OP = "aten::ones_like"
"""`loss.backward()` of a scalar loss first makes its gradient, ones_like(loss), on the calling
thread: when that is the thread's last operator before autograd's first frame, the backward
starts there."""
BACKWARD_FRAME_RE = re.compile(r"^autograd::engine::evaluate_function: ")
"""The autograd engine's frame around each backward node it runs: in the step, backward runs from
the first of them to the optimizer."""


def engine_range(name: str) -> tuple[str, str] | None:
    """(phase, engine) of an engine's own range (ENGINE_RANGES), else None."""
    for prefix, phase, engine in ENGINE_RANGES:
        if name.startswith(prefix):
            return phase, engine
    return None


def is_phase_label(name: str) -> bool:
    """A forward/backward/optimizer label a user (or our schedules) put in: phase_of's names
    except torch.optim's own Optimizer.step range."""
    m = _PHASE_RE.match(name)
    return m is not None and m.group(1) is not None


def phase_hint(enclosing: list[str], *, in_autograd: bool) -> str | None:
    """The phase of a collective issued inside these labels (innermost first) when no phase
    window covers it: the first engine range that names one; else backward when autograd's
    engine issued it (DDP's gradient hooks); else None."""
    for name in enclosing:
        if (hit := engine_range(name)) is not None:
            return hit[0]
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
    "isend": "send_recv",
    "irecv": "send_recv",
    "recv": "send_recv",
    "reduce": "reduce",
    "gather": "gather",
    "scatter": "scatter",
    "barrier": "barrier",
}
_KIND_NOISE = re.compile(
    "^(?:" + "|".join(re.escape(p) for p in COLLECTIVE_OP_PREFIXES) + r")|base|intotensor|into|tensor|coalesced|single|_|\s"
)
_KERNEL_KIND = re.compile(rf"(?:{_LIB})(?:Dev)?Kernel_([A-Za-z]+)|^(?:{_LIB})([A-Za-z]+)")


@functools.lru_cache(maxsize=4096)
def collective_kind(name: str) -> str | None:
    """PyTorch's name for a collective from any of its spellings, or None."""
    for word, kind in DEVICE_COLLECTIVES:
        if word in name:
            return kind
    if m := _KERNEL_KIND.search(name):
        name = m.group(1) or m.group(2)
    key = _KIND_NOISE.sub("", name.lower())
    return _KIND.get(key)


P2P_KINDS = frozenset({"send", "recv"})
"""Point-to-point directions (`p2p_direction`); their calls count as the kind `send_recv`."""
_P2P_RE = re.compile(r"(?:^|[:_])(?:i?send|i?recv|recv_)$|SendRecv|Kernel_(?:Send|Recv)", re.IGNORECASE)


@functools.lru_cache(maxsize=4096)
def p2p_direction(name: str) -> str | None:
    """ "send" or "recv" for a point-to-point op or kernel (`gloo:send`, `c10d::recv_`,
    `nccl:send`, `ncclDevKernel_SendRecv` reads "send_recv": None, direction unknown), else None."""
    low = name.lower()
    if not _P2P_RE.search(name) or "sendrecv" in low:
        return None
    return "recv" if "recv" in low else "send"


def is_collective_op(name: str) -> bool:
    """A CPU event that describes a collective (its arguments carry the sizes and group)."""
    return name.startswith((*COLLECTIVE_OP_PREFIXES, RECORD_PARAM_COMMS))
