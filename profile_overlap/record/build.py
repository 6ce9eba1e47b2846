"""The one function that builds a metrics record, for a run of ours, a job traced by trace_handler and
a bare folder of others' traces: the schema version, the speedup and the summary are filled here,
once, whichever made the measurements."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from profile_overlap.record.config import RunConfig
from profile_overlap.record.metrics import SCHEMA_VERSION, CheckResult, Env, JobFacts, ModeMetrics, RunMetrics
from profile_overlap.record.summary import speedup, with_summary


def build_record(
    *,
    run_dir: str,
    config: Mapping[str, Any],
    env: Env,
    modes: dict[str, ModeMetrics],
    checks: tuple[CheckResult, ...] = (),
    rounds: tuple[tuple[str, ...], ...] = (),
    job: JobFacts | None = None,
    unit_param_bytes: tuple[tuple[int, ...], ...] = (),
) -> RunMetrics:
    """`modes` in the run's order; `job`: what a record from traces alone covers (None for a run);
    `unit_param_bytes`: the run's model's parameters' bytes, unit by unit (a run of ours only)."""
    return with_summary(
        RunMetrics(
            schema_version=SCHEMA_VERSION,
            run_dir=run_dir,
            config=RunConfig.from_dict(config),
            env=env,
            modes=modes,
            checks=checks,
            speedup=speedup(modes),
            rounds=rounds,
            job=job,
            unit_param_bytes=unit_param_bytes,
        )
    )
