"""`python -m profile_overlap tensorboard [RUNS]`: TensorBoard over the run folders, on loopback.

Every mode folder (runs/<run>/<mode>/) is one TensorBoard run. Finished runs made before their
event files existed get them written first (from metrics.json; nothing is recomputed).
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from pathlib import Path

from profile_overlap.core.errors import UserError
from profile_overlap.core.files import METRICS_JSON

OFFLINE_NOTE = """\
Where to look:
  Scalars         per profiled step: step_ms, comm_ms, compute_ms, exposed_comm_ms, overlap_pct, busbw_gbps
                  (rank<r>/, mean/, max/), memory/, step_time/; sequential and split are overlaid
  Custom Scalars  "sequential vs split": step time, exposed comm and overlap % on one chart each
  Images          the overlap timeline of each mode, side by side on one time axis (tick "Show actual image size")
  Text            the summary table, the verification result and the configuration (under the run's first mode)
  HParams         one row per mode and run, sortable by median step ms, overlap %, exposed comm ms, speedup
  Overlap         profile_overlap's own tab: every mode's timeline (zoom, pan, hover) with the step's phases
                  (forward, backward, optimizer) as a band above each rank, and hidden vs exposed comm per phase
Not offline: the PyTorch Profiler tab (torch-tb-profiler) lists each mode's rank traces, but its
charts load Google Charts and a web-components polyfill from the internet, so without internet they
stay blank; its Distributed view also misreads _all_gather_base / _reduce_scatter_base. The numbers
above are ours and render offline."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", nargs="?", default="runs", type=Path, help="folder of run folders, or one run folder (default: runs)")
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only; 0.0.0.0 exposes it to the network)"
    )
    parser.add_argument("--port", type=port_number, default=0, help="port (default: a free one)")


def port_number(text: str) -> int:
    """--port: a TCP port, 0 to 65535 (0: a free one)."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number: pass 1 to 65535, or leave --port out for a free one") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port number: pass 1 to 65535, or leave --port out for a free one")
    return port


def bindable_port(host: str, port: int) -> int:
    """`port` (a free one for 0) once a socket has been bound to it on `host`, as TensorBoard will
    bind it; UserError (one line) where the host does not resolve or the port cannot be bound."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except (socket.gaierror, UnicodeError) as err:  # UnicodeError: a name no IDNA encoding takes
        raise UserError(f"--host {host}: cannot resolve it ({err}); pass an address of this machine, e.g. 127.0.0.1") from None
    try:
        with socket.socket(family, kind, proto) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as TensorBoard's server does
            s.bind(address)
            return int(s.getsockname()[1])
    except OSError as err:
        raise UserError(
            f"cannot listen on {host} port {port or 'any'}: {err.strerror}; pick another --port (or leave it out for a free one)"
        ) from None


def write_missing_events(logdir: Path) -> list[Path]:
    """Event files for finished runs under `logdir` that have metrics.json but none of ours yet."""
    from profile_overlap.render import tensorboard

    written = []
    for metrics_path in sorted(logdir.glob(METRICS_JSON)) + sorted(logdir.glob("*/metrics.json")):
        run_dir = metrics_path.parent
        mode_dirs = [p for p in run_dir.iterdir() if p.is_dir()]
        if mode_dirs and not any(any(d.glob(f"events.out.tfevents.*{tensorboard.EVENT_SUFFIX}")) for d in mode_dirs):
            tensorboard.write_run(run_dir)
            written.append(run_dir)
    return written


def main(args: argparse.Namespace) -> int:
    logdir: Path = args.runs
    if not logdir.is_dir():
        raise UserError(f"{logdir} is not a folder; pass the folder of run folders (e.g. runs) or one run folder")
    for run_dir in write_missing_events(logdir):
        print(f"wrote TensorBoard event files for {run_dir}")
    port = bindable_port(args.host, args.port)
    shown = "localhost" if args.host == "127.0.0.1" else args.host
    print(f"TensorBoard on http://{shown}:{port}/  (logdir {logdir}; Ctrl-C stops it)")
    print(OFFLINE_NOTE, flush=True)
    # Become TensorBoard: Ctrl-C and a kill of this PID stop it directly, with no orphaned child.
    cmd = [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--host", args.host, "--port", str(port)]
    os.execv(sys.executable, cmd)
    return 0  # not reached
