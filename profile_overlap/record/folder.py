"""A run folder read back: its metrics record, timeline and status, with one-line errors for
anything that is not a finished (or failed) run."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import msgspec

from profile_overlap.core.errors import UserError
from profile_overlap.core.files import METRICS_JSON, STATUS_JSON, TIMELINE_JSON
from profile_overlap.record.load import load_metrics
from profile_overlap.record.metrics import RunMetrics
from profile_overlap.record.timeline import Timeline, load_timeline


class RunStatus(msgspec.Struct, frozen=True, kw_only=True):
    """status.json (core/status.py writes it)."""

    state: str
    """running, succeeded, failed or interrupted."""
    time: str | None = None
    reason: str | None = None


@dataclass(frozen=True)
class Run:
    dir: Path
    metrics: RunMetrics
    timeline: Timeline | None
    status: RunStatus | None
    """status.json; None while the run itself renders its report (the run is finishing)."""

    @property
    def name(self) -> str:
        return self.dir.name

    @property
    def failed(self) -> bool:
        return not self.metrics.passed or (self.status is not None and self.status.state in ("failed", "interrupted"))


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
    status = _read_status(status_path) if status_path.is_file() else None
    if not metrics_path.is_file():
        state = status.state if status else "unknown"
        reason = (status.reason if status else None) or "no reason recorded"
        if state == "running":
            raise UserError(f"{run_dir} is still running (or was killed) and has no metrics.json yet: wait for it to finish, or rerun it")
        raise UserError(
            f"run {run_dir.name} {state.upper()} before writing metrics.json ({reason}): nothing to report; fix the cause and rerun"
        )
    metrics = load_metrics(metrics_path)
    timeline_path = run_dir / TIMELINE_JSON
    timeline = load_timeline(timeline_path) if timeline_path.is_file() else None
    return Run(dir=run_dir, metrics=metrics, timeline=timeline, status=status)


def _read_status(path: Path) -> RunStatus:
    try:
        return msgspec.json.decode(path.read_bytes(), type=RunStatus)
    except msgspec.ValidationError as err:
        raise UserError(f"{path}: {err}: not a status this version can read; rerun") from None
    except msgspec.DecodeError as err:
        raise UserError(f"{path} is not valid JSON ({err}): the run folder is damaged; rerun") from None
