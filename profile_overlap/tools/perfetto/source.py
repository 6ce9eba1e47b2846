"""What `perfetto` was pointed at: a run folder, a job folder (trace_handler / profile), a log_dir
holding jobs, or a bare folder of torch.profiler traces -> the trace folder of each mode, the
hosts of the ranks, and where the merged file goes by default."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from profile_overlap.analysis.folder import find_trace_files
from profile_overlap.api import layout
from profile_overlap.core.errors import UserError
from profile_overlap.core.files import METRICS_JSON, PERFETTO_TRACE, STATUS_JSON
from profile_overlap.record.folder import load_run

_HOST_RANK = re.compile(r"^(?P<host>.+)_(?P<rank>\d+)\.\d+\.pt\.trace\.json(?:\.gz)?$")
"""torch's tensorboard_trace_handler (and ours) names a trace <host>_<rank>.<time>.pt.trace.json.gz."""


@dataclass(frozen=True)
class ModeTraces:
    mode: str
    folder: Path
    """The folder of this mode's trace files."""


@dataclass(frozen=True)
class Source:
    kind: str
    """"run", "job" or "traces" (a folder of others' traces)."""
    root: Path
    modes: tuple[ModeTraces, ...]
    hosts: dict[int, str]
    """Each rank's host, where the record or the file names say."""

    def default_out(self, mode: str | None) -> Path:
        """Beside the record for runs and jobs; for a bare trace folder, in the current folder
        (a file among the traces would be read as one by the next `analyze`)."""
        name = PERFETTO_TRACE if mode is None else PERFETTO_TRACE.replace(".json.gz", f".{mode}.json.gz")
        if self.kind == "traces":
            return Path.cwd() / f"{self.root.resolve().name}.{name}"
        return self.root / name


def find_source(path: Path, *, mode: str | None = None) -> Source:
    """The source at `path`, keeping only `mode` when given (one line and exit 2 for anything else)."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"{path} does not exist: give a run folder, a job folder (trace_handler's log_dir) or a folder of traces")
    if not path.is_dir():
        raise UserError(f"{path} is not a folder: give a run folder, a job folder (trace_handler's log_dir) or a folder of traces")
    if (path / METRICS_JSON).is_file() or (path / STATUS_JSON).is_file():
        source = _recorded(path)
    elif (path / layout.STATE_DIR).is_dir():
        source = Source("job", path, (ModeTraces(layout.JOB_MODE, path),), _hosts_of_states(path))
    elif any(d.is_dir() and ((d / layout.STATE_DIR).is_dir() or (d / METRICS_JSON).is_file()) for d in path.iterdir()):
        return find_source(layout.find_job_dir(path), mode=mode)  # a log_dir (or runs/): its latest job
    elif find_trace_files(path):
        source = Source("traces", path, (ModeTraces(path.resolve().name, path),), _hosts_of_names(path))
    else:
        layout.find_job_dir(path)  # the one-line error for a folder with neither traces nor jobs
        raise UserError(f"no *.json or *.json.gz trace files under {path}: point perfetto at a run, a job or a folder of traces")
    if mode is None:
        return source
    chosen = tuple(m for m in source.modes if m.mode == mode)
    if not chosen:
        have = ", ".join(m.mode for m in source.modes) or "none profiled"
        raise UserError(f"--mode {mode} is not in {path} (its modes: {have}); pick one of them or leave --mode out for all")
    return Source(source.kind, source.root, chosen, source.hosts)


def _recorded(path: Path) -> Source:
    run = load_run(path)
    kind = "job" if set(run.metrics.modes) == {layout.JOB_MODE} else "run"
    modes = tuple(ModeTraces(name, path / m.trace_dir) for name, m in run.metrics.modes.items() if m.trace_dir is not None)
    if not modes:
        raise UserError(f"{path} has no traces: its modes ran without the profiler; rerun with --profile")
    hosts = {r.rank: r.host for r in run.metrics.env.ranks if r.host is not None and r.host != "?"}
    return Source(kind, path, modes, hosts or (_hosts_of_states(path) if kind == "job" else {}))


def _hosts_of_states(job_dir: Path) -> dict[int, str]:
    return {rank: s.host for rank, s in layout.read_states(job_dir).items() if s.host}


def _hosts_of_names(folder: Path) -> dict[int, str]:
    hosts = {}
    for p in find_trace_files(folder):
        if m := _HOST_RANK.match(p.name):
            hosts[int(m["rank"])] = m["host"]
    return hosts
