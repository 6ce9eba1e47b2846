"""TensorBoard renderer: event files in each mode folder, from the metrics record only.

Each mode folder `runs/<run>/<mode>/` is one TensorBoard run: it already holds the rank traces
(torch-tb-profiler's PyTorch Profiler tab lists it), and this module adds our own event file.
Scalar tags are the same in every mode, so TensorBoard overlays every mode of the run.

    python -c "from profile_overlap.render import tensorboard; tensorboard.write_run('runs/<run>')"

Written with tensorboard's own protos and event writer (no TensorFlow, no torch), so it runs
from a finished folder as cheaply as at the end of a run.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.plugins.custom_scalar import layout_pb2
from tensorboard.plugins.custom_scalar import metadata as custom_scalar_metadata
from tensorboard.plugins.hparams import summary_v2 as hp
from tensorboard.plugins.text import summary_v2 as text_summary
from tensorboard.summary.writer.event_file_writer import EventFileWriter
from tensorboard.util import tensor_util

from profile_overlap.core.errors import UserError
from profile_overlap.core.files import METRICS_JSON, TIMELINE_JSON
from profile_overlap.record.advice import load_advice
from profile_overlap.record.analysis import PhaseRecord, RankRecord, StepRecord, as_json
from profile_overlap.record.load import load_metrics
from profile_overlap.record.metrics import ModeMetrics, RunMetrics
from profile_overlap.record.summary import summary_of
from profile_overlap.record.timeline import Timeline, load_timeline
from profile_overlap.render import console, dimensions
from profile_overlap.render import markdown as report_md
from profile_overlap.render.advice import tensorboard_text

EVENT_SUFFIX = ".profile_overlap"
"""Our event files end with this, so a rewrite replaces ours and nothing else."""

PER_STEP: dict[str, Callable[[StepRecord], float | None]] = {
    "step_ms": lambda s: s.step_us,
    "comm_ms": lambda s: s.comm_us,
    "compute_ms": lambda s: s.compute_us,
    "exposed_comm_ms": lambda s: s.exposed_comm_us,
    "overlap_pct": lambda s: s.overlap_pct,
}
"""Per-step scalars `rank<R>/<name>` -> the step's number in the analysis record (µs; shown in ms)."""

PHASE_NUMBERS: dict[str, Callable[[PhaseRecord], float | None]] = {
    "window_ms": lambda p: p.window_us,
    "comm_ms": lambda p: p.comm_us,
    "compute_ms": lambda p: p.compute_us,
    "hidden_ms": lambda p: p.overlap_us,
    "exposed_comm_ms": lambda p: p.exposed_comm_us,
}
"""Per-phase scalars `phase/<phase>/<name>` -> the number of the step's phase entry in the analysis record."""

# The HParams dashboard's metrics: tag -> display name. Defined in docs/metrics.md.
HEADLINE = {
    "headline/median_step_ms": "median step ms",
    "headline/overlap_pct": "overlap %",
    "headline/exposed_comm_ms": "exposed comm ms",
    "headline/speedup": "speedup (x)",
    "headline/speedup_vs_first": "speedup vs first mode (x)",
    "headline/overlap_yield_ms": "overlap yield ms",
    "headline/overlap_yield_pct": "overlap yield %",
}

# The custom-scalars layout: one chart per number, with every mode (run) on it.
COMPARE_CHARTS = (
    ("step time, profiled steps, rank mean (ms)", r"^mean/step_ms$"),
    ("exposed comm, profiled steps, rank mean (ms)", r"^mean/exposed_comm_ms$"),
    ("overlap, profiled steps, rank mean (%)", r"^mean/overlap_pct$"),
    ("step time, timed unprofiled steps (ms)", r"^step_time/timed_ms$"),
    ("comm hidden behind each phase's compute, rank mean (ms)", r"^phase/[^/]+/hidden_ms$"),
    ("comm exposed in each phase, rank mean (ms)", r"^phase/[^/]+/exposed_comm_ms$"),
)


def write_run(run_dir: Path | str, metrics: RunMetrics | None = None, spans: Timeline | None = None) -> list[Path]:
    """Write one event file into every mode folder of a finished run; returns their paths.
    Writing again replaces the event files this module wrote before. Without `metrics`, the run's
    metrics.json and timeline.json are read; with it, `spans` is its timeline (None: none)."""
    run_dir = Path(run_dir)
    if metrics is None:
        path = run_dir / METRICS_JSON
        if not path.exists():
            raise UserError(f"{path} not found; pass a finished run folder (runs/<run>)")
        metrics = load_metrics(path)
        spans_path = run_dir / TIMELINE_JSON
        spans = load_timeline(spans_path) if spans_path.exists() else None
    wall_s = time.time()
    written = []
    for i, mode in enumerate(metrics.modes):
        png = _timeline_png(metrics, spans, mode)
        folder = run_dir / mode
        folder.mkdir(exist_ok=True)
        for old in folder.glob(f"events.out.tfevents.*{EVENT_SUFFIX}"):
            old.unlink()
        writer = EventFileWriter(str(folder), filename_suffix=EVENT_SUFFIX)
        try:
            # The run's summary, verification and configuration go to its first mode only, so the
            # Text dashboard shows them once.
            for summary, step in _mode_summaries(metrics, mode, png=png, run_text=i == 0, run_dir=run_dir):
                writer.add_event(event_pb2.Event(wall_time=wall_s, step=step, summary=summary))
        finally:
            writer.close()
        written += list(folder.glob(f"events.out.tfevents.*{EVENT_SUFFIX}"))
    return written


def _timeline_png(metrics: RunMetrics, spans: Timeline | None, mode: str) -> bytes | None:
    """This mode's timeline, on the time axis of all modes: the Images dashboard shows the modes side by side."""
    if not spans or mode not in spans.modes:
        return None
    from profile_overlap.render import timeline  # matplotlib: only when there is something to draw

    return timeline.png_bytes(timeline.figure(metrics, spans, modes=(mode,)))


def _scalar(tag: str, value: float) -> summary_pb2.Summary:
    return summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=float(value))])


def _mode_summaries(metrics: RunMetrics, mode: str, *, png: bytes | None, run_text: bool, run_dir: Path | None = None):
    """(summary, step) pairs for one mode folder."""
    m = metrics.modes[mode]
    ranks = m.analysis.ranks if m.analysis else ()
    steps = sorted({s.step for r in ranks for s in r.steps})
    yield from _step_summaries(ranks, steps)
    yield from _profile_summaries(m, ranks, steps)
    for tag, value, step in dimensions.tensorboard_scalars(m.analysis, steps[-1] if steps else None):
        yield _scalar(tag, value), step
    yield from _run_summaries(metrics, mode, png=png, run_text=run_text, run_dir=run_dir)


def _step_summaries(ranks: tuple[RankRecord, ...], steps: list[int]):
    """Per profiled step: per rank, and the rank mean and max (ranks missing a step are skipped); per phase: the rank mean."""
    for step in steps:
        for name, number in PER_STEP.items():
            values = []
            for r in ranks:
                row = next((s for s in r.steps if s.step == step), None)
                value = None if row is None else number(row)
                if value is None:
                    continue
                value = value / 1e3 if name.endswith("_ms") else value
                values.append(value)
                yield _scalar(f"rank{r.rank}/{name}", value), step
            if values:
                yield _scalar(f"mean/{name}", sum(values) / len(values)), step
                yield _scalar(f"max/{name}", max(values)), step

    # Per phase and profiled step: the rank mean (a rank with the step but not the phase counts 0).
    for step in steps:
        rows = [s for r in ranks for s in r.steps if s.step == step]
        names = list(dict.fromkeys(p.phase for s in rows for p in s.phases))
        for phase in names:
            entries = [next((p for p in s.phases if p.phase == phase), None) for s in rows]
            for name, phase_number in PHASE_NUMBERS.items():
                total = sum((phase_number(e) or 0.0) for e in entries if e is not None)
                yield _scalar(f"phase/{phase}/{name}", total / len(rows) / 1e3), step


def _profile_summaries(m: ModeMetrics, ranks: tuple[RankRecord, ...], steps: list[int]):
    """Numbers over all profiled steps (bus bandwidth, why exposed: at the last profiled step), memory, step times."""
    # Bus bandwidth is recorded over all profiled steps together: one point, at the last profiled step.
    if steps:
        by_kind: dict[str, list[float]] = {}
        for r in ranks:
            for c in r.collectives:
                if c.busbw_gbps is not None:
                    by_kind.setdefault(c.kind, []).append(c.busbw_gbps)
                    yield _scalar(f"rank{r.rank}/busbw_gbps/{c.kind}", c.busbw_gbps), steps[-1]
        for kind, values in by_kind.items():
            yield _scalar(f"mean/busbw_gbps/{kind}", sum(values) / len(values)), steps[-1]
            yield _scalar(f"max/busbw_gbps/{kind}", max(values)), steps[-1]

    # Why exposed, over all profiled steps (rank mean per step): one point, at the last profiled step.
    wait_ms, transfer_ms = m.exposed.per_rank_step_ms(len(steps)) if m.exposed is not None else (None, None)
    if steps and wait_ms is not None and transfer_ms is not None:
        yield _scalar("exposed/wait_ms", wait_ms), steps[-1]
        yield _scalar("exposed/transfer_ms", transfer_ms), steps[-1]

    for mem in m.memory:
        for name in ("param_bytes", "grad_bytes", "optimizer_state_bytes", "peak_allocated_bytes"):
            value = getattr(mem, name)
            if value is not None:
                yield _scalar(f"memory/rank{mem.rank}/{name}", value), 0

    st = m.step_time
    for i, value in enumerate(st.times_ms, start=1):
        yield _scalar("step_time/timed_ms", value), i
    for name in ("median_ms", "p10_ms", "p90_ms"):
        if getattr(st, name) is not None:
            yield _scalar(f"step_time/{name}", getattr(st, name)), 0


def _run_summaries(metrics: RunMetrics, mode: str, *, png: bytes | None, run_text: bool, run_dir: Path | None = None):
    """The timeline image, the run's text tabs, the hparams and headline numbers."""
    if png is not None:
        yield _image("timeline", png), 0
    if run_text:
        yield text_summary.text_pb("summary/table", summary_markdown(metrics)), 0
        yield text_summary.text_pb("summary/verification", verification_markdown(metrics)), 0
        yield text_summary.text_pb("summary/configuration", configuration_markdown(metrics)), 0
        advice = load_advice(run_dir or Path(metrics.run_dir))  # the folder read: a copied run records its old path
        if advice is not None:
            yield text_summary.text_pb("summary/advice", tensorboard_text(advice)), 0

    yield (
        hp.hparams_config_pb(
            hparams=[hp.HParam(k) for k in _hparams(metrics, mode)],
            metrics=[hp.Metric(tag, display_name=name) for tag, name in HEADLINE.items()],
        ),
        0,
    )
    yield hp.hparams_pb(_hparams(metrics, mode), trial_id=f"{Path(metrics.run_dir).name}/{mode}"), 0
    for tag, value in _headline(metrics, mode).items():
        yield _scalar(tag, value), 0
    yield _custom_scalars_layout(), 0


def _image(tag: str, png: bytes) -> summary_pb2.Summary:
    # Width and height from the PNG header (IHDR), so we need no image library.
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    image = summary_pb2.Summary.Image(height=height, width=width, colorspace=4, encoded_image_string=png)
    return summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, image=image)])


def _hparams(metrics: RunMetrics, mode: str) -> dict:
    """The run configuration as hparams (the config's own mode is the run's; `mode` is this folder's)."""
    cfg: dict[str, object] = {k: v for k, v in metrics.config.items() if isinstance(v, (bool, int, float, str)) and k != "mode"}
    cfg["run_mode"] = metrics.config.mode
    env = metrics.env
    return {
        "mode": mode,
        **cfg,
        "world_size": env.world_size,
        "backend": str(env.backend),
        "device_type": str(env.device_type),
        "torch": str(env.torch),
    }


def _headline(metrics: RunMetrics, mode: str) -> dict[str, float]:
    row = summary_of(metrics).modes[mode]
    out = {
        "headline/median_step_ms": metrics.modes[mode].step_time.median_ms,
        "headline/overlap_pct": row.overlap_pct,
        "headline/exposed_comm_ms": row.exposed_comm_ms,
        "headline/speedup": metrics.speedup.measured if metrics.speedup else None,
        "headline/speedup_vs_first": next((x.speedup for x in summary_of(metrics).speedup_vs_first if x.mode == mode), None),
    }
    gain = summary_of(metrics).overlap_yield
    if gain is not None and gain.mode == mode:
        # Run-level numbers of split against split-blocking: once, in the split run.
        out["headline/overlap_yield_ms"] = gain.ms
        out["headline/overlap_yield_pct"] = gain.pct_of_comm
        out.update({f"headline/interference/{x.phase}_pct": x.pct for x in summary_of(metrics).interference})
    return {k: v for k, v in out.items() if v is not None}


def _custom_scalars_layout() -> summary_pb2.Summary:
    charts = [layout_pb2.Chart(title=title, multiline=layout_pb2.MultilineChartContent(tag=[regex])) for title, regex in COMPARE_CHARTS]
    layout = layout_pb2.Layout(category=[layout_pb2.Category(title="modes side by side", chart=charts)])
    # What custom_scalar.summary.pb builds, without importing TensorFlow.
    tensor = tensor_util.make_tensor_proto(np.array(layout.SerializeToString(), dtype=np.object_))
    meta = summary_pb2.SummaryMetadata.FromString(custom_scalar_metadata.create_summary_metadata().SerializeToString())
    return summary_pb2.Summary(
        value=[summary_pb2.Summary.Value(tag=custom_scalar_metadata.CONFIG_SUMMARY_TAG, metadata=meta, tensor=tensor)]
    )


def _md_table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]], *, left: int = 1, escape: bool = True) -> str:
    """`left` columns of text, then right-aligned numbers; each cell escaped (cells may hold trace
    text) unless `escape` is False (cells written as Markdown already: code spans)."""
    align = ["---" if i < left else "---:" for i in range(len(header))]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(report_md.escape(c) if escape else c for c in row) + " |" for row in rows]
    return "\n".join(lines)


def summary_markdown(metrics: RunMetrics) -> str:
    """The console's summary: its table in Markdown, the speedup line, the per-phase table, the
    collectives by phase with their bytes, and the overlap yield and interference line."""
    text = _md_table(console.summary_columns(metrics), console.summary_rows(metrics))
    if metrics.speedup:
        sp = metrics.speedup
        text += f"\n\nsplit speedup over sequential (median step time): **{sp.measured:.2f}x**"
        if sp.predicted:
            text += f"; ideal from the sequential mode's comm and compute: {sp.predicted:.2f}x"
    phases = console.phase_rows(metrics)
    if phases:
        text += "\n\ncommunication per phase (ms per profiled step, mean over ranks)\n\n" + _md_table(console.PHASE_COLUMNS, phases, left=2)
    attribution = console.attribution_lines(metrics)
    if attribution:
        items = "\n".join(f"- {report_md.escape(line.strip())}" for line in attribution if line.startswith("  "))
        rest = (report_md.escape(line) for line in attribution[1:] if not line.startswith("  "))
        text += "\n\n".join(["", report_md.escape(attribution[0]), items, *rest])
    line = console.yield_line(metrics)
    if line:
        text += f"\n\n{line}"
    return text


def verification_markdown(metrics: RunMetrics) -> str:
    verdict = "**all checks passed**" if metrics.passed else "**verification FAILED**"
    return verdict + "\n\n" + "\n".join(f"- {c.describe()}" for c in metrics.all_checks())


def configuration_markdown(metrics: RunMetrics) -> str:
    env = {k: v for k, v in as_json(metrics.env).items() if k != "ranks"}
    rows = [(report_md.code_span(k, table=True), report_md.code_span(v, table=True)) for k, v in [*metrics.config.items(), *env.items()]]
    return f"run folder {report_md.code_span(metrics.run_dir)}\n\n" + _md_table(("setting", "value"), rows, escape=False)
