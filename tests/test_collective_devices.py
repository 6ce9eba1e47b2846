"""Every tensor we pass to a collective lives on the process group's device (issue 39, finding 1).

An NCCL process group has no CPU backend: a CPU tensor in one of its collectives fails with "No
backend type associated with device type cpu". This machine has no GPU, so the NCCL run cannot be
run here; what can be shown is (1) the failure itself, on a real group whose only backend serves
another device type, and (2) an audit of our source: no call that issues a tensor collective, in
run/ or api/, is handed a tensor moved to the host. The verification ran on every GPU run's first
warmup and crashed there (verify.py moved its errors to the CPU before gathering them).
"""

from __future__ import annotations

import ast
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import REPO, clean_env

PACKAGE = REPO / "profile_overlap"
AUDITED = sorted([*(PACKAGE / "run").glob("*.py"), *(PACKAGE / "api").glob("*.py")])

TENSOR_COLLECTIVES = {
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_single",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "reduce_scatter_single",
    "broadcast",
    "reduce",
    "gather",
    "scatter",
    "all_to_all",
    "all_to_all_single",
    "send",
    "recv",
    "isend",
    "irecv",
}
"""torch.distributed's tensor collectives, called as dist.<name>."""

OUR_ALIASES = {"all_gather_single", "reduce_scatter_single"}
"""pipelines.py's names for torch's renamed collectives, called bare."""


def _called_name(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return None


def _is_collective(call: ast.Call) -> bool:
    func = call.func
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "dist":
        return func.attr in TENSOR_COLLECTIVES
    return isinstance(func, ast.Name) and func.id in OUR_ALIASES


def _moves_to_host(node: ast.AST) -> str | None:
    """The source of the first host move inside `node`: x.cpu(), x.to("cpu"), x.to(device="cpu"), torch.device("cpu")."""
    for sub in ast.walk(node):
        if not isinstance(sub, ast.Call):
            continue
        name = _called_name(sub)
        literal_cpu = any(isinstance(a, ast.Constant) and a.value == "cpu" for a in [*sub.args, *(k.value for k in sub.keywords)])
        if name == "cpu" or (name in ("to", "device") and literal_cpu):
            return ast.unparse(sub)
    return None


def _functions() -> dict[str, list[tuple[Path, ast.FunctionDef]]]:
    found: dict[str, list[tuple[Path, ast.FunctionDef]]] = {}
    for path in AUDITED:
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.FunctionDef):
                found.setdefault(node.name, []).append((path, node))
    return found


def _issuers(functions) -> set[str]:
    """Names of our functions that issue a tensor collective, directly or through another one."""
    issuers: set[str] = set()
    while True:
        more = {
            name
            for name, defs in functions.items()
            if name not in issuers
            for _, fn in defs
            for call in ast.walk(fn)
            if isinstance(call, ast.Call) and (_is_collective(call) or _called_name(call) in issuers)
        }
        if not more:
            return issuers
        issuers |= more


def test_no_tensor_handed_to_a_collective_was_moved_to_the_host():
    functions = _functions()
    issuers = _issuers(functions)
    # The audit sees the verification's collectives (else it would pass by seeing nothing).
    assert {"_worst_over_ranks", "_reduce_check", "compare_params", "ranks_agree", "check_bucket", "reduce_scatter"} <= issuers
    offences = []
    for path in AUDITED:
        for call in ast.walk(ast.parse(path.read_text())):
            if isinstance(call, ast.Call) and (_is_collective(call) or _called_name(call) in issuers):
                for arg in [*call.args, *(k.value for k in call.keywords)]:
                    moved = _moves_to_host(arg)
                    if moved:
                        offences.append(f"{path.relative_to(REPO)}:{call.lineno}: {ast.unparse(call)} is handed {moved}")
    assert not offences, "\n".join(offences)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_a_group_without_a_cpu_backend_refuses_host_tensors_and_the_checks_keep_theirs_on_the_device(tmp_path):
    """A real one-rank group whose only backend serves CUDA (as an NCCL group): the host tensors the
    old verification gathered fail there with NCCL's words, and the checks' gather keeps the tensors
    on the device they were computed on (meta here: the one non-CPU device this machine has, whose
    collectives dispatch without a backend), so on NCCL they stay on the GPU."""
    script = textwrap.dedent(
        """
        import torch, torch.distributed as dist
        from profile_overlap.run import verify
        dist.init_process_group("cuda:gloo", rank=0, world_size=1)
        try:
            dist.all_gather([torch.empty(2)], torch.ones(2))
        except Exception as err:
            print("host tensor:", err)
        errors, bounds = torch.ones(3, device="meta"), torch.ones(3, device="meta")
        seen = []
        real = dist.all_gather
        dist.all_gather = lambda out, t, **kw: (seen.append(t.device.type), real(out, t, **kw))[1]
        try:
            verify._reduce_check("check", errors, bounds, steps=[None] * 3, layers=[0, 1, 2], tolerance=1e-5)
        except NotImplementedError as err:  # meta tensors have no values to bring back to the host
            print("back to the host:", type(err).__name__)
        print("gathered on:", seen)
        dist.destroy_process_group()
        """
    )
    env = clean_env(PYTHONPATH=str(REPO), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "host tensor: No backend type associated with device type cpu" in proc.stdout
    assert "gathered on: ['meta']" in proc.stdout, proc.stdout
