"""Run under torchrun, or launch local ranks with torch's own elastic launcher.

Under torchrun the environment (RANK, WORLD_SIZE, MASTER_ADDR, ...) is already set and this
process is one rank. Run as a plain `python -m profile_overlap`, it starts `--nproc-per-node`
ranks on this machine through `torch.distributed.launcher.elastic_launch`, as the original demo
did with mp.spawn, and reports the job's outcome in one line.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import uuid
from collections.abc import Callable
from typing import Any

from profile_overlap.core import rank_output
from profile_overlap.core.errors import UserError
from profile_overlap.run.config import Config, JobSection

TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def under_torchrun() -> bool:
    return all(v in os.environ for v in TORCHRUN_VARS)


def default_nproc() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 4


def as_rank(entry: Callable[[Any], int], config: Any) -> int:
    """Run `entry(config)` as this rank, its own output captured to its log (rank_output)."""
    rank_output.capture()
    failed = True
    try:
        code = entry(config)
        failed = bool(code)
        return code
    finally:
        rank_output.release(failed=failed)


def _rank_entry(entry: Callable[[Any], int], config: Any, command: str) -> int:
    """One rank, in a process started by elastic_launch."""
    try:
        code = as_rank(entry, config)
    except UserError as err:
        rank_output.report_user_error(command, err)
        sys.exit(err.exit_code)
    except KeyboardInterrupt:
        # Ctrl-C reaches every rank (and the launcher forwards another): stop quietly, once.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if os.environ.get("LOCAL_RANK", "0") == "0":
            print(f"profile_overlap {command}: interrupted", file=rank_output.err(), flush=True)
        sys.exit(130)
    if code:
        sys.exit(code)
    return code


def run_rank(config: Config) -> int:
    from profile_overlap.run import harness

    code = harness.run(config)
    if code:
        sys.exit(code)
    return code


def launch_or_run(config: JobSection, *, entry: Callable[[Any], int] = run_rank, command: str = "run") -> int:
    """Run `entry(config)` as this rank under torchrun, else launch `config.job.nproc_per_node` local
    ranks that each run it. `entry` must be a module-level function (it is pickled by name)."""
    if under_torchrun():
        return as_rank(entry, config)
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    nproc = config.job.nproc_per_node or default_nproc()
    os.environ["PROFILE_OVERLAP_SELF_LAUNCHED"] = "1"  # inherited by the ranks: env.json's launcher
    if nproc > 1:
        # One intra-op thread per rank unless the user chose, as torchrun gives its ranks. Two threads
        # per rank made a CPU rank's numbers depend on timing: 7 of 79 compare runs trained their first
        # mode 4e-5 away from the others and failed their own verification (0 of 38 with one thread).
        os.environ.setdefault("OMP_NUM_THREADS", "1")
    if not rank_output.verbose():
        # The launcher runs in this process: its own logging (a traceback per failed rank) would
        # bury our one line; the failure it reports reaches us as ChildFailedError below.
        for name in ("torch.distributed.elastic", "torch.multiprocessing"):
            logging.getLogger(name).setLevel(logging.CRITICAL)
    launch_config = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=nproc,
        run_id=str(uuid.uuid4()),
        rdzv_backend="c10d",
        rdzv_endpoint="127.0.0.1:0",
        max_restarts=0,
        monitor_interval=0.1,
    )
    try:
        elastic_launch(launch_config, _rank_entry)(entry, config, command)
    except SignalException as err:
        # Ctrl-C or SIGTERM reached the launcher; it has already stopped every rank.
        raise KeyboardInterrupt from err
    except ChildFailedError as err:
        rank, failure = err.get_first_failure()
        code = failure.exitcode
        line = failure.message.get("message") if isinstance(failure.message, dict) else None
        if line:  # our own one-line error, handed over by the rank (rank_output.record_error)
            raise UserError(line.split(": error: ", 1)[-1], exit_code=code if code in (1, 2) else 1) from None
        how = f"was killed by {failure.signal_name()}" if code < 0 else f"exited with code {code} (it crashed)"
        where = "in the run folder's logs/" if not rank_output.verbose() else "above"
        raise UserError(f"rank {rank} {how}; its output is {where}", exit_code=1) from None
    return 0
