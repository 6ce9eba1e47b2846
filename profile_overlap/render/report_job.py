"""The sections of a report that only a record of traces alone has (a job traced by trace_handler,
or a bare folder of traces: RunMetrics.job): its verdict, setup and overview. A job has one mode and
no verification or memory, so its report says less than a run's; render/report.py builds both."""

from __future__ import annotations

from pathlib import Path

from profile_overlap.record.metrics import JOB, JobFacts, ModeSummary, RunMetrics
from profile_overlap.record.summary import summary_of
from profile_overlap.render import dimensions, integrity
from profile_overlap.render.document import Code, Inline, Paragraph, Ref, Table
from profile_overlap.render.numbers import gbps, ms, pct


def subtitle(m: RunMetrics, job: JobFacts) -> str:
    env = m.env
    what = "job" if job.kind == JOB else "traces"
    return f"{what} {Path(job.source).name}: {_ranks(env.world_size)}, {env.backend or 'no process group'} on {env.device_type or '?'}"


def verdict(m: RunMetrics, job: JobFacts, x: ModeSummary) -> Inline:
    """One sentence on overlap and exposed communication, and where the step waited most."""
    st = m.modes[x.mode].step_time
    ranks = len(job.profiled_ranks)
    text: list = [f"Over {job.profiled_steps} profiled steps on {ranks} rank{'s' if ranks != 1 else ''} "]
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
    if st.median_ms and x.exposed_comm_ms is not None:
        text.append(f", {pct(100 * x.exposed_comm_ms / st.median_ms)}% of the step")
    busy = [p for p in x.phases if p.exposed_comm_ms > 0]
    if busy:
        worst = max(busy, key=lambda p: p.exposed_comm_ms)
        text += [f"; {worst.phase} waited longest, ", Ref(f"{ms(worst.exposed_comm_ms)} ms", "phase_exposed_comm_ms"), " exposed per step"]
    return (*text, ".")


def verdict_blocks(m: RunMetrics, job: JobFacts) -> tuple:
    blocks = [Paragraph(verdict(m, job, next(iter(summary_of(m).modes.values()))), tone="verdict"), *integrity.verdict_paragraphs(m)]
    blocks += dimensions.verdict_paragraphs(m)
    if job.missing_ranks:
        blocks.append(Paragraph((missing_text(m, job),), tone="warning"))
    return tuple(blocks)


def missing_text(m: RunMetrics, job: JobFacts) -> str:
    missing = job.missing_ranks
    names = ", ".join(str(r) for r in missing)
    return (
        f"Rank{'s' if len(missing) > 1 else ''} {names} of {m.env.world_size} wrote no trace into this job folder (never profiled, "
        "or its traces are on another file system): every number here is of the ranks that did, and a rank's wait for a missing "
        "one cannot be told from transfer."
    )


def setup_blocks(m: RunMetrics, job: JobFacts) -> tuple:
    env = m.env
    devices: dict[str, int] = {}
    for r in env.ranks:
        devices[str(r.device)] = devices.get(str(r.device), 0) + 1
    profiled = ", ".join(str(r) for r in job.profiled_ranks)
    if job.missing_ranks:
        profiled += f" (missing: {', '.join(str(r) for r in job.missing_ranks)})"
    files = "?" if job.trace_files is None else str(job.trace_files)
    rows = [
        ("job folder", m.run_dir),
        ("started (UTC)", env.date or "–"),
        ("hosts", ", ".join(env.hosts) or "–"),
        ("world size", _ranks(env.world_size)),
        ("ranks profiled", profiled),
        ("backend", env.backend or "–"),
        ("devices", f"{env.device_type}: " + ", ".join(f"{name} ×{n}" for name, n in devices.items())),
        ("python / torch", f"{env.python or '–'} / {env.torch or '–'}"),
        ("CUDA / NCCL", " / ".join(v or "–" for v in (env.cuda, env.nccl))),
        ("profiled steps", f"{job.profiled_steps}, in {files} trace files"),
        ("traces dropped", str(job.dropped_traces)),
        ("step time", next(iter(m.modes.values())).step_time.method),
    ]
    blocks: list = [
        Paragraph(
            (
                "Your own training job, profiled with profile_overlap.trace_handler (or profile): every rank traced its "
                "profiler cycles into this folder, and the record is their analysis, as `profile_overlap analyze` does it."
                if job.kind == JOB
                else "A folder of PyTorch profiler traces, analysed by `profile_overlap analyze --tensorboard`: the traces say "
                "nothing of the job's environment, its step times or its correctness.",
            )
        ),
        Table(header=(("",), ("",)), rows=tuple(((k,), (v,)) for k, v in rows), numeric=(False, False)),
    ]
    if env.command and job.kind == JOB:
        blocks += [
            Paragraph(
                ("The command, as rank 0 saw it (torchrun's other flags, such as --standalone or --nnodes, never reach the ranks):",)
            ),
            Code(env.command),
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


def phase_hint(s: dict[str, ModeSummary]) -> tuple:
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


def _ranks(n: int) -> str:
    return f"{n} rank" if n == 1 else f"{n} ranks"
