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

from profile_overlap.record.folder import Run
from profile_overlap.record.metrics import CheckResult, RunMetrics
from profile_overlap.record.summary import ModeSummary, slowest_rank, summaries, within_noise
from profile_overlap.render.document import (
    Code,
    Figure,
    Inline,
    Items,
    Paragraph,
    Ref,
    Report,
    Section,
    Table,
    gbps,
    mib,
    ms,
    pct,
    times,
    us,
)

# ---------------------------------------------------------------- the content tree


# ---------------------------------------------------------------- reading a run folder


# ---------------------------------------------------------------- per-mode numbers


# ---------------------------------------------------------------- headline metrics (gate, compare)


# ---------------------------------------------------------------- number formatting


# ---------------------------------------------------------------- the single-run report


def build(run: Run) -> Report:
    m = run.metrics
    s = summaries(m)
    from profile_overlap.render import notes

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


# ---------------------------------------------------------------- writing


# ---------------------------------------------------------------- the definitions appendix
