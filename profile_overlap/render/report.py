"""What a run's report says, built from the finished run folder: the metrics record, status.json
and timeline.json. The content is a small tree (sections of paragraphs, tables, a figure, code)
whose text is plain strings and links to metric definitions; `report_html` and `report_md` render
it, escaping every string, so nothing that came from a trace (kernel, op or host names, paths)
can become markup.

    python -m profile_overlap report runs/<run>                 # report.html, report.md, timeline.png
    python -m profile_overlap report --compare runs/<a> runs/<b>

Nothing here recomputes a metric: the per-mode overlap numbers are the console summary's
(`record.summary.step_overlaps`: per profiled step, mean over ranks; `comm_ms` and friends in the
definitions); the collective and straggler tables show the record's per-rank numbers with their
mean and range across ranks.
"""

from __future__ import annotations

import json

from profile_overlap.core.dtypes import DTYPE_BYTES
from profile_overlap.core.modes import SPEEDUP_BASELINE, SPEEDUP_MODE
from profile_overlap.record.folder import Run, RunStatus
from profile_overlap.record.metrics import CheckResult, ModeSummary, RunMetrics
from profile_overlap.record.summary import summary_of
from profile_overlap.render import advice, dimensions, exposed, integrity, modes, notes, notes_job, report_job, whatif
from profile_overlap.render.document import Code, Inline, Items, Paragraph, Ref, Report, Section, Table
from profile_overlap.render.numbers import mib, ms, times
from profile_overlap.render.perfetto_link import perfetto_blocks
from profile_overlap.render.report_scale import heatmap_sections
from profile_overlap.render.report_tables import (
    collectives_table,
    phase_blocks,
    side_by_side,
    straggler_blocks,
    timeline_blocks,
    yield_blocks,
)


def build(run: Run) -> Report:
    """The report of a run, or of a record of traces alone (RunMetrics.job: a job, a bare folder):
    the same sections where the record holds their numbers, a job's own verdict, setup and notes."""
    m = run.metrics
    s = summary_of(m).modes
    job = m.job
    sections = (
        Section("verdict", "Verdict", report_job.verdict_blocks(m, job) if job else verdict_blocks(run)),
        Section("setup", "Setup", report_job.setup_blocks(m, job) if job else setup_blocks(run)),
        *(() if job else (Section("verification", "Verification", verification_blocks(m)),)),
        (
            Section("overlap", "Overlap per profiled step", (report_job.overview(m, s),))
            if job
            else Section("comparison", comparison_title(s), (side_by_side(m, s),))
        ),
        Section("timeline", "Overlap timeline", timeline_blocks(run) + perfetto_blocks(run.dir)),
        *heatmap_sections(run),
        Section("phases", "Phases: where communication hides", phase_blocks(m, s) + (report_job.phase_hint(s) if job else ())),
        Section("attribution", "Communication by phase", modes.attribution_blocks(m, s)),
        *(() if job else (Section("yield", "What overlapping won: overlap yield and interference", yield_blocks(m)),)),
        Section("collectives", "Collectives", (collectives_table(s),)),
        *dimensions.report_sections(m),
        Section("stragglers", "Stragglers: wait vs transfer", straggler_blocks(m)),
        *exposed.report_sections(m),
        *whatif.report_sections(run.dir),
        *advice.report_sections(run.dir),
        Section("notes", "Notes", (Items(notes_job.notes(m, job) if job else notes.notes(m, s)),)),
    )
    sections = integrity.with_section(sections, m)
    env = m.env
    subtitle = (
        report_job.subtitle(m, job)
        if job
        else f"{m.config.mode} run {run.name}: {env.world_size} ranks, {env.backend} on {env.device_type}, {env.date}"
    )
    return Report(title="profile_overlap report", subtitle=subtitle, banner=banner(run), sections=sections)


def verdict_blocks(run: Run) -> tuple:
    """The headline sentence, then every mode against the first where the headline does not say it all."""
    m, s = run.metrics, summary_of(run.metrics).modes
    blocks = [Paragraph(verdict(m, s), tone="verdict_failed" if run.failed else "verdict"), *integrity.verdict_paragraphs(m)]
    blocks += exposed.verdict_paragraphs(m)
    blocks += dimensions.verdict_paragraphs(m)
    others = modes.versus_first(m)
    if others is not None and m.passed and m.speedup and set(s) - {SPEEDUP_BASELINE, SPEEDUP_MODE}:
        blocks.append(Paragraph(others))
    return tuple(blocks)


def comparison_title(s: dict[str, ModeSummary]) -> str:
    """'Sequential vs split vs split-blocking', or 'split mode' for a one-mode run."""
    title = " vs ".join(s) if len(s) > 1 else f"{next(iter(s))} mode"
    return title[0].upper() + title[1:]


def banner(run: Run) -> Paragraph | None:
    state = run.status.state if run.status else None
    failed = [c for c in run.metrics.all_checks() if not c.passed]
    if failed or state in ("failed", "interrupted"):
        reason = (run.status.reason if run.status else None) or "; ".join(c.describe() for c in failed)
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
        return _failed_verdict(failed[0])
    if len(s) > 1 and not m.speedup:
        return modes.versus_first(m) or ()
    if len(s) == 1:
        return _one_mode_verdict(m, s)
    return _split_verdict(m, s)


def _failed_verdict(worst: CheckResult) -> Inline:
    """The first failed check: the timings cannot be compared."""
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


def _one_mode_verdict(m: RunMetrics, s: dict[str, ModeSummary]) -> Inline:
    """A one-mode run: its median step and how much of its communication hid."""
    name = summary_of(m).headline_mode
    one = s[name]
    text: list = [f"{name} only: median step ", Ref(f"{ms(m.modes[name].step_time.median_ms)} ms", "step_time_ms")]
    if one.comm_ms:
        text += [", with ", *modes.hidden_inline(one, " of communication per step hidden behind compute ("), ")"]
    return (*text, "; run with --mode compare (and --modes to choose them) to set it beside other modes.")


def _split_verdict(m: RunMetrics, s: dict[str, ModeSummary]) -> Inline:
    """split against sequential: the same, faster or slower, with the hidden communication and the memory."""
    seq, split = s[SPEEDUP_BASELINE], s[SPEEDUP_MODE]
    seq_t, split_t = m.modes[SPEEDUP_BASELINE].step_time, m.modes[SPEEDUP_MODE].step_time
    steps = (Ref(f"{ms(split_t.median_ms)} ms", "step_time_ms"), " vs ", Ref(f"{ms(seq_t.median_ms)} ms", "step_time_ms"))
    hid = (
        "split hid ",
        "" if split.overlap_pct and split.overlap_pct >= 50 else "only ",
        Ref(f"{ms(split.overlap_ms)} ms", "overlap_ms"),
        " of its ",
        Ref(f"{ms(split.comm_ms)} ms", "comm_ms"),
        " of communication per step behind compute",
    )
    memory = (
        str(m.env.world_size),
        " of the optimizer state (",
        Ref(f"{mib(split.optimizer_state_bytes)} MiB", "optimizer_state_bytes"),
        " instead of ",
        Ref(f"{mib(seq.optimizer_state_bytes)} MiB", "optimizer_state_bytes"),
        ").",
    )
    interval = spread.speedup if (spread := summary_of(m).noise) else None
    speed = m.speedup.measured if m.speedup else 1.0
    if summary_of(m).within_noise:
        head: Inline = ("split and sequential took the same time, ", Ref("within run-to-run noise", "within_noise"), " (median step ")
        return (
            *head,
            *steps,
            *modes.noise_reason(m, interval, within=True),
            "): ",
            *hid,
            *_slower_reason(m, seq, split),
            "; each rank did hold 1/",
            *memory,
        )
    noise = modes.noise_reason(m, interval, within=False)
    if speed >= 1:
        head = ("split was ", Ref(times(speed), "speedup"), " faster than sequential (median step ")
        return (*head, *steps, *noise, "): ", *hid, ", and each rank held 1/", *memory)
    head = ("split was ", Ref(times(1 / speed), "speedup"), " slower than sequential (median step ")
    return (*head, *steps, *noise, "): ", *hid, *_slower_reason(m, seq, split), "; each rank did hold 1/", *memory)


def _slower_reason(m: RunMetrics, seq: ModeSummary, split: ModeSummary) -> Inline:
    """Why the split did not win, from the numbers: it communicated longer than sequential."""
    if split.comm_ms is None or seq.comm_ms is None or split.comm_ms <= seq.comm_ms:
        return ()
    why = "; gloo runs reduce_scatter as a full all_reduce" if m.env.backend == "gloo" else ""
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
    for r in env.ranks:
        devices[str(r.device)] = devices.get(str(r.device), 0) + 1
    device_text = ", ".join(f"{name} ×{count}" for name, count in devices.items())
    state = run.status or RunStatus(state="succeeded" if m.passed else "failed")
    rows = [
        ("date (UTC)", str(env.date)),
        (
            "status",
            state.state + (f" at {state.time}" if state.time else "") + (f": {state.reason}" if state.reason else ""),
        ),
        ("run folder", m.run_dir),
        ("hosts", f"{', '.join(env.hosts)} ({env.num_nodes} node{'s' if env.num_nodes != 1 else ''})"),
        ("world size", f"{env.world_size} ranks"),
        ("backend", str(env.backend)),
        ("devices", f"{env.device_type}: {device_text}"),
        ("python / torch", f"{env.python} / {env.torch}"),
        ("CUDA / NCCL / gloo", " / ".join(str(v or "–") for v in (env.cuda, env.nccl, env.gloo))),
        ("step timing", next(iter(m.modes.values())).step_time.method),
    ]
    steps = f" Per mode: {cfg.warmup_steps} warmup steps (verified), {cfg.steps} timed steps, {cfg.profile_steps} profiled steps."
    if cfg.model == "transformer":
        workload = (
            f"The workload: a transformer with token and position embeddings, K = {cfg.layers} pre-norm decoder blocks of "
            f"width d = {cfg.dim} with {cfg.heads} heads, a final LayerNorm and an LM head, in {cfg.dtype}; "
            f"{cfg.batch} sequences of {cfg.seq_len} tokens per rank and step, next-token cross-entropy. The communication "
            f"units (one gradient bucket each) are the embeddings, each block and the head.{steps}",
        )
    else:
        itemsize = DTYPE_BYTES[cfg.dtype]
        params = (cfg.layers or 0) * (cfg.dim or 0) ** 2
        workload = (
            f"The workload: an MLP of K = {cfg.layers} layers, each a {cfg.dim}×{cfg.dim} {cfg.dtype} weight with tanh, "
            f"and a mean-squared-error loss, so P = K·d² = {params:,} parameters ({mib(params * itemsize)} MiB); each layer's "
            f"gradient is one communication bucket, and the forward pass is {cfg.layers} matmuls of {cfg.batch}×{cfg.dim} "
            f"by {cfg.dim}×{cfg.dim}.{steps}",
        )
    pairs = [((k,), (v if isinstance(v, str) else json.dumps(v),)) for k, v in cfg.items()]
    pairs += [(("",), ("",))] * (-len(pairs) % 3)
    config_rows = tuple(pairs[i] + pairs[i + 1] + pairs[i + 2] for i in range(0, len(pairs), 3))
    return (
        Paragraph((modes.modes_text(m),)),
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
    command = env.command or ""
    if env.launcher != "torchrun":
        return command
    # The recorded command is the worker's: `python -m profile_overlap ARGS`; torchrun's own flags
    # are not visible to the workers, so the node layout is restated from the record.
    args = command.split(" -m profile_overlap", 1)[1].strip() if " -m profile_overlap" in command else command
    num_nodes = env.num_nodes or 1
    per_node = env.world_size // num_nodes
    if num_nodes == 1:
        return f"torchrun --standalone --nproc-per-node {per_node} -m profile_overlap {args}".strip()
    return (
        f"torchrun --nnodes {num_nodes} --nproc-per-node {per_node} --rdzv-backend c10d --rdzv-endpoint HOST:PORT "
        f"-m profile_overlap {args}   # on every node; HOST:PORT: the first node's address and a free port"
    )


def verification_blocks(m: RunMetrics) -> tuple:
    checks: list[tuple[str, CheckResult]] = [(mode, c) for mode, mm in m.modes.items() for c in mm.checks]
    checks += [("across modes", c) for c in m.checks]
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
        "All checks passed: every mode computed the same numbers."
        if m.passed
        else f"{len([c for _, c in checks if not c.passed])} of {len(checks)} checks FAILED."
    )
    return (Paragraph((summary,), tone="ok" if m.passed else "failed"), table)
