"""A run folder read back: its metrics record, timeline and status, with one-line errors for
anything that is not a finished (or failed) run."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from profile_overlap.core.errors import UserError
from profile_overlap.core.files import METRICS_JSON, STATUS_JSON, TIMELINE_JSON
from profile_overlap.record.load import load_metrics
from profile_overlap.record.metrics import RunMetrics


@dataclass(frozen=True)
class Run:
    dir: Path
    metrics: RunMetrics
    timeline: dict | None
    status: dict | None
    """status.json; None while the run itself renders its report (the run is finishing)."""

    @property
    def name(self) -> str:
        return self.dir.name

    @property
    def failed(self) -> bool:
        return not self.metrics.passed or (self.status is not None and self.status.get("state") in ("failed", "interrupted"))


def load_run(run_dir: Path) -> Run:
    """A finished (or failed) run folder, with one-line errors for anything else."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise UserError(f"{run_dir} is not a folder: give a run folder made by `profile_overlap run` (e.g. runs/<run>)")
    status_path, metrics_path = run_dir / STATUS_JSON, run_dir / METRICS_JSON
    if not status_path.is_file() and not metrics_path.is_file():
        raise UserError(
            f"{run_dir} is not a run folder (no status.json or metrics.json): give a folder made by "
            "`profile_overlap run`; for bare trace folders use `profile_overlap analyze`"
        )
    status = _read_json(status_path) if status_path.is_file() else None
    if not metrics_path.is_file():
        state = (status or {}).get("state", "unknown")
        reason = (status or {}).get("reason") or "no reason recorded"
        if state == "running":
            raise UserError(f"{run_dir} is still running (or was killed) and has no metrics.json yet: wait for it to finish, or rerun it")
        raise UserError(
            f"run {run_dir.name} {state.upper()} before writing metrics.json ({reason}): nothing to report; fix the cause and rerun"
        )
    metrics = load_metrics(metrics_path)
    timeline_path = run_dir / TIMELINE_JSON
    timeline = _read_json(timeline_path) if timeline_path.is_file() else None
    return Run(dir=run_dir, metrics=metrics, timeline=timeline, status=status)


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except ValueError as err:
        raise UserError(f"{path} is not valid JSON ({err}): the run folder is damaged; rerun") from None
