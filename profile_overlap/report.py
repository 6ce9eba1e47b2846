"""What a run's report says, built from the finished run folder: the metrics record, status.json
and timeline.json. The content is a small tree (sections of paragraphs, tables, a figure, code)
whose text is plain strings and links to metric definitions; `report_html` and `report_md` render
it, escaping every string, so nothing that came from a trace (kernel, op or host names, paths)
can become markup.

    python -m profile_overlap report runs/<run>                 # report.html, report.md, timeline.png
    python -m profile_overlap report --compare runs/<a> runs/<b>

Nothing here recomputes a metric: the per-mode overlap numbers are the console summary's
(`console.mode_summaries`: per profiled step, mean over ranks; `comm_ms` and friends in the
definitions); the collective and straggler tables show the record's per-rank numbers with their
mean and range across ranks.
"""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from profile_overlap import console
from profile_overlap.core.errors import UserError
from profile_overlap.core.files import METRICS_JSON, REPORT_HTML, REPORT_JSON, REPORT_MD, STATUS_JSON, TIMELINE_JSON, TIMELINE_PNG
from profile_overlap.core.io import write_json_atomic, write_text_atomic
from profile_overlap.metrics import CheckResult, ModeMetrics, RunMetrics, StepTimes, ensure_writable_dir, load_metrics

DEFINITIONS_PATH = Path(__file__).resolve().parent / "static" / "metric_defs.md"
"""The README's "Metrics" section, shipped with the package so that reports can link to it."""
MODE_ORDER = ("sequential", "split")
FORMATS = ("html", "md", "json")
MIB = 2**20


# ---------------------------------------------------------------- the content tree


@dataclass(frozen=True)
class Ref:
    """Text that links to a metric's definition (`key`: the name in the definitions' tables)."""

    text: str
    key: str


Inline = tuple  # of str | Ref


@dataclass(frozen=True)
class Paragraph:
    text: Inline
    tone: str = "plain"
    """plain, verdict, verdict_failed, failed (a banner), warning or ok: how renderers show it."""


@dataclass(frozen=True)
class Table:
    header: tuple[Inline, ...]
    rows: tuple[tuple[Inline, ...], ...]
    numeric: tuple[bool, ...]
    """Per column: right-aligned numbers."""
    caption: Inline = ()
    highlight: frozenset[int] = frozenset()
    """Row indices to emphasise (the slowest rank, a failed check)."""


@dataclass(frozen=True)
class Code:
    text: str


@dataclass(frozen=True)
class Items:
    items: tuple[Inline, ...]


@dataclass(frozen=True)
class Figure:
    """The overlap timeline; the renderer draws it from the run folder's timeline.json."""

    caption: Inline


@dataclass(frozen=True)
class Section:
    id: str
    title: str
    blocks: tuple


@dataclass(frozen=True)
class Report:
    title: str
    subtitle: str
    banner: Paragraph | None
    """FAILED / not finished, shown above everything else."""
    sections: tuple[Section, ...]

    def refs(self) -> set[str]:
        """Every definition key the report links to (the tests check each one resolves)."""
        keys: set[str] = set()

        def walk(x) -> None:
            if isinstance(x, Ref):
                keys.add(x.key)
            elif isinstance(x, (tuple, list)):
                for y in x:
                    walk(y)
            elif isinstance(x, (Paragraph, Table, Items, Figure, Section)):
                for f in x.__dataclass_fields__:
                    walk(getattr(x, f))

        walk(self.sections)
        walk(self.banner)
        return keys


# ---------------------------------------------------------------- reading a run folder


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
    try:
        metrics = load_metrics(metrics_path)
    except (ValueError, KeyError, TypeError) as err:
        raise UserError(
            f"{metrics_path} is not a metrics record this version can read ({type(err).__name__}: {err}): "
            "rerun, or report with the version that made it"
        ) from None
    timeline_path = run_dir / TIMELINE_JSON
    timeline = _read_json(timeline_path) if timeline_path.is_file() else None
    return Run(dir=run_dir, metrics=metrics, timeline=timeline, status=status)


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except ValueError as err:
        raise UserError(f"{path} is not valid JSON ({err}): the run folder is damaged; rerun") from None


# ---------------------------------------------------------------- per-mode numbers


@dataclass(frozen=True)
class Spread:
    mean: float
    min: float
    max: float


@dataclass(frozen=True)
class CollectiveRow:
    kind: str
    size_per_call: float | None
    calls: tuple[int, int]
    """min and max over ranks (equal in a healthy run)."""
    time_per_call_us: Spread
    algbw_gbps: Spread | None
    busbw_gbps: Spread | None


@dataclass(frozen=True)
class ModeSummary:
    """One mode's numbers as the report and console show them (definitions: "Per mode")."""

    mode: str
    step_time: StepTimes
    num_ranks: int
    comm_ms: float | None
    compute_ms: float | None
    overlap_ms: float | None
    exposed_comm_ms: float | None
    overlap_pct: float | None
    collectives: tuple[CollectiveRow, ...]
    optimizer_state_bytes: int
    param_bytes: int
    grad_bytes: int
    peak_allocated_bytes: int | None


def _spread(values: list[float]) -> Spread:
    return Spread(mean=statistics.fmean(values), min=min(values), max=max(values))


def summarize(mode: ModeMetrics, *, overlap: console.ModeSummary) -> ModeSummary:
    """The report's view of one mode: the console summary's overlap numbers (one computation for
    both), plus the collective and memory columns from the record."""
    rows: list[CollectiveRow] = []
    ranks = mode.analysis["ranks"] if mode.analysis else []
    for kind in sorted({c["kind"] for r in ranks for c in r["collectives"]}):
        per_rank = [c for r in ranks for c in r["collectives"] if c["kind"] == kind]
        sized = [c for c in per_rank if c["nbytes"]]
        alg = [c["algbw_gbps"] for c in per_rank if c["algbw_gbps"] is not None]
        bus = [c["busbw_gbps"] for c in per_rank if c["busbw_gbps"] is not None]
        rows.append(
            CollectiveRow(
                kind=kind,
                size_per_call=statistics.fmean(c["nbytes"] / c["count"] for c in sized) if sized else None,
                calls=(min(c["count"] for c in per_rank), max(c["count"] for c in per_rank)),
                time_per_call_us=_spread([c["dur_us"] / c["count"] for c in per_rank]),
                algbw_gbps=_spread(alg) if alg else None,
                busbw_gbps=_spread(bus) if bus else None,
            )
        )
    peaks = [m.peak_allocated_bytes for m in mode.memory if m.peak_allocated_bytes is not None]
    return ModeSummary(
        mode=mode.mode,
        step_time=mode.step_time,
        num_ranks=len(mode.memory),
        comm_ms=overlap.comm_ms,
        compute_ms=overlap.compute_ms,
        overlap_ms=overlap.overlap_ms,
        exposed_comm_ms=overlap.exposed_comm_ms,
        overlap_pct=overlap.overlap_pct,
        collectives=tuple(rows),
        optimizer_state_bytes=max(m.optimizer_state_bytes for m in mode.memory),
        param_bytes=max(m.param_bytes for m in mode.memory),
        grad_bytes=max(m.grad_bytes for m in mode.memory),
        peak_allocated_bytes=max(peaks) if peaks else None,
    )


def summaries(metrics: RunMetrics) -> dict[str, ModeSummary]:
    names = [m for m in MODE_ORDER if m in metrics.modes] + sorted(m for m in metrics.modes if m not in MODE_ORDER)
    base = {x.mode: x for x in console.mode_summaries(metrics)}
    return {name: summarize(metrics.modes[name], overlap=base[name]) for name in names}


def headline_mode(metrics: RunMetrics) -> str:
    """The mode whose overlap the headline reports: split, else the only mode."""
    return "split" if "split" in metrics.modes else next(iter(metrics.modes))


def within_noise(a: StepTimes, b: StepTimes) -> bool:
    """Each median lies inside the other's p10-p90 range (definitions: `within_noise`)."""
    return a.p10_ms <= b.median_ms <= a.p90_ms and b.p10_ms <= a.median_ms <= b.p90_ms


# ---------------------------------------------------------------- headline metrics (gate, compare)

HEADLINE_NAMES = (
    "speedup",
    "predicted_speedup",
    "sequential_step_ms",
    "split_step_ms",
    "overlap_pct",
    "exposed_comm_ms",
    "comm_ms",
    "compute_ms",
    "optimizer_state_mib",
    "max_error",
    "failed_checks",
)


def headline(metrics: RunMetrics) -> dict[str, float | None]:
    """The numbers `--fail-if` and `--compare` work on (definitions: "Headline names"). None
    where the run does not have the number (e.g. speedup in a one-mode run)."""
    s = summaries(metrics)
    main = s[headline_mode(metrics)]
    checks = metrics.all_checks()
    return {
        "speedup": metrics.speedup.measured if metrics.speedup else None,
        "predicted_speedup": metrics.speedup.predicted if metrics.speedup else None,
        "sequential_step_ms": s["sequential"].step_time.median_ms if "sequential" in s else None,
        "split_step_ms": s["split"].step_time.median_ms if "split" in s else None,
        "overlap_pct": main.overlap_pct,
        "exposed_comm_ms": main.exposed_comm_ms,
        "comm_ms": main.comm_ms,
        "compute_ms": main.compute_ms,
        "optimizer_state_mib": main.optimizer_state_bytes / MIB,
        # None when some compared value was not finite (then failed_checks counts that check).
        "max_error": None if any(c.max_abs_err is None for c in checks) else max((c.max_abs_err for c in checks), default=None),
        "failed_checks": float(sum(not c.passed for c in checks)),
    }


# ---------------------------------------------------------------- number formatting


def ms(x: float | None) -> str:
    if x is None:
        return "–"
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.1f}" if abs(x) >= 10 else f"{x:.2f}"


def mib(nbytes: float | None) -> str:
    if nbytes is None:
        return "–"
    x = nbytes / MIB
    return f"{x:,.0f}" if x == int(x) else f"{x:,.2f}"


def pct(x: float | None) -> str:
    return "–" if x is None else f"{x:.1f}"


def gbps(x: float | None) -> str:
    return "–" if x is None else f"{x:.3g}"


def times(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f}×"


def us(x: float | None) -> str:
    return "–" if x is None else f"{x:,.0f}"


# ---------------------------------------------------------------- the single-run report


def build(run: Run) -> Report:
    m = run.metrics
    s = summaries(m)
    from profile_overlap import notes

    sections = (
        Section("verdict", "Verdict", (Paragraph(verdict(m, s), tone="verdict_failed" if run.failed else "verdict"),)),
        Section("setup", "Setup", setup_blocks(run)),
        Section("verification", "Verification", verification_blocks(m)),
        Section("comparison", "Sequential vs split" if len(s) == 2 else f"{next(iter(s))} mode", (side_by_side(m, s),)),
        Section("timeline", "Overlap timeline", timeline_blocks(run)),
        Section("collectives", "Collectives", (collectives_table(s),)),
        Section("stragglers", "Stragglers: wait vs transfer", straggler_blocks(m)),
        Section("notes", "Notes", (Items(notes.notes(m, s)),)),
    )
    cfg, env = m.config, m.env
    subtitle = f"{cfg['mode']} run {run.name}: {env['world_size']} ranks, {env['backend']} on {env['device_type']}, {env['date']}"
    return Report(title="profile_overlap report", subtitle=subtitle, banner=banner(run), sections=sections)


def banner(run: Run) -> Paragraph | None:
    state = (run.status or {}).get("state")
    failed = [c for c in run.metrics.all_checks() if not c.passed]
    if failed or state in ("failed", "interrupted"):
        reason = (run.status or {}).get("reason") or "; ".join(c.describe() for c in failed)
        word = "INTERRUPTED" if state == "interrupted" else "FAILED"
        return Paragraph((f"{word}: this run did not pass. {reason}. Its timings are shown for diagnosis only.",), tone="failed")
    if state == "running":
        return Paragraph(
            ("NOT FINISHED: status.json still says running (the run is in progress or was killed); the numbers below may be incomplete.",),
            tone="warning",
        )
    return None


def verdict(m: RunMetrics, s: dict[str, ModeSummary]) -> Inline:
    """The headline, one sentence, every number linked to its definition."""
    failed = [c for c in m.all_checks() if not c.passed]
    if failed:
        worst = failed[0]
        if worst.max_abs_err is None:
            return (
                f"The run FAILED verification: {worst.name} produced values that are ",
                Ref("not finite", "max_abs_err"),
                f" (NaN or infinity, first at rank {worst.worst_rank}), so the timings cannot be compared.",
            )
        return (
            f"The run FAILED verification: {worst.name} differs by ",
            Ref(f"{worst.max_abs_err:.3g}", "max_abs_err"),
            " against a tolerance of ",
            Ref(f"{worst.tolerance:.3g}", "tolerance"),
            ", so the two modes did not compute the same thing and their timings cannot be compared.",
        )
    if len(s) == 1 or not m.speedup:
        ((name, one),) = list(s.items())[:1]
        text: list = [f"{name} only: median step ", Ref(f"{ms(one.step_time.median_ms)} ms", "step_time_ms")]
        if one.comm_ms:
            text += [
                ", with ",
                Ref(f"{ms(one.overlap_ms)} ms", "overlap_ms"),
                " of its ",
                Ref(f"{ms(one.comm_ms)} ms", "comm_ms"),
                " of communication per step hidden behind compute (",
                Ref(f"{pct(one.overlap_pct)}%", "mode_overlap_pct"),
                ")",
            ]
        return (*text, "; run with --mode compare to measure the split's speedup.")
    seq, split = s["sequential"], s["split"]
    n = m.env["world_size"]
    memory = (
        Ref(f"{mib(split.optimizer_state_bytes)} MiB", "optimizer_state_bytes"),
        " instead of ",
        Ref(f"{mib(seq.optimizer_state_bytes)} MiB", "optimizer_state_bytes"),
    )
    steps = (Ref(f"{ms(split.step_time.median_ms)} ms", "step_time_ms"), " vs ", Ref(f"{ms(seq.step_time.median_ms)} ms", "step_time_ms"))
    hid = (
        "split hid ",
        "" if split.overlap_pct and split.overlap_pct >= 50 else "only ",
        Ref(f"{ms(split.overlap_ms)} ms", "overlap_ms"),
        " of its ",
        Ref(f"{ms(split.comm_ms)} ms", "comm_ms"),
        " of communication per step behind compute",
    )
    speed = m.speedup.measured
    if within_noise(seq.step_time, split.step_time):
        return (
            "split and sequential took the same time, ",
            Ref("within run-to-run noise", "within_noise"),
            " (median step ",
            *steps,
            ", each inside the other's p10–p90 range): ",
            *hid,
            *_slower_reason(m, seq, split),
            "; each rank did hold 1/",
            str(n),
            " of the optimizer state (",
            *memory,
            ").",
        )
    if speed >= 1:
        return (
            "split was ",
            Ref(times(speed), "speedup"),
            " faster than sequential (median step ",
            *steps,
            "): ",
            *hid,
            ", and each rank held 1/",
            str(n),
            " of the optimizer state (",
            *memory,
            ").",
        )
    return (
        "split was ",
        Ref(times(1 / speed), "speedup"),
        " slower than sequential (median step ",
        *steps,
        "): ",
        *hid,
        *_slower_reason(m, seq, split),
        "; each rank did hold 1/",
        str(n),
        " of the optimizer state (",
        *memory,
        ").",
    )


def _slower_reason(m: RunMetrics, seq: ModeSummary, split: ModeSummary) -> Inline:
    """Why the split did not win, from the numbers: it communicated longer than sequential."""
    if split.comm_ms is None or seq.comm_ms is None or split.comm_ms <= seq.comm_ms:
        return ()
    why = "; gloo runs reduce_scatter as a full all_reduce" if m.env.get("backend") == "gloo" else ""
    return (
        ", and communicated longer than sequential (",
        Ref(f"{ms(split.comm_ms)} ms", "comm_ms"),
        " vs ",
        Ref(f"{ms(seq.comm_ms)} ms", "comm_ms"),
        f" per step{why})",
    )


def setup_blocks(run: Run) -> tuple:
    m = run.metrics
    cfg, env = m.config, m.env
    devices: dict[str, int] = {}
    for r in env.get("ranks", []):
        devices[r["device"]] = devices.get(r["device"], 0) + 1
    device_text = ", ".join(f"{name} ×{count}" for name, count in devices.items())
    state = run.status or {"state": "succeeded" if m.passed else "failed", "time": None, "reason": None}
    rows = [
        ("date (UTC)", env["date"]),
        (
            "status",
            state["state"]
            + (f" at {state['time']}" if state.get("time") else "")
            + (f": {state['reason']}" if state.get("reason") else ""),
        ),
        ("run folder", m.run_dir),
        ("hosts", f"{', '.join(env['hosts'])} ({env['num_nodes']} node{'s' if env['num_nodes'] != 1 else ''})"),
        ("world size", f"{env['world_size']} ranks"),
        ("backend", env["backend"]),
        ("devices", f"{env['device_type']}: {device_text}"),
        ("python / torch", f"{env['python']} / {env['torch']}"),
        ("CUDA / NCCL / gloo", " / ".join(str(env.get(k) or "–") for k in ("cuda", "nccl", "gloo"))),
        ("step timing", next(iter(m.modes.values())).step_time.method),
    ]
    itemsize = {"float32": 4, "bfloat16": 2, "float16": 2}[cfg["dtype"]]
    params = cfg["layers"] * cfg["dim"] ** 2
    workload = (
        f"The workload: K = {cfg['layers']} layers, each a {cfg['dim']}×{cfg['dim']} {cfg['dtype']} weight, so "
        f"P = K·d² = {params:,} parameters ({mib(params * itemsize)} MiB); each layer's gradient is one communication "
        f"bucket, and the forward pass is {cfg['layers']} matmuls of {cfg['batch']}×{cfg['dim']} by {cfg['dim']}×{cfg['dim']}. "
        f"Per mode: {cfg['warmup_steps']} warmup steps (verified), {cfg['steps']} timed steps, "
        f"{cfg['profile_steps']} profiled steps.",
    )
    modes_text = (
        "What was compared. sequential (like DDP): every rank all_reduces each layer's gradient, then runs Adam "
        "on all parameters, then the forward pass; communication and compute take turns. split (like ZeRO-2 / FSDP): "
        "each rank reduce_scatters the gradient, runs Adam on its own 1/N shard only (so it keeps 1/N of the optimizer "
        "state), then all_gathers the updated shards asynchronously while the forward pass of earlier layers runs. "
        "AllReduce(X) == AllGather(ReduceScatter(X)), so both modes must end with the same parameters; the run checks it.",
    )
    pairs = [((k,), (v if isinstance(v, str) else json.dumps(v),)) for k, v in cfg.items()]
    pairs += [(("",), ("",))] * (-len(pairs) % 3)
    config_rows = tuple(pairs[i] + pairs[i + 1] + pairs[i + 2] for i in range(0, len(pairs), 3))
    return (
        Paragraph(modes_text),
        Table(header=(("",), ("",)), rows=tuple(((k,), (v,)) for k, v in rows), numeric=(False, False)),
        Paragraph(workload),
        Table(
            header=(("config",), ("value",)) * 3, rows=config_rows, numeric=(False,) * 6, caption=("Every flag of the run (config.json).",)
        ),
        Paragraph(("To reproduce (the recorded command line; pick a new --name or --out if it names this run's folder):",)),
        Code(reproduce_command(m)),
    )


def reproduce_command(m: RunMetrics) -> str:
    env = m.env
    command = env["command"]
    if env.get("launcher") != "torchrun":
        return command
    # The recorded command is the worker's: `python -m profile_overlap ARGS`; torchrun's own flags
    # are not visible to the workers, so the node layout is restated from the record.
    args = command.split(" -m profile_overlap", 1)[1].strip() if " -m profile_overlap" in command else command
    per_node = env["world_size"] // max(env["num_nodes"], 1)
    if env["num_nodes"] == 1:
        return f"torchrun --standalone --nproc-per-node {per_node} -m profile_overlap {args}".strip()
    return (
        f"torchrun --nnodes {env['num_nodes']} --nproc-per-node {per_node} --rdzv-backend c10d --rdzv-endpoint HOST:PORT "
        f"-m profile_overlap {args}   # on every node; HOST:PORT: the first node's address and a free port"
    )


def verification_blocks(m: RunMetrics) -> tuple:
    checks: list[tuple[str, CheckResult]] = [(mode, c) for mode, mm in m.modes.items() for c in mm.checks]
    checks += [("both", c) for c in m.checks]
    rows, bad = [], set()
    for i, (mode, c) in enumerate(checks):
        where = (
            f"rank {c.worst_rank}"
            + (f", step {c.worst_step}" if c.worst_step is not None else "")
            + (f", layer {c.worst_layer}" if c.worst_layer is not None else "")
        )
        rows.append(
            (
                (mode,),
                (c.name,),
                ("OK" if c.passed else "FAILED",),
                (c.error_text,),
                (f"{c.tolerance:.3g}",),
                (f"{c.num_checked:,}",),
                (where,),
            )
        )
        if not c.passed:
            bad.add(i)
    table = Table(
        header=(
            ("mode",),
            ("check",),
            ("result",),
            (Ref("max error", "max_abs_err"),),
            (Ref("tolerance", "tolerance"),),
            ("comparisons",),
            ("worst at",),
        ),
        rows=tuple(rows),
        numeric=(False, False, False, True, True, True, False),
        highlight=frozenset(bad),
    )
    summary = (
        "All checks passed: both modes computed the same numbers."
        if m.passed
        else f"{len([c for _, c in checks if not c.passed])} of {len(checks)} checks FAILED."
    )
    return (Paragraph((summary,), tone="ok" if m.passed else "failed"), table)


def side_by_side(m: RunMetrics, s: dict[str, ModeSummary]) -> Table:
    names = list(s)
    kinds = sorted({c.kind for x in s.values() for c in x.collectives})

    def row(label: Inline, values: list[str]) -> tuple:
        return (label, *((v,) for v in values))

    def each(fn) -> list[str]:
        return [fn(x) for x in s.values()]

    rows = [
        row((Ref("step time median", "step_time_ms"), " (ms)"), each(lambda x: ms(x.step_time.median_ms))),
        row((Ref("step time p10 – p90", "step_time_ms"), " (ms)"), each(lambda x: f"{ms(x.step_time.p10_ms)} – {ms(x.step_time.p90_ms)}")),
        row((Ref("communication", "comm_ms"), " per step (ms)"), each(lambda x: ms(x.comm_ms))),
        row((Ref("compute", "compute_ms"), " per step (ms)"), each(lambda x: ms(x.compute_ms))),
        row((Ref("overlap", "overlap_ms"), ": comm hidden by compute (ms)"), each(lambda x: ms(x.overlap_ms))),
        row((Ref("exposed comm", "exposed_comm_ms"), " per step (ms)"), each(lambda x: ms(x.exposed_comm_ms))),
        row((Ref("overlap %", "mode_overlap_pct"),), each(lambda x: pct(x.overlap_pct))),
    ]
    for kind in kinds:
        rows.append(
            row(
                (Ref("busbw", "mode_busbw_gbps"), f" {kind} (GB/s)"),
                each(lambda x, kind=kind: next((gbps(c.busbw_gbps.mean) for c in x.collectives if c.kind == kind and c.busbw_gbps), "–")),
            )
        )
    rows += [
        row((Ref("optimizer state", "optimizer_state_bytes"), " per rank (MiB)"), each(lambda x: mib(x.optimizer_state_bytes))),
        row((Ref("parameters", "param_bytes"), " per rank (MiB)"), each(lambda x: mib(x.param_bytes))),
        row((Ref("gradients", "grad_bytes"), " per rank (MiB)"), each(lambda x: mib(x.grad_bytes))),
        row(
            (Ref("peak allocated", "peak_allocated_bytes"), " per rank (MiB)"),
            each(lambda x: mib(x.peak_allocated_bytes) if x.peak_allocated_bytes is not None else "n/a on CPU"),
        ),
    ]
    if m.speedup:
        sp = m.speedup
        rows += [
            row((Ref("speedup", "speedup"), " measured (×)"), ["", times(sp.measured)]),
            row((Ref("predicted speedup", "predicted_speedup"), ": ideal from sequential's comm + compute (×)"), ["", times(sp.predicted)]),
        ]
    return Table(
        header=(("",), *((n,) for n in names)),
        rows=tuple(rows),
        numeric=(False, *(True for _ in names)),
        caption=(
            "Step times: median and p10–p90 of the timed, unprofiled steps. Comm, compute and overlap: per profiled step, mean over ranks.",
        ),
    )


def timeline_blocks(run: Run) -> tuple:
    if not run.timeline or not run.timeline.get("modes"):
        return (Paragraph(("This run was not profiled (--no-profile), so there is no timeline.",)),)
    return (
        Figure(
            (
                "One profiled step per mode, one pair of lanes per rank: communication above, compute below; "
                "shaded stretches are communication hidden behind compute (",
                Ref("overlap", "overlap_us"),
                ").",
            ),
        ),
    )


def collectives_table(s: dict[str, ModeSummary]) -> Table:
    rows = []
    for x in s.values():
        for c in x.collectives:
            lo, hi = c.calls
            rows.append(
                (
                    (x.mode,),
                    (c.kind,),
                    (f"{c.size_per_call:,.0f}" if c.size_per_call else "–",),
                    (str(lo) if lo == hi else f"{lo}–{hi}",),
                    (us(c.time_per_call_us.mean),),
                    (f"{us(c.time_per_call_us.min)} – {us(c.time_per_call_us.max)}",),
                    (gbps(c.algbw_gbps.mean) if c.algbw_gbps else "–",),
                    (gbps(c.busbw_gbps.mean) if c.busbw_gbps else "–",),
                    (f"{gbps(c.busbw_gbps.min)} – {gbps(c.busbw_gbps.max)}" if c.busbw_gbps else "–",),
                )
            )
    return Table(
        header=(
            ("mode",),
            ("collective",),
            (Ref("size", "size_per_call"), " (B)"),
            (Ref("calls", "count"),),
            (Ref("time", "time_per_call_us"), " (µs)"),
            ("time min – max (µs)",),
            (Ref("algbw", "algbw_gbps"), " (GB/s)"),
            (Ref("busbw", "busbw_gbps"), " (GB/s)"),
            ("busbw min – max",),
        ),
        rows=tuple(rows),
        numeric=(False, False, True, True, True, True, True, True, True),
        caption=(
            "As nccl-tests prints them: one call's size, calls per rank over the profiled steps, time per call and "
            "bandwidths as the mean over ranks, with the range across ranks.",
        ),
    )


def slowest_rank(ranks: list[dict]) -> int | None:
    """The rank the others wait for: the least wait_us (definitions: `slowest_rank`). The record
    keeps wait_us per rank but not the analysis's slowest_rank, so it is looked up here."""
    waited = [r for r in ranks if r.get("wait_us") is not None]
    if len(waited) < 2:
        return None
    return min(waited, key=lambda r: r["wait_us"])["rank"]


def straggler_blocks(m: RunMetrics) -> tuple:
    hosts = {r["rank"]: r["host"] for r in m.env.get("ranks", [])}
    blocks: list = []
    for name, mode in m.modes.items():
        ranks = mode.analysis["ranks"] if mode.analysis else []
        slow = slowest_rank(ranks)
        if slow is None:
            blocks.append(Paragraph((f"{name}: no collective was matched on two or more ranks, so there is no wait/transfer split.",)))
            continue
        rows, hi = [], set()
        for i, r in enumerate(ranks):
            total = r["wait_us"] + r["transfer_us"]
            share = 100 * r["wait_us"] / total if total else None
            rows.append(
                (
                    (str(r["rank"]),),
                    (hosts.get(r["rank"], "?"),),
                    (ms(r["wait_us"] / 1e3),),
                    (ms(r["transfer_us"] / 1e3),),
                    (pct(share),),
                    ("slowest: the others wait for it" if r["rank"] == slow else "",),
                )
            )
            if r["rank"] == slow:
                hi.add(i)
        most = max(ranks, key=lambda r: r["wait_us"] or 0)
        blocks.append(
            Paragraph(
                (
                    f"{name}: the slowest rank was rank {slow} on {hosts.get(slow, '?')} (",
                    Ref("slowest rank", "slowest_rank"),
                    "); rank ",
                    str(most["rank"]),
                    " waited longest, ",
                    Ref(f"{ms(most['wait_us'] / 1e3)} ms", "wait_us"),
                    " over the profiled steps.",
                )
            )
        )
        blocks.append(
            Table(
                header=(
                    ("rank",),
                    ("host",),
                    (Ref("wait", "wait_us"), " (ms)"),
                    (Ref("transfer", "transfer_us"), " (ms)"),
                    (Ref("wait share", "wait_share_pct"), " (%)"),
                    ("",),
                ),
                rows=tuple(rows),
                numeric=(True, False, True, True, True, False),
                highlight=frozenset(hi),
                caption=(f"{name}: collective time of each rank over the profiled steps, split into waiting for peers and moving data.",),
            )
        )
    return tuple(blocks)


# ---------------------------------------------------------------- the two-run comparison


def build_compare(a: Run, b: Run) -> Report:
    ha, hb = headline(a.metrics), headline(b.metrics)
    sa, sb = summaries(a.metrics), summaries(b.metrics)
    rows = []
    for name in HEADLINE_NAMES:
        x, y = ha[name], hb[name]
        if x is None and y is None:
            continue
        delta = "–" if x is None or y is None else f"{y - x:+,.3g}"
        ratio = "–" if not x or y is None else f"{y / x:.3f}"
        rows.append(((name,), (_num(x),), (_num(y),), (delta,), (ratio,)))
    headline_table = Table(
        header=(("headline metric",), (f"A: {a.name}",), (f"B: {b.name}",), (Ref("B − A", "delta"),), ("B / A",)),
        rows=tuple(rows),
        numeric=(False, True, True, True, True),
        caption=("Names as in --fail-if (see Headline names in the definitions).",),
    )
    spread_rows, statements = [], []
    for mode in [m for m in MODE_ORDER if m in sa and m in sb]:
        ta, tb = sa[mode].step_time, sb[mode].step_time
        if not ta.times_ms or not tb.times_ms:
            continue
        spread_rows.append(
            (
                (mode,),
                (f"{ms(ta.median_ms)} ({ms(ta.p10_ms)} – {ms(ta.p90_ms)})",),
                (f"{ms(tb.median_ms)} ({ms(tb.p10_ms)} – {ms(tb.p90_ms)})",),
                (f"{tb.median_ms / ta.median_ms:.3f}",),
            )
        )
        if within_noise(ta, tb):
            statements.append(
                (
                    f"{mode}: no measurable difference. B's median step ",
                    Ref(f"{ms(tb.median_ms)} ms", "step_time_ms"),
                    f" lies inside A's p10–p90 ({ms(ta.p10_ms)} – {ms(ta.p90_ms)} ms) and A's median ",
                    Ref(f"{ms(ta.median_ms)} ms", "step_time_ms"),
                    f" inside B's ({ms(tb.p10_ms)} – {ms(tb.p90_ms)} ms): the difference is ",
                    Ref("within run-to-run noise", "within_noise"),
                    ".",
                )
            )
        else:
            word = "faster" if tb.median_ms < ta.median_ms else "slower"
            statements.append(
                (
                    f"{mode}: B is {word}: median step ",
                    Ref(f"{ms(tb.median_ms)} ms", "step_time_ms"),
                    " vs ",
                    Ref(f"{ms(ta.median_ms)} ms", "step_time_ms"),
                    f" ({tb.median_ms / ta.median_ms:.3f}× A), outside each other's p10–p90 range, so more than ",
                    Ref("run-to-run noise", "within_noise"),
                    ".",
                )
            )
    spread = Table(
        header=(("mode",), ("A median (p10 – p90) ms",), ("B median (p10 – p90) ms",), ("B / A",)),
        rows=tuple(spread_rows),
        numeric=(False, True, True, True),
        caption=(Ref("Step time", "step_time_ms"), ": the median of each run's timed steps, with their p10–p90 spread."),
    )
    diff_rows = []
    for label, da, db in (("config", a.metrics.config, b.metrics.config), ("env", _env_view(a.metrics.env), _env_view(b.metrics.env))):
        for key in sorted(set(da) | set(db)):
            if da.get(key) != db.get(key):
                diff_rows.append(((f"{label}.{key}",), (_show(da.get(key)),), (_show(db.get(key)),)))
    failed = [r for r in (a, b) if r.failed]
    banner_ = (
        Paragraph(
            (f"FAILED: {', '.join(r.name for r in failed)} did not pass verification or did not finish; compare its timings with care.",),
            tone="failed",
        )
        if failed
        else None
    )
    sections = (
        Section(
            "verdict",
            "Verdict",
            tuple(Paragraph(t, tone="verdict") for t in statements)
            or (Paragraph(("The runs share no mode with timed steps, so their step times cannot be compared.",)),),
        ),
        Section("spread", "Step time and its spread", (spread,)),
        Section("headline", "Headline metrics", (headline_table,)),
        Section(
            "differences",
            "What differs between the runs",
            (Table(header=(("setting",), ("A",), ("B",)), rows=tuple(diff_rows), numeric=(False, False, False)),)
            if diff_rows
            else (Paragraph(("Same config and environment (apart from dates, process ids and folder names).",)),),
        ),
        Section(
            "runs", "The runs", (Code(f"A: {a.dir}\n   {reproduce_command(a.metrics)}\nB: {b.dir}\n   {reproduce_command(b.metrics)}"),)
        ),
    )
    return Report(
        title="profile_overlap comparison", subtitle=f"A (before): {a.name}  ·  B (after): {b.name}", banner=banner_, sections=sections
    )


def compare_record(a: Run, b: Run) -> dict:
    ha, hb = headline(a.metrics), headline(b.metrics)
    return {
        "a": {"run_dir": str(a.dir), "headline": ha},
        "b": {"run_dir": str(b.dir), "headline": hb},
        "delta": {k: (hb[k] - ha[k] if ha[k] is not None and hb[k] is not None else None) for k in HEADLINE_NAMES},
    }


def _env_view(env: dict) -> dict:
    """The environment keys that can explain a difference (not dates, pids or the command's folder)."""
    keep = ("python", "torch", "cuda", "nccl", "gloo", "backend", "device_type", "world_size", "num_nodes", "hosts")
    view = {k: env.get(k) for k in keep}
    view["devices"] = sorted({r["device"] for r in env.get("ranks", [])})
    return view


def _show(v) -> str:
    return "–" if v is None else v if isinstance(v, str) else json.dumps(v)


def _num(x: float | None) -> str:
    return "–" if x is None else f"{x:,.4g}"


# ---------------------------------------------------------------- writing


def write(
    run_dir: Path,
    metrics: RunMetrics | None = None,
    *,
    out: Path | None = None,
    formats: tuple[str, ...] = FORMATS,
    check_status: bool = True,
) -> list[Path]:
    """Write report.html / report.md (+ timeline.png) / report.json for one run. At the end of a
    run, `outputs.render_all` passes the metrics it holds and check_status=False (status.json
    still says running then)."""
    run_dir = Path(run_dir)
    run = load_run(run_dir)
    if not check_status:
        run = Run(dir=run.dir, metrics=metrics or run.metrics, timeline=run.timeline, status=None)
    out = Path(out) if out else run_dir
    ensure_writable_dir(out)
    report = build(run)
    written = []
    fig = _figure(run) if ("html" in formats or "md" in formats) else None
    if "html" in formats:
        from profile_overlap import report_html, timeline

        svg = timeline.to_svg(fig) if fig is not None else None
        written.append(write_text_atomic(out / REPORT_HTML, report_html.render(report, figure_svg=svg)))
    if "md" in formats:
        from profile_overlap import report_md, timeline

        png = None
        if fig is not None:
            timeline.save_png(fig, out / TIMELINE_PNG)
            written.append(out / TIMELINE_PNG)
            png = TIMELINE_PNG
        written.append(write_text_atomic(out / REPORT_MD, report_md.render(report, figure_png=png)))
    if "json" in formats:
        write_json_atomic(out / REPORT_JSON, run.metrics.to_json())
        written.append(out / REPORT_JSON)
    return written


def write_compare(a_dir: Path, b_dir: Path, *, out: Path | None = None, formats: tuple[str, ...] = FORMATS) -> list[Path]:
    a, b = load_run(a_dir), load_run(b_dir)
    out = Path(out) if out else Path.cwd()
    ensure_writable_dir(out)
    stem = f"compare-{_safe(a.name)}-vs-{_safe(b.name)}"
    report = build_compare(a, b)
    written = []
    if "html" in formats:
        from profile_overlap import report_html

        written.append(write_text_atomic(out / f"{stem}.html", report_html.render(report, figure_svg=None)))
    if "md" in formats:
        from profile_overlap import report_md

        written.append(write_text_atomic(out / f"{stem}.md", report_md.render(report, figure_png=None)))
    if "json" in formats:
        write_json_atomic(out / f"{stem}.json", compare_record(a, b))
        written.append(out / f"{stem}.json")
    return written


def _figure(run: Run):
    if not run.timeline or not run.timeline.get("modes"):
        return None
    from profile_overlap import timeline

    return timeline.figure(run.metrics, run.timeline)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)


# ---------------------------------------------------------------- the definitions appendix


@dataclass(frozen=True)
class Definitions:
    markdown: str
    sections: dict[str, str] = field(default_factory=dict)
    """definition key -> title of the ### section that defines it (for Markdown links)."""


def definitions() -> Definitions:
    text = DEFINITIONS_PATH.read_text(encoding="utf-8")
    sections: dict[str, str] = {}
    title = ""
    for line in text.splitlines():
        if line.startswith("### "):
            title = line[4:].strip()
        if line.startswith("|") and title:
            # A definition row: every `name` in its first cell (e.g. `algbw` (`algbw_gbps`)) is a key.
            for key in re.findall(r"`([^`]+)`", line.split("|")[1]):
                sections.setdefault(key, title)
    return Definitions(markdown=text, sections=sections)
