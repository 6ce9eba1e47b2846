"""`sweep`: when does the split pay? A compare run per point of a grid, in one job.

    torchrun --standalone --nproc-per-node 4 -m profile_overlap sweep --vary dim=256,512,1024,2048
    python -m profile_overlap sweep --nproc-per-node 2 --vary dim=128,256 --vary layers=4,8

The process group is made once and every point reuses it. The sweep folder holds one complete
run folder per point (its own metrics.json, traces, TensorBoard files and report: each point is
an HParams entry in TensorBoard) and the sweep's own record and report:

    runs/<stamp>-sweep-<backend>-w<N>/
      sweep.json  sweep.html  sweep.md  sweep.png  status.json  config.json
      00-dim256/  01-dim512/ ...            (run folders)

The sweep's numbers are each point's headline numbers (record.summary.headline), read from its record.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from pathlib import Path

from profile_overlap.core.errors import UserError
from profile_overlap.core.files import CONFIG_JSON, METRICS_JSON, SWEEP_HTML, SWEEP_JSON, SWEEP_MD, SWEEP_PNG
from profile_overlap.core.io import write_text_atomic
from profile_overlap.run import config as run_config
from profile_overlap.run import flags

_KINDS = {f.name: f.kind for f in flags.flags(run_config.Config)}
KNOBS = {name: _KINDS[name] for name in ("dim", "layers", "batch", "dtype")}
"""Config fields a sweep may vary, with their types (from their declaration in run/config.py)."""


@dataclass(frozen=True)
class SweepConfig(run_config.JobSection):
    base: run_config.Config
    """Every point starts from this config (mode is always compare); its job flags are the sweep's."""
    vary: tuple[tuple[str, tuple], ...]
    """(knob, values) in the order given; the first knob is the x axis of the plots."""

    @property
    def job(self) -> run_config.JobConfig:
        return self.base.job

    def points(self) -> list[dict]:
        names = [name for name, _ in self.vary]
        return [dict(zip(names, values)) for values in itertools.product(*(values for _, values in self.vary))]

    def point_configs(self) -> list[run_config.Config]:
        return [dataclasses.replace(self.base, **point, name=None) for point in self.points()]


def parse_vary(specs: list[str]) -> tuple[tuple[str, tuple], ...]:
    """`dim=256,512` -> (("dim", (256, 512)),), with one-line errors naming the flag."""
    if not specs:
        raise UserError("give at least one --vary KNOB=V1,V2,... (knobs: " + ", ".join(KNOBS) + ")")
    out = []
    for spec in specs:
        name, sep, values = spec.partition("=")
        if not sep or name not in KNOBS or not values:
            raise UserError(f"--vary {spec!r}: write KNOB=V1,V2,... with KNOB one of {', '.join(KNOBS)}")
        if name in dict(out):
            raise UserError(f"--vary {name} is given twice: list all its values in one --vary")
        try:
            parsed = tuple(KNOBS[name](v) for v in values.split(","))
        except ValueError:
            raise UserError(f"--vary {spec!r}: {name} takes whole numbers, e.g. {name}=256,512") from None
        if len(set(parsed)) != len(parsed):
            raise UserError(f"--vary {spec!r} repeats a value")
        out.append((name, parsed))
    return tuple(out)


# ---------------------------------------------------------------- on every rank


def run_rank(sweep: SweepConfig) -> int:
    import torch.distributed as dist

    from profile_overlap.core import status as run_status
    from profile_overlap.core.io import write_json_atomic
    from profile_overlap.run import harness, job

    configs = sweep.point_configs()
    with job.process_group(sweep.base) as (backend, device):
        world = dist.get_world_size()
        for config in configs:  # every point must fit the world size before the first one runs
            try:
                config.check_world_size(world)
            except ValueError as err:
                raise UserError(f"sweep point {_label(config, sweep)}: {err}") from None
        sweep_dir = job.make_dir(lambda: job.create_fresh_dir(sweep.base, backend=backend, world=world, label="sweep"))
        with job.failure_recorded(sweep_dir):
            if dist.get_rank() == 0:
                write_json_atomic(sweep_dir / CONFIG_JSON, {"base": sweep.base.to_dict(), "vary": {k: list(v) for k, v in sweep.vary}})
                run_status.write(sweep_dir, "running")
            point_dirs = []
            for index, config in enumerate(configs):
                config = dataclasses.replace(config, out=str(sweep_dir))
                name = f"{index:02d}-{_label(config, sweep)}"
                point_dir = job.make_dir(lambda name=name: _mkdir(sweep_dir / name))
                with job.failure_recorded(point_dir):
                    harness.run_in_folder(config, backend=backend, device=device, run_dir=point_dir)
                point_dirs.append(point_dir)
            passed = True
            if dist.get_rank() == 0:
                record = sweep_record(sweep, point_dirs)
                write_json_atomic(sweep_dir / SWEEP_JSON, record)
                write_reports(sweep_dir, record)
                print_summary(record, sweep_dir)
                passed = all(p["passed"] for p in record["points"])
                if passed:
                    run_status.write(sweep_dir, "succeeded")
                else:
                    failed = [p["name"] for p in record["points"] if not p["passed"]]
                    run_status.write(sweep_dir, "failed", reason="verification failed at " + ", ".join(failed))
            dist.barrier()
    return 0 if passed else 1


def _label(config: run_config.Config, sweep: SweepConfig) -> str:
    return "-".join(f"{name}{getattr(config, name)}" for name, _ in sweep.vary)


def _mkdir(path: Path) -> Path:
    path.mkdir()
    return path


# ---------------------------------------------------------------- the record (rank 0)


def sweep_record(sweep: SweepConfig, point_dirs: list[Path]) -> dict:
    """Each point's knobs and headline numbers, read from its metrics.json."""
    from profile_overlap.record.summary import load_metrics

    points = []
    for point, run_dir in zip(sweep.points(), point_dirs):
        metrics = load_metrics(run_dir / METRICS_JSON)
        seq, split = metrics.summary.modes["sequential"], metrics.summary.modes["split"]
        seq_t, split_t = metrics.modes["sequential"].step_time, metrics.modes["split"].step_time
        points.append(
            {
                "name": run_dir.name,
                "knobs": point,
                "passed": metrics.passed,
                "headline": metrics.summary.headline,
                "within_noise": metrics.summary.within_noise,
                "sequential": {"comm_ms": seq.comm_ms, "compute_ms": seq.compute_ms, "step_ms": seq_t.median_ms},
                "split": {
                    "comm_ms": split.comm_ms,
                    "compute_ms": split.compute_ms,
                    "step_ms": split_t.median_ms,
                    "exposed_comm_ms": split.exposed_comm_ms,
                    "overlap_pct": split.overlap_pct,
                },
            }
        )
    return {"vary": {k: list(v) for k, v in sweep.vary}, "points": points, "crossover": crossover(points, sweep.vary)}


def crossover(points: list[dict], vary) -> list[dict]:
    """Per series (one per combination of the other knobs): the first x where the split wins
    (speedup > 1) after an x where it did not, or a statement that it never/always won."""
    x_name = vary[0][0]
    out = []
    for other, series in _series(points, vary):
        # A win must be outside run-to-run noise (the report's within_noise rule).
        wins = [(p["knobs"][x_name], (p["headline"]["speedup"] or 0) > 1 and not p["within_noise"], p) for p in series]
        first_win = next((i for i, (_, won, _) in enumerate(wins) if won and all(w for _, w, _ in wins[i:])), None)
        if first_win is None:
            kind = "never"
        elif first_win == 0:
            kind = "always"
        else:
            kind = "crossover"
        point = wins[first_win][2] if first_win is not None else None
        out.append(
            {
                "series": other,
                "kind": kind,
                "at": {x_name: wins[first_win][0]} if first_win is not None else None,
                "point": point["name"] if point else None,
            }
        )
    return out


def _series(points: list[dict], vary) -> list[tuple[dict, list[dict]]]:
    x_name = vary[0][0]
    groups: dict[tuple, list[dict]] = {}
    for p in points:
        key = tuple((k, v) for k, v in p["knobs"].items() if k != x_name)
        groups.setdefault(key, []).append(p)
    return [(dict(key), sorted(ps, key=lambda p: p["knobs"][x_name])) for key, ps in groups.items()]


# ---------------------------------------------------------------- renderers (rank 0)


def figure(record: dict):
    """Speedup, overlap % and exposed communication against the first knob; one line per series."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    vary = list(record["vary"].items())
    x_name = vary[0][0]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8), constrained_layout=True)
    panels = (
        ("speedup (x)", lambda p: p["headline"]["speedup"]),
        ("split overlap %", lambda p: p["split"]["overlap_pct"]),
        ("split exposed comm (ms/step)", lambda p: p["split"]["exposed_comm_ms"]),
    )
    for (other, series), colour in zip(_series(record["points"], vary), plt.cm.tab10.colors):
        label = ", ".join(f"{k}={v}" for k, v in other.items()) or None
        xs = [p["knobs"][x_name] for p in series]
        for ax, (_title, value) in zip(axes, panels):
            ax.plot(xs, [value(p) for p in series], color=colour, label=label)
            for p in series:  # hollow: the two modes' step times are within run-to-run noise
                ax.plot(p["knobs"][x_name], value(p), marker="o", color=colour, markerfacecolor="white" if p["within_noise"] else colour)
    axes[0].axhline(1.0, color="0.4", linestyle="--", linewidth=1)
    axes[0].text(0.01, 0.02, "above the line: split wins; hollow: within noise", transform=axes[0].transAxes, fontsize=8, color="0.3")
    for c in record["crossover"]:
        if c["kind"] == "crossover":
            axes[0].axvline(c["at"][x_name], color="tab:green", linestyle=":", linewidth=1.5)
    for ax, (title, _) in zip(axes, panels):
        ax.set_title(title, fontsize=10)
        ax.set_xlabel(x_name)
        ax.grid(alpha=0.3)
        if isinstance(vary[0][1][0], int):
            if max(vary[0][1]) / max(1, min(vary[0][1])) >= 8:
                ax.set_xscale("log", base=2)
            ax.set_xticks(sorted(vary[0][1]), [str(v) for v in sorted(vary[0][1])])
    if len(_series(record["points"], vary)) > 1:
        axes[0].legend(fontsize=8)
    return fig


def explain_crossover(record: dict) -> list[str]:
    """One sentence per series, from the component times of the points around the crossover."""
    vary = list(record["vary"].items())
    x_name = vary[0][0]
    by_name = {p["name"]: p for p in record["points"]}
    lines = []
    for c, (other, series) in zip(record["crossover"], _series(record["points"], vary)):
        where = (" (" + ", ".join(f"{k}={v}" for k, v in other.items()) + ")") if other else ""
        if c["kind"] == "crossover":
            p = by_name[c["point"]]
            lines.append(
                f"The split starts to win at {x_name}={c['at'][x_name]}{where}: {p['headline']['speedup']:.2f}x; there the "
                f"sequential step spent {p['sequential']['comm_ms']:.1f} ms communicating and "
                f"{p['sequential']['compute_ms']:.1f} ms computing, "
                f"and the split hid {p['split']['overlap_pct']:.0f}% of its {p['split']['comm_ms']:.1f} ms of communication."
            )
        elif c["kind"] == "always":
            lines.append(f"The split wins at every {x_name} swept{where} (from {series[0]['headline']['speedup']:.2f}x).")
        else:
            best = max(series, key=lambda p: p["headline"]["speedup"] or 0)
            s = best["sequential"], best["split"]
            lines.append(
                (
                    "The split never wins in this range"
                    if (best["headline"]["speedup"] or 0) <= 1
                    else "The split never wins by more than run-to-run noise in this range"
                )
                + f"{where}: at best {best['headline']['speedup']:.2f}x at {x_name}={best['knobs'][x_name]}, "
                f"where split communicated {s[1]['comm_ms']:.1f} ms per step against sequential's {s[0]['comm_ms']:.1f} ms and hid "
                f"{s[1]['overlap_pct']:.0f}% of it."
                + (
                    " On gloo, reduce_scatter runs as a full all_reduce, so the split pays for the all_reduce and the all_gather."
                    if s[1]["comm_ms"] > s[0]["comm_ms"]
                    else ""
                )
            )
    return lines


def write_reports(sweep_dir: Path, record: dict) -> None:
    from profile_overlap.render import document, timeline
    from profile_overlap.render import html as report_html
    from profile_overlap.render import markdown as report_md
    from profile_overlap.render.document import Figure, Paragraph, Ref, Section, Table

    fig = figure(record)
    vary = list(record["vary"].items())
    rows = []
    for p in record["points"]:
        h = p["headline"]
        rows.append(
            (
                *(str(p["knobs"][k]) for k, _ in vary),
                document.ms(p["sequential"]["step_ms"]),
                document.ms(p["split"]["step_ms"]),
                document.times(h["speedup"]),
                document.times(h["predicted_speedup"]),
                document.pct(p["split"]["overlap_pct"]),
                document.ms(p["split"]["exposed_comm_ms"]),
                "yes" if p["within_noise"] else "no",
                "OK" if p["passed"] else "FAILED",
                p["name"],
            )
        )
    header = (
        *((k,) for k, _ in vary),
        ("sequential ", Ref("step ms", "step_time_ms")),
        ("split ", Ref("step ms", "step_time_ms")),
        (Ref("speedup", "speedup"),),
        (Ref("predicted", "predicted_speedup"),),
        ("split ", Ref("overlap %", "mode_overlap_pct")),
        ("split ", Ref("exposed comm ms", "exposed_comm_ms")),
        (Ref("within noise", "within_noise"),),
        ("verification",),
        ("run folder",),
    )
    numeric = (*(True for _ in vary), True, True, True, True, True, True, False, False, False)
    doc = document.Report(
        title="profile_overlap sweep: when does the split pay?",
        subtitle=f"{len(record['points'])} points, varying " + ", ".join(k for k, _ in vary),
        banner=None,
        sections=(
            Section("verdict", "Verdict", tuple(Paragraph((line,), tone="verdict") for line in explain_crossover(record))),
            Section(
                "plots",
                "Speedup, overlap and exposed communication",
                (Figure(("Each point is a full compare run; its report is in its run folder.",)),),
            ),
            Section("points", "Points", (Table(header=header, rows=tuple(tuple((c,) for c in r) for r in rows), numeric=numeric),)),
        ),
    )
    write_text_atomic(sweep_dir / SWEEP_HTML, report_html.render(doc, figure_svg=timeline.to_svg(fig)))
    timeline.save_png(fig, sweep_dir / SWEEP_PNG)
    write_text_atomic(sweep_dir / SWEEP_MD, report_md.render(doc, figure_png=SWEEP_PNG))


def print_summary(record: dict, sweep_dir: Path) -> None:
    from rich.table import Table as RichTable

    from profile_overlap.render.console import make_console

    console = make_console()
    vary = list(record["vary"].items())
    table = RichTable(title="profile_overlap sweep")
    for k, _ in vary:
        table.add_column(k, justify="right")
    for header in (
        "seq step ms",
        "split step ms",
        "speedup",
        "predicted",
        "split overlap %",
        "split exposed ms",
        "within noise",
        "verified",
    ):
        table.add_column(header, justify="right")
    for p in record["points"]:
        h = p["headline"]
        table.add_row(
            *(str(p["knobs"][k]) for k, _ in vary),
            f"{p['sequential']['step_ms']:.2f}",
            f"{p['split']['step_ms']:.2f}",
            f"{h['speedup']:.2f}x",
            f"{h['predicted_speedup']:.2f}x" if h["predicted_speedup"] else "-",
            f"{p['split']['overlap_pct']:.1f}",
            f"{p['split']['exposed_comm_ms']:.2f}",
            "yes" if p["within_noise"] else "no",
            "OK" if p["passed"] else "FAILED",
        )
    console.print(table)
    for line in explain_crossover(record):
        console.print(line)
    console.print(f"sweep folder: {sweep_dir} (sweep.html, sweep.md; one run folder per point)")
