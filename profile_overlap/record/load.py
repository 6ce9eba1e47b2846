"""metrics.json read back: msgspec decodes it straight into the typed record (record/metrics.py).

Records of older schemas are converted once, here: version 1 had no summary and version 2 lacks the
phases, yield and interference (both get theirs recomputed from their own measurements); a job
record written before RunMetrics.job gets its facts from its config. A record of a newer schema, or
one whose fields have the wrong type (a hand edit), is one line naming the file and the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from profile_overlap.core.errors import UserError
from profile_overlap.record.metrics import FOLDER, FOLDER_MODE, JOB, JOB_MODE, SCHEMA_VERSION, JobFacts, RunMetrics
from profile_overlap.record.summary import speedup, with_summary


class _Version(msgspec.Struct):
    schema_version: int
    config: dict[str, Any] | None = None
    """Read raw for its keys, in order (RunConfig.keys)."""


def decode_metrics(data: bytes, *, path: Path | str) -> RunMetrics:
    """A metrics record from its JSON bytes; UserError (one line) for one this version cannot read."""
    try:
        head = msgspec.json.decode(data, type=_Version)
        version = head.schema_version
        if version > SCHEMA_VERSION:
            raise UserError(
                f"{path} is a metrics record of schema {version}, newer than this version reads ({SCHEMA_VERSION}): "
                "report it with the profile_overlap that wrote it, or upgrade"
            )
        metrics = msgspec.json.decode(data, type=RunMetrics)
        metrics = msgspec.structs.replace(metrics, config=metrics.config.with_keys(head.config))
    except msgspec.ValidationError as err:
        raise UserError(
            f"{path}: field {_field(err)}: {_problem(err)}; not a metrics record this version can read: rerun, or fix that field"
        ) from None
    except msgspec.DecodeError as err:
        raise UserError(f"{path} is not valid JSON ({err}): the record is damaged; rerun") from None
    except RecursionError:  # msgspec's own depth limit, not a deep stack
        raise UserError(f"{path} nests deeper than any metrics record: it is not a metrics.json; rerun") from None
    return upgrade(metrics)


def _field(err: msgspec.ValidationError) -> str:
    """The JSON path msgspec names (`$.modes[...].step_time.median_ms`), or `$`."""
    text = str(err)
    return text.rsplit(" - at `", 1)[1].rstrip("`") if " - at `" in text else "$"


def _problem(err: msgspec.ValidationError) -> str:
    """msgspec's message without its path (`Expected `int`, got `str``)."""
    return str(err).split(" - at `", 1)[0]


def load_metrics(path: Path | str) -> RunMetrics:
    """metrics.json read back, converted to the current schema."""
    try:
        data = Path(path).read_bytes()
    except OSError as err:
        raise UserError(f"cannot read {path}: {err.strerror}") from None
    return decode_metrics(data, path=path)


def upgrade(metrics: RunMetrics) -> RunMetrics:
    """A record of an older schema with what the current one holds, computed from its own measurements."""
    if metrics.job is None and _job_facts(metrics) is not None:
        metrics = msgspec.structs.replace(metrics, job=_job_facts(metrics))
    if metrics.summary and metrics.schema_version >= SCHEMA_VERSION:
        return metrics
    # A three-mode record of version 2 was written without its speedup (then computed for exactly two modes).
    return with_summary(msgspec.structs.replace(metrics, speedup=metrics.speedup or speedup(metrics.modes)))


def _job_facts(metrics: RunMetrics) -> JobFacts | None:
    """The facts of a job or bare-folder record written before RunMetrics.job: from its config."""
    cfg = metrics.config
    if cfg.mode == JOB_MODE and "profiled_ranks" in cfg.present():
        return JobFacts(
            kind=JOB,
            source=metrics.run_dir,
            trace_files=cfg.trace_files or 0,
            profiled_steps=cfg.profiled_steps or 0,
            profiled_ranks=cfg.profiled_ranks,
            missing_ranks=cfg.missing_ranks,
            dropped_traces=cfg.dropped_traces or 0,
            cycles=cfg.cycles or "all",
        )
    mode = metrics.modes.get(FOLDER_MODE)
    if list(metrics.modes) == [FOLDER_MODE] and mode is not None and cfg.source is not None:
        ranks = mode.analysis.ranks if mode.analysis else ()
        return JobFacts(
            kind=FOLDER,
            source=cfg.source,
            trace_files=None,
            profiled_steps=max((len(r.steps) for r in ranks), default=0),
            profiled_ranks=tuple(r.rank for r in ranks),
        )
    return None
