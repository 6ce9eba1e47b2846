"""The report of a job: report.html, report.md with timeline.png, report.json, from the job's record.

A job has one mode and no verification or memory, so its report says less than a run's: a verdict
on overlap and exposed communication, the setup, the numbers per profiled step, the timeline, the
phases, the collectives by phase and by kind, the stragglers, and notes. It is built from the
renderers' own blocks (render.report_tables, render.modes, render.notes) and rendered by the same
HTML and Markdown writers, so it reads like a run's report and links to the same definitions.
"""

from __future__ import annotations

from pathlib import Path

from profile_overlap.record.folder import Run, load_run
from profile_overlap.record.metrics import ModeSummary, RunMetrics, ensure_writable_dir
from profile_overlap.render import exposed, integrity, modes, notes
from profile_overlap.render.document import Code, Inline, Items, Paragraph, Ref, Report, Section, Table, gbps, ms, pct
from profile_overlap.render.perfetto_link import perfetto_blocks
from profile_overlap.render.report import banner
from profile_overlap.render.report_tables import collectives_table, phase_blocks, straggler_blocks, timeline_blocks
from profile_overlap.render.write import FORMATS, write_files

EXPOSED_OVER_COMPUTE = 1.0
"""More exposed communication than the whole compute it could hide behind."""
WELL_HIDDEN_PCT = 80.0
NOISY_SPREAD = 0.2
"""p10-p90 of the profiled steps wider than 20% of their median."""


def build(run: Run) -> Report:
    m = run.metrics
    s = m.summary.modes
    sections = (
        Section("verdict", "Verdict", verdict_blocks(m, s)),
        Section("setup", "Setup", setup_blocks(m)),
        Section("overlap", "Overlap per profiled step", (overview(m, s),)),
        Section("timeline", "Overlap timeline", timeline_blocks(run) + perfetto_blocks(run.dir)),
        Section("phases", "Phases: where communication hides", phase_blocks(m, s) + _phase_hint(s)),
        Section("attribution", "Communication by phase", modes.attribution_blocks(m, s)),
        Section("collectives", "Collectives", (collectives_table(s),)),
        Section("stragglers", "Stragglers: wait vs transfer", straggler_blocks(m)),
        *exposed.report_sections(m),
        Section("notes", "Notes", (Items(job_notes(m, s)),)),
    )
    sections = integrity.with_section(sections, m)
    env = m.env
    backend = env.get("backend") or "no process group"
    subtitle = f"job {m.config['job']}: {_ranks(env['world_size'])}, {backend} on {env.get('device_type') or '?'}"
    return Report(title="profile_overlap report", subtitle=subtitle, banner=banner(run), sections=sections)


def verdict(m: RunMetrics, x: ModeSummary) -> Inline:
    """One sentence on overlap and exposed communication, and where the step waited most."""
    st = m.modes[x.mode].step_time
    ranks = len(m.config["profiled_ranks"])
    text: list = [f"Over {m.config['profiled_steps']} profiled steps on {ranks} rank{'s' if ranks != 1 else ''} "]
    text.append(f"(median step {ms(st.median_ms)} ms), " if st.median_ms is not None else "")
    if not x.comm_ms:
        return (*text, "the job ran no collective: there is no communication to hide.")
    text += [
        "communication took ",
        Ref(f"{ms(x.comm_ms)} ms", "comm_ms"),
        " per step: ",
        Ref(f"{ms(x.overlap_ms)} ms", "overlap_ms"),
        " of it hid behind compute (",
        Ref(f"{pct(x.overlap_pct)}%", "mode_overlap_pct"),
        ") and ",
        Ref(f"{ms(x.exposed_comm_ms)} ms", "exposed_comm_ms"),
        " was exposed",
    ]
    if st.median_ms:
        text.append(f", {pct(100 * x.exposed_comm_ms / st.median_ms)}% of the step")
    busy = [p for p in x.phases if p.exposed_comm_ms > 0]
    if busy:
        worst = max(busy, key=lambda p: p.exposed_comm_ms)
        text += [f"; {worst.phase} waited longest, ", Ref(f"{ms(worst.exposed_comm_ms)} ms", "phase_exposed_comm_ms"), " exposed per step"]
    return (*text, ".")


def verdict_blocks(m: RunMetrics, s: dict[str, ModeSummary]) -> tuple:
    blocks = [Paragraph(verdict(m, next(iter(s.values()))), tone="verdict"), *integrity.verdict_paragraphs(m)]
    missing = m.config.get("missing_ranks") or []
    if missing:
        blocks.append(Paragraph((_missing_text(m),), tone="warning"))
    return tuple(blocks)


def _missing_text(m: RunMetrics) -> str:
    missing = m.config["missing_ranks"]
    names = ", ".join(str(r) for r in missing)
    return (
        f"Rank{'s' if len(missing) > 1 else ''} {names} of {m.env['world_size']} wrote no trace into this job folder (never profiled, "
        "or its traces are on another file system): every number here is of the ranks that did, and a rank's wait for a missing "
        "one cannot be told from transfer."
    )


def setup_blocks(m: RunMetrics) -> tuple:
    cfg, env = m.config, m.env
    devices: dict[str, int] = {}
    for r in env.get("ranks", []):
        devices[str(r.get("device"))] = devices.get(str(r.get("device")), 0) + 1
    profiled = ", ".join(str(r) for r in cfg["profiled_ranks"])
    if cfg["missing_ranks"]:
        profiled += f" (missing: {', '.join(str(r) for r in cfg['missing_ranks'])})"
    rows = [
        ("job folder", m.run_dir),
        ("started (UTC)", env.get("date") or "–"),
        ("hosts", ", ".join(env.get("hosts") or ()) or "–"),
        ("world size", _ranks(env["world_size"])),
        ("ranks profiled", profiled),
        ("backend", env.get("backend") or "–"),
        ("devices", f"{env.get('device_type')}: " + ", ".join(f"{name} ×{n}" for name, n in devices.items())),
        ("python / torch", f"{env.get('python') or '–'} / {env.get('torch') or '–'}"),
        ("CUDA / NCCL", " / ".join(str(env.get(k) or "–") for k in ("cuda", "nccl"))),
        ("profiled steps", f"{cfg['profiled_steps']}, in {cfg['trace_files']} trace files"),
        ("traces dropped", str(cfg["dropped_traces"])),
        ("step time", next(iter(m.modes.values())).step_time.method),
    ]
    blocks: list = [
        Paragraph(
            (
                "Your own training job, profiled with profile_overlap.trace_handler (or profile): every rank traced its "
                "profiler cycles into this folder, and the record is their analysis, as `profile_overlap analyze` does it.",
            )
        ),
        Table(header=(("",), ("",)), rows=tuple(((k,), (v,)) for k, v in rows), numeric=(False, False)),
    ]
    if env.get("command"):
        blocks += [
            Paragraph(
                ("The command, as rank 0 saw it (torchrun's other flags, such as --standalone or --nnodes, never reach the ranks):",)
            ),
            Code(env["command"]),
        ]
    return tuple(blocks)


def overview(m: RunMetrics, s: dict[str, ModeSummary]) -> Table:
    (name, x), st = next(iter(s.items())), next(iter(m.modes.values())).step_time
    rows: list = [
        (("step time median (ms)",), (ms(st.median_ms),)),
        (("step time p10 – p90 (ms)",), (f"{ms(st.p10_ms)} – {ms(st.p90_ms)}",)),
        ((Ref("communication", "comm_ms"), " per step (ms)"), (ms(x.comm_ms),)),
        ((Ref("compute", "compute_ms"), " per step (ms)"), (ms(x.compute_ms),)),
        ((Ref("overlap", "overlap_ms"), ": comm hidden by compute (ms)"), (ms(x.overlap_ms),)),
        ((Ref("exposed comm", "exposed_comm_ms"), " per step (ms)"), (ms(x.exposed_comm_ms),)),
        ((Ref("overlap %", "mode_overlap_pct"),), (pct(x.overlap_pct),)),
    ]
    for c in x.collectives:
        rows.append(((Ref("busbw", "mode_busbw_gbps"), f" {c.kind} (GB/s)"), (gbps(c.busbw_gbps.mean) if c.busbw_gbps else "–",)))
    return Table(
        header=(("",), (name,)),
        rows=tuple(rows),
        numeric=(False, True),
        caption=(
            "Step time: the profiled steps' ProfilerStep windows, the slowest rank per step (the profiler's own cost included). "
            "Comm, compute and overlap: per profiled step, mean over ranks.",
        ),
    )


def _phase_hint(s: dict[str, ModeSummary]) -> tuple:
    if any(x.phases for x in s.values()):
        return ()
    return (
        Paragraph(
            (
                "To see per-phase numbers, wrap your step's parts in torch.profiler.record_function('forward'), "
                "record_function('backward') and record_function('optimizer'); torch.optim's own Optimizer.step counts as the "
                "optimizer phase, and FSDP's and DDP's own labels place their collectives.",
            )
        ),
    )


def job_notes(m: RunMetrics, s: dict[str, ModeSummary]) -> tuple[Inline, ...]:
    x, st = next(iter(s.values())), next(iter(m.modes.values())).step_time
    found: list = []
    if m.config.get("missing_ranks"):
        found.append((_missing_text(m),))
    if m.config.get("dropped_traces"):
        n = m.config["dropped_traces"]
        found.append(
            (
                f"{n} trace{'s were' if n > 1 else ' was'} dropped while being written (most likely the disk was full); the "
                "job went on, and those cycles are not in these numbers.",
            )
        )
    if x.exposed_comm_ms and x.compute_ms and x.exposed_comm_ms / x.compute_ms >= EXPOSED_OVER_COMPUTE:
        found.append(
            (
                "Exposed communication dominates: ",
                Ref(f"{ms(x.exposed_comm_ms)} ms", "exposed_comm_ms"),
                f" per step waits for communication, {x.exposed_comm_ms / x.compute_ms:.1f}× the ",
                Ref(f"{ms(x.compute_ms)} ms", "compute_ms"),
                " of compute there is to hide it behind: more work per rank and step (a larger batch), or smaller buckets "
                "or units so that the first collective starts sooner, give the overlap more to work with.",
            )
        )
    elif x.overlap_pct is not None and x.overlap_pct >= WELL_HIDDEN_PCT:
        found.append(("The job hid ", Ref(f"{pct(x.overlap_pct)}%", "mode_overlap_pct"), " of its communication: compute sets the pace."))
    straggle = notes.stragglers(m, s)
    if straggle is not None:
        found.append(straggle)
    if st.median_ms and len(st.times_ms) > 2 and (st.p90_ms - st.p10_ms) / st.median_ms > NOISY_SPREAD:
        found.append(
            (
                f"Profiled step times are noisy: their p10–p90 spans {ms(st.p10_ms)} – {ms(st.p90_ms)} ms, "
                f"{(st.p90_ms - st.p10_ms) / st.median_ms:.0%} of the median; profile more steps (active, repeat) before "
                "reading small differences.",
            )
        )
    return tuple(found) or (("Nothing in the numbers calls for a note.",),)


def write(job_dir: Path, metrics: RunMetrics | None = None, *, out: Path | None = None, formats: tuple[str, ...] = FORMATS) -> list[Path]:
    """report.html, report.md (+ timeline.png) and report.json of a job folder. At the end of the
    job the caller passes the record it holds (status.json still says running then)."""
    run = load_run(Path(job_dir))
    if metrics is not None:
        run = Run(dir=run.dir, metrics=metrics, timeline=run.timeline, status=None)
    out = Path(out) if out else run.dir
    ensure_writable_dir(out)
    report = build(run)
    fig = None
    if run.timeline and run.timeline.get("modes") and ("html" in formats or "md" in formats):
        from profile_overlap.render import timeline

        fig = timeline.figure(run.metrics, run.timeline)
    return write_files(report, run.metrics, fig, out=out, formats=formats)


def _ranks(n: int) -> str:
    return f"{n} rank" if n == 1 else f"{n} ranks"
