"""The handler's side of its worker process (api/worker.py): start it, send it tasks, wait for it.

The worker is a fresh interpreter (`python -m profile_overlap.api.worker`), not a fork and not
multiprocessing's spawn: spawn would import the user's training script again in the worker, and
with it torch. It imports no torch, runs at a lower priority with one thread, and reads one JSON
task per line on its stdin, in order; it answers only pings, one line each on its stdout. A step
that does not profile sends nothing, so it costs nothing but the CPU the worker may still be using.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from pathlib import Path

from profile_overlap.api.messages import Ping, Task, WorkerConfig, encode


class Worker:
    def __init__(self, config: WorkerConfig) -> None:
        env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
        # The package as this process imports it, even when it is not installed (a checkout on sys.path).
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "profile_overlap.api.worker", encode(config)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert self._proc.stdin is not None and self._proc.stdout is not None  # both are pipes
        self._stdin, self._stdout = self._proc.stdin, self._proc.stdout
        self._pings = 0

    @property
    def alive(self) -> bool:
        return self._proc.poll() is None and not self._stdin.closed

    def send(self, task: Task) -> bool:
        """Queue a task; False when the worker is gone (the caller then does the work itself)."""
        if not self.alive:
            return False
        try:
            self._stdin.write(encode(task) + "\n")
            self._stdin.flush()
        except (OSError, ValueError):
            return False
        return True

    def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until every task sent so far is done; False on timeout or a dead worker."""
        self._pings += 1
        if not self.send(Ping(id=self._pings)):
            return False
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            ready, _, _ = select.select([self._stdout], [], [], left)
            if not ready:
                return False
            line = self._stdout.readline()
            if not line:
                return False
            if line.strip() == f"pong {self._pings}":
                return True

    def close(self, timeout_s: float) -> bool:
        """No more tasks: let the worker finish the queue and exit. False when it had to be killed."""
        try:
            self._stdin.close()
        except OSError:
            pass
        try:
            self._proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
            return False
        finally:
            self._stdout.close()
        return self._proc.returncode == 0
