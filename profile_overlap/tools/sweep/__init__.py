"""`sweep`: when does the split pay (or any mode against another)? A compare run per point of a grid, in one job.

    torchrun --standalone --nproc-per-node 4 -m profile_overlap sweep --vary dim=256,512,1024,2048
    python -m profile_overlap sweep --nproc-per-node 2 --vary model=mlp,transformer --vary layers=2,4

The process group is made once and every point reuses it. The sweep folder holds one complete
run folder per point (its own metrics.json, traces, TensorBoard files and report: each point is
an HParams entry in TensorBoard) and the sweep's own record and report:

    runs/<stamp>-sweep-<backend>-w<N>/
      sweep.json  sweep.html  sweep.md  sweep.png  status.json  config.json
      00-dim256/  01-dim512/ ...            (run folders; a named knob's value alone: 00-mlp, 01-transformer)

Each point's Config is built from the run flags as the user gave them, plus the point's knobs:
--layers, --dim and --batch left out resolve per point to its own --model's defaults, so
`--vary model=mlp,transformer` compares each model at its own default size.

The sweep's numbers are each point's headline numbers (record.summary.headline) and per-mode
numbers (record.summary.modes, speedup_vs_first), read from its record, never recomputed. Every
point runs the same modes (--modes, passed through; by default sequential, split, split-blocking);
the crossover is where the second of them starts to beat the first. Its renderers (figure,
reports, console) are in tools/sweep/report.py.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from profile_overlap.core.errors import UserError
from profile_overlap.core.files import CONFIG_JSON, METRICS_JSON, SWEEP_JSON
from profile_overlap.run import config as run_config
from profile_overlap.run import flags
from profile_overlap.tools.sweep.axes import series_of
from profile_overlap.tools.sweep.record import WORKLOAD, ModeEntry, SweepCrossover, SweepPoint, SweepRecord, Workload

_FLAGS = {f.name: f for f in flags.flags(run_config.Config)}
KNOBS = {name: _FLAGS[name] for name in ("dim", "layers", "batch", "dtype", "model", "heads", "seq_len")}
"""Config fields a sweep may vary, as flags (type and choices from their declaration in run/config.py)."""
RUN_FLAGS = tuple(name for name in _FLAGS if name not in run_config.JOB_FLAGS)
"""The run's own flags (the job flags aside): what a point's Config is built from."""
_EXAMPLES = {"dim": "256,512", "layers": "4,8", "batch": "16,64", "heads": "2,4", "seq_len": "32,64"}


@dataclass(frozen=True)
class SweepConfig(run_config.JobSection):
    """The `sweep` command's flags: the run flags as given, the knobs, and the job flags."""

    run: dict[str, Any]
    """The run flags as given (RUN_FLAGS); None where a flag was left to its model's default
    (--layers, --dim, --batch), so that each point resolves it for its own --model."""
    vary: tuple[tuple[str, tuple], ...]
    """(knob, values) in the order given; the first knob is the x axis of the plots."""
    job: run_config.JobConfig = field(default_factory=run_config.JobConfig)
    """The job flags: one process group and one sweep folder for every point."""

    def __post_init__(self) -> None:
        first = self.point_configs()[0]  # a bad value (say dim=0) fails here, before any rank starts
        if first.workload.mode != "compare":
            raise ValueError(f"a sweep always runs --mode compare (every mode): drop --mode {first.workload.mode}")
        if not first.schedule.profile:
            raise ValueError("a sweep needs the profiler for overlap and exposed communication: drop --no-profile")

    def points(self) -> list[dict]:
        names = [name for name, _ in self.vary]
        return [dict(zip(names, values)) for values in itertools.product(*(values for _, values in self.vary))]

    def point_configs(self) -> list[run_config.Config]:
        """One compare Config per point; ValueError names the point and the flag."""
        configs = []
        for point in self.points():
            try:
                configs.append(run_config.Config.of(**{**self.run, **point}, job=dataclasses.replace(self.job, name=None)))
            except ValueError as err:
                raise ValueError(f"sweep point {point_label(point)}: {err}") from None
        return configs

    def check_world_size(self, world_size: int) -> None:
        """Every point must fit the world size before the first one runs (job.process_group calls it)."""
        for point, config in zip(self.points(), self.point_configs()):
            try:
                config.check_world_size(world_size)
            except ValueError as err:
                raise ValueError(f"sweep point {point_label(point)}: {err}") from None


def parse_vary(specs: list[str]) -> tuple[tuple[str, tuple], ...]:
    """`dim=256,512` -> (("dim", (256, 512)),), with one-line errors naming the flag. `seq-len` is `seq_len`."""
    if not specs:
        raise UserError("give at least one --vary KNOB=V1,V2,... (knobs: " + ", ".join(KNOBS) + ")")
    out: list[tuple[str, tuple[Any, ...]]] = []
    for spec in specs:
        name, sep, values = spec.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or name not in KNOBS or not values:
            raise UserError(f"--vary {spec!r}: write KNOB=V1,V2,... with KNOB one of {', '.join(KNOBS)}")
        if name in dict(out):
            raise UserError(f"--vary {name} is given twice: list all its values in one --vary")
        texts = [v.strip() for v in values.split(",")]
        knob = KNOBS[name]
        if knob.choices:
            bad = next((v for v in texts if v not in knob.choices), None)
            if bad is not None:
                raise UserError(f"--vary {spec!r}: {name} takes one of {', '.join(knob.choices)}, not {bad!r}")
            parsed = tuple(texts)
        else:
            try:
                parsed = tuple(knob.kind(v) for v in texts)
            except ValueError:
                raise UserError(f"--vary {spec!r}: {name} takes whole numbers, e.g. {name}={_EXAMPLES[name]}") from None
        if len(set(parsed)) != len(parsed):
            raise UserError(f"--vary {spec!r} repeats a value")
        out.append((name, parsed))
    return tuple(out)


def point_label(point: dict) -> str:
    """dim=256, model=mlp: a point, for people."""
    return ", ".join(f"{k}={v}" for k, v in point.items())


def point_dir_name(index: int, point: dict) -> str:
    """00-dim256-mlp: a point's run folder (a named knob's value stands alone: mlp, float16)."""
    return "-".join([f"{index:02d}", *(v if isinstance(v, str) else f"{k}{v}" for k, v in point.items())])


# ---------------------------------------------------------------- on every rank


def run_rank(sweep: SweepConfig) -> int:
    import torch.distributed as dist

    from profile_overlap.core import status as run_status
    from profile_overlap.core.io import write_json_atomic
    from profile_overlap.run import harness, job
    from profile_overlap.tools.sweep.report import print_summary, write_reports

    with job.process_group(sweep) as (backend, device):  # checks every point against the world size first
        world = dist.get_world_size()
        sweep_dir = job.make_dir(lambda: job.create_fresh_dir(sweep, backend=backend, world=world, label="sweep"))
        with job.failure_recorded(sweep_dir):
            if dist.get_rank() == 0:
                base = {**sweep.run, **dataclasses.asdict(sweep.job)}  # null: each point's model decides
                write_json_atomic(sweep_dir / CONFIG_JSON, {"base": base, "vary": {k: list(v) for k, v in sweep.vary}})
                run_status.write(sweep_dir, "running")
            point_dirs = []
            for index, (point, config) in enumerate(zip(sweep.points(), sweep.point_configs())):
                config = dataclasses.replace(config, job=dataclasses.replace(config.job, out=str(sweep_dir)))
                name = point_dir_name(index, point)
                point_dir = job.make_dir(lambda name=name: _mkdir(sweep_dir / name))
                with job.failure_recorded(point_dir):
                    harness.run_in_folder(config, backend=backend, device=device, run_dir=point_dir)
                point_dirs.append(point_dir)
            passed = True
            if dist.get_rank() == 0:
                record = sweep_record(sweep, point_dirs)
                write_json_atomic(sweep_dir / SWEEP_JSON, record.to_json())
                write_reports(sweep_dir, record)
                print_summary(record, sweep_dir)
                passed = all(p.passed for p in record.points)
                if passed:
                    run_status.write(sweep_dir, "succeeded")
                else:
                    failed = [p.name for p in record.points if not p.passed]
                    run_status.write(sweep_dir, "failed", reason="verification failed at " + ", ".join(failed))
            dist.barrier()
    return 0 if passed else 1


def _mkdir(path: Path) -> Path:
    path.mkdir()
    return path


# ---------------------------------------------------------------- the record (rank 0)


def sweep_record(sweep: SweepConfig, point_dirs: list[Path]) -> SweepRecord:
    """Each point's knobs, resolved workload, headline numbers and per-mode numbers, read from its metrics.json."""
    from profile_overlap.record.load import load_metrics

    points: list[SweepPoint] = []
    modes: list[str] = []
    for point, run_dir in zip(sweep.points(), point_dirs):
        metrics = load_metrics(run_dir / METRICS_JSON)
        summary = metrics.summary
        assert summary is not None  # load_metrics reads a record with its summary
        versus = {x.mode: x for x in summary.speedup_vs_first}
        entries = {  # the run's order: --modes, else sequential, split, split-blocking
            mode: ModeEntry(
                step_ms=metrics.modes[mode].step_time.median_ms,
                speedup_vs_first=versus[mode].speedup,
                within_noise_vs_first=versus[mode].within_noise,
                comm_ms=m.comm_ms,
                compute_ms=m.compute_ms,
                exposed_comm_ms=m.exposed_comm_ms,
                overlap_pct=m.overlap_pct,
            )
            for mode, m in summary.modes.items()
        }
        workload = Workload(**{k: getattr(metrics.config, k) for k in WORKLOAD})
        points.append(
            SweepPoint(
                name=run_dir.name,
                knobs=point,
                workload=workload,
                passed=metrics.passed,
                headline=summary.headline,
                within_noise=summary.within_noise,
                modes=entries,
            )
        )
        modes = list(summary.modes)  # every point runs the same modes
    vary = {k: list(v) for k, v in sweep.vary}
    return SweepRecord(vary=vary, modes=modes, points=points, crossover=crossover(points, sweep.vary, modes))


def crossover(points: list[SweepPoint], vary, modes: list[str]) -> list[SweepCrossover]:
    """Per series (one per combination of the other knobs): the first x where the second mode (split
    by default) beats the first (sequential) after an x where it did not, or a statement that it
    never/always did. A knob of names (model, dtype) is taken in the order given."""
    x_name = vary[0][0]
    baseline, mode = modes[0], modes[1]
    out = []
    for other, series in series_of(points, vary):
        # A win must be outside run-to-run noise (the report's within_noise rule).
        wins = [(p.knobs[x_name], (p.mode(mode).speedup_vs_first or 0) > 1 and not p.mode(mode).within_noise_vs_first, p) for p in series]
        first_win = next((i for i, (_, won, _) in enumerate(wins) if won and all(w for _, w, _ in wins[i:])), None)
        if first_win is None:
            kind = "never"
        elif first_win == 0:
            kind = "always"
        else:
            kind = "crossover"
        point = wins[first_win][2] if first_win is not None else None
        out.append(
            SweepCrossover(
                series=other,
                mode=mode,
                baseline=baseline,
                kind=kind,
                at={x_name: wins[first_win][0]} if first_win is not None else None,
                point=point.name if point else None,
            )
        )
    return out
