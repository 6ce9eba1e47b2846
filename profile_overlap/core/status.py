"""status.json: whether a run folder is complete. A run that did not finish never looks finished.

States: running, succeeded, failed, interrupted. Written atomically by rank 0 (and by any rank
that fails), so a reader sees the old state or the new one, never half a file.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

from profile_overlap.core.files import STATUS_JSON
from profile_overlap.core.io import write_json_atomic

STATES = ("running", "succeeded", "failed", "interrupted")


def write(run_dir: Path, state: str, *, reason: str | None = None) -> None:
    assert state in STATES, state
    write_json_atomic(
        Path(run_dir) / STATUS_JSON,
        {
            "state": state,
            "time": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "reason": reason,
        },
    )


def read(run_dir: Path) -> dict[str, Any] | None:
    path = Path(run_dir) / STATUS_JSON
    if not path.is_file():
        return None
    status: dict[str, Any] = json.loads(path.read_text())
    return status


def write_if_running(run_dir: Path, state: str, *, reason: str | None = None) -> None:
    """Record a failure unless another rank already has (its reason is the root cause)."""
    current = read(run_dir)
    if current is None or current["state"] == "running":
        write(run_dir, state, reason=reason)
