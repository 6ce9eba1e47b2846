"""env.json: versions, hosts, ranks and devices, and the command that reruns the job."""

from __future__ import annotations

import datetime as dt
import os
import platform
import shlex
import socket
import sys
from typing import Any

import msgspec
import torch
import torch.distributed as dist

from profile_overlap.record.metrics import Env, RankEnv
from profile_overlap.run import flags
from profile_overlap.run.config import Config


def _launcher() -> str:
    """torchrun, or this package's own launcher (which also goes through torch elastic)."""
    return "python" if os.environ.get("PROFILE_OVERLAP_SELF_LAUNCHED") else "torchrun"


def reproduce_command(*, num_nodes: int, config: Config | None = None) -> str:
    """The command line that reruns this job. For a run, every flag is spelled out from the
    config (a later change of defaults cannot change the rerun) and --name is left out (that
    folder exists); other commands repeat their own arguments."""
    args = config_flags(config) if config else sys.argv[1:]
    if _launcher() == "torchrun":
        local = os.environ.get("LOCAL_WORLD_SIZE", "1")
        where = ["--standalone"] if num_nodes == 1 else [f"--nnodes={num_nodes}", "--rdzv-backend=c10d", "--rdzv-endpoint=<host>:<port>"]
        return shlex.join(["torchrun", *where, f"--nproc-per-node={local}", "-m", "profile_overlap", *args])
    nproc = ["--nproc-per-node", os.environ.get("LOCAL_WORLD_SIZE", "1")] if config else []
    return shlex.join(["python", "-m", "profile_overlap", *args, *nproc])


def config_flags(config: Config) -> list[str]:
    """`run` flags that recreate this config (all of them, defaults included), generated from its fields."""
    return ["run", *flags.to_argv(config, leave_out=("name", "nproc_per_node"))]


def environment(backend: str, device: torch.device, *, config: Config | None = None) -> Env:
    """This job's env.json (and the record's env), gathered from every rank; a collective."""
    world = dist.get_world_size()
    mine = RankEnv(
        rank=dist.get_rank(),
        host=socket.gethostname(),
        pid=os.getpid(),
        local_rank=int(os.environ.get("LOCAL_RANK", 0)),
        node_rank=int(os.environ.get("GROUP_RANK", os.environ.get("NODE_RANK", 0))),
        device=torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or platform.machine(),
    )
    gathered: list[RankEnv | None] = [None] * world
    dist.all_gather_object(gathered, mine)
    ranks = tuple(r for r in gathered if r is not None)
    num_nodes = len({r.node_rank for r in ranks})
    torch_version = str(torch.__version__)  # a TorchVersion, a str subclass
    return Env(
        date=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        command=reproduce_command(num_nodes=num_nodes, config=config),
        launcher=_launcher(),
        python=platform.python_version(),
        torch=torch_version,
        cuda=torch.version.cuda,
        nccl=".".join(map(str, torch.cuda.nccl.version())) if backend == "nccl" else None,
        gloo=f"bundled with torch {torch_version}" if backend == "gloo" else None,
        backend=backend,
        device_type=device.type,
        world_size=world,
        num_nodes=num_nodes,
        hosts=tuple(sorted({r.host for r in ranks if r.host is not None})),
        ranks=ranks,
    )


def env_json(env: Env) -> dict[str, Any]:
    """env.json's object: every field, in order, None as null."""
    plain: dict[str, Any] = msgspec.to_builtins(env)
    return plain
