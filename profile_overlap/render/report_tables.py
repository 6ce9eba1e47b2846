"""The report's tables: the modes side by side, the timeline figure's section, communication per
phase, the overlap yield and interference, collectives (nccl-tests style) and stragglers (wait vs
transfer per rank)."""

from __future__ import annotations

from profile_overlap.core.modes import SPEEDUP_MODE, YIELD_BASELINE, YIELD_MODE
from profile_overlap.record.folder import Run
from profile_overlap.record.interference import Interference
from profile_overlap.record.metrics import ModeSummary, RunMetrics
from profile_overlap.record.summary import measured_interference, summary_of
from profile_overlap.render.document import Figure, Inline, Paragraph, Ref, Table
from profile_overlap.render.exposed import WAIT_BY_DURATION
from profile_overlap.render.interference import figure, median_rank
from profile_overlap.render.modes import noise_reason, speedup_cell
from profile_overlap.render.numbers import gbps, mib, ms, pct, times, us
from profile_overlap.render.report_scale import TABLE_RANKS, spread_table


def side_by_side(m: RunMetrics, s: dict[str, ModeSummary]) -> Table:
    names = list(s)
    kinds = sorted({c.kind for x in s.values() for c in x.collectives})

    def row(label: Inline, values: list[str]) -> tuple:
        return (label, *((v,) for v in values))

    def each(fn) -> list[str]:
        return [fn(x) for x in s.values()]

    rows = [
        row((Ref("step time median", "step_time_ms"), " (ms)"), each(lambda x: ms(m.modes[x.mode].step_time.median_ms))),
        row(
            (Ref("step time p10 – p90", "step_time_ms"), " (ms)"),
            each(lambda x: "{} – {}".format(*(ms(getattr(m.modes[x.mode].step_time, k)) for k in ("p10_ms", "p90_ms")))),
        ),
        row((Ref("speedup", "speedup_vs_first"), f" vs {names[0]} (×)"), each(lambda x: speedup_cell(m, x.mode))),
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
            row((Ref("speedup", "speedup"), " measured (×)"), [times(sp.measured) if n == SPEEDUP_MODE else "" for n in names]),
            row(
                (Ref("predicted speedup", "predicted_speedup"), ": ideal from sequential's comm + compute (×)"),
                [times(sp.predicted) if n == SPEEDUP_MODE else "" for n in names],
            ),
        ]
    return Table(
        header=(("",), *((n,) for n in names)),
        rows=tuple(rows),
        numeric=(False, *(True for _ in names)),
        caption=(
            "Step times: median and p10–p90 of the timed, unprofiled steps; speedup: "
            f"{names[0]}'s median over each mode's (*: within run-to-run noise). "
            "Comm, compute and overlap: per profiled step, mean over ranks.",
        ),
    )


def timeline_blocks(run: Run) -> tuple:
    if not run.timeline or not run.timeline.modes:
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


def phase_blocks(m: RunMetrics, s: dict[str, ModeSummary]) -> tuple:
    """Per profiled mode: a sentence on where its communication hid, and its per-phase table."""
    profiled = [x for x in s.values() if x.phases]
    if not profiled:
        why = "was not profiled (--no-profile)" if not any(x.analysis for x in m.modes.values()) else "has no phase labels in its traces"
        return (Paragraph((f"This run {why}, so its communication cannot be attributed to the forward, backward and optimizer phases.",)),)
    blocks: list = [
        Paragraph(
            (
                "Each step splits into its ",
                Ref("phases", "phase"),
                " (forward, backward, optimizer: the step's record_function labels). Per phase: its window, the "
                "communication inside it, how much of that hid behind the phase's own compute (",
                Ref("hidden", "hidden_ms"),
                ") and how much the phase waited for (",
                Ref("exposed", "phase_exposed_comm_ms"),
                "); per profiled step, mean over ranks.",
            )
        )
    ]
    for x in profiled:
        if found := _phases_found(x):
            blocks.append(Paragraph(found))
        blocks.append(Paragraph(_phase_verdict(x)))
        blocks.append(
            Table(
                header=(
                    ("phase",),
                    (Ref("window", "window_ms"), " (ms)"),
                    (Ref("comm", "phase_comm_ms"), " (ms)"),
                    (Ref("hidden", "hidden_ms"), " (ms)"),
                    (Ref("exposed comm", "phase_exposed_comm_ms"), " (ms)"),
                    (Ref("compute", "phase_compute_ms"), " (ms)"),
                    ("hidden %",),
                ),
                rows=tuple(
                    (
                        (p.phase,),
                        (ms(p.window_ms),),
                        (ms(p.comm_ms),),
                        (ms(p.hidden_ms),),
                        (ms(p.exposed_comm_ms),),
                        (ms(p.compute_ms),),
                        (pct(100 * p.hidden_ms / p.comm_ms) if p.comm_ms else "–",),
                    )
                    for p in x.phases
                ),
                numeric=(False, True, True, True, True, True, True),
                caption=(f"{x.mode}: communication per phase, per profiled step, mean over ranks; hidden % = hidden / comm.",),
            )
        )
        analysis = m.modes[x.mode].analysis
        if analysis is not None and analysis.interference is not None:
            blocks.append(Paragraph(_interference(x.mode, analysis.interference)))
    return tuple(blocks)


def _interference(mode: str, x: Interference) -> Inline:
    """'Interference in split: +1.2% [...] (175 pairs) over its ranks and phases; backward +0.9% [...] (56 pairs), ...'"""
    phases = median_rank(x)
    each = "; per phase, the median rank: " + ", ".join(f"{name} {figure(e)}" for name, e in phases.items()) if phases else ""
    return (
        Ref("Interference", "interference_slowdown_pct"),
        f" in {mode}, its compute with communication in flight against the same operators alone: {figure(x)}",
        f" over its ranks and phases{each}.",
    )


SOURCE_WORDS = {  # how the report names each source of a phase window (PhaseSummary.sources)
    "labels": "its labels",
    "FSDP2": "FSDP2's ranges",
    "DDP": "DDP's ranges",
    "torch.optim": "torch.optim's ranges",
    "profile_overlap": "our schedules' optimizer range",
    "autograd": "autograd's frames",
    "step": "the rest of the step before the backward",
}


def _phases_found(x: ModeSummary) -> Inline:
    """One sentence when some phase was not labelled: where each phase was found instead."""
    if all(set(p.sources) <= {"labels"} for p in x.phases):
        return ()
    where = "; ".join(f"{p.phase} from {' and '.join(SOURCE_WORDS.get(s, s) for s in p.sources)}" for p in x.phases)
    some = "some of its steps have" if any("labels" in p.sources for p in x.phases) else "its steps have"
    return (
        f"{x.mode}'s phases were ",
        Ref("found from what torch records", "phase"),
        f" ({some} no forward/backward/optimizer labels): {where}.",
    )


def _phase_verdict(x: ModeSummary) -> Inline:
    """'split hides 11 ms of its 19 ms backward communication behind backward compute (58%), ...' in plain words."""
    busy = [p for p in x.phases if p.comm_ms > 0]
    if not busy:
        return (f"{x.mode} communicates in none of its phases.",)
    text: list = [f"{x.mode} hides "]
    for i, p in enumerate(busy):
        if i:
            text.append(", and " if i == len(busy) - 1 else ", ")
        if p.hidden_ms <= 0:
            text += ["none of its ", Ref(f"{ms(p.comm_ms)} ms", "phase_comm_ms"), f" {p.phase} communication"]
            continue
        text += [
            Ref(f"{ms(p.hidden_ms)} ms", "hidden_ms"),
            " of its ",
            Ref(f"{ms(p.comm_ms)} ms", "phase_comm_ms"),
            f" {p.phase} communication behind {p.phase} compute ({pct(100 * p.hidden_ms / p.comm_ms)}%)",
        ]
    worst = max(busy, key=lambda p: p.exposed_comm_ms)
    if len(busy) > 1 and worst.exposed_comm_ms > 0:
        text += [f"; {worst.phase} waits longest, ", Ref(f"{ms(worst.exposed_comm_ms)} ms", "phase_exposed_comm_ms"), " exposed"]
    elif worst.hidden_ms <= 0:
        text.append(f": {worst.phase} waits for all of it")
    outside = (x.comm_ms or 0) - sum(p.comm_ms for p in x.phases)
    if x.comm_ms and outside > 0.01 * x.comm_ms:
        text += [f". {ms(outside)} ms of its ", Ref(f"{ms(x.comm_ms)} ms", "comm_ms"), " per step ran outside every labelled phase"]
    return (*text, ".")


def yield_blocks(m: RunMetrics) -> tuple:
    """What overlapping won (split against split-blocking), and how much it slowed compute, per phase."""
    y, rows = summary_of(m).overlap_yield, summary_of(m).interference
    if y is None and not rows:
        return (
            Paragraph(
                (
                    "The overlap yield and the interference compare split with split-blocking (the same collectives and "
                    "compute, each collective waited for at once); this run did not run both: use --mode compare "
                    "(its default modes include both) or list both in --modes.",
                )
            ),
        )
    blocks: list = []
    if y is not None:
        base_t, mode_t = m.modes[y.baseline].step_time, m.modes[y.mode].step_time
        won = "won" if y.ms >= 0 else "lost"
        text: list = [
            f"Overlapping {won} ",
            Ref(f"{ms(abs(y.ms))} ms", "overlap_yield_ms"),
            f" per step: {y.baseline}'s median step ",
            Ref(f"{ms(base_t.median_ms)} ms", "step_time_ms"),
            f" against {y.mode}'s ",
            Ref(f"{ms(mode_t.median_ms)} ms", "step_time_ms"),
        ]
        if y.pct_of_comm is not None:
            comm = summary_of(m).modes[y.baseline].comm_ms
            text += [", ", Ref(f"{pct(y.pct_of_comm)}%", "overlap_yield_pct"), f" of {y.baseline}'s ", Ref(f"{ms(comm)} ms", "comm_ms")]
            text.append(" of communication per step")
        if y.within_noise:
            interval = noise.overlap_yield_ms if (noise := summary_of(m).noise) else None
            text += [*noise_reason(m, interval, within=True, unit="ms"), ": ", Ref("within run-to-run noise", "within_noise")]
        blocks.append(Paragraph((*text, "."), tone="verdict"))
        blocks.append(
            Paragraph(
                (
                    f"{y.baseline} runs exactly {y.mode}'s collectives and compute but waits for each collective at once, so "
                    "nothing overlaps; the difference in step time is what overlapping buys, and its share of the "
                    "communication says how much of that time it won back (100% would hide all of it).",
                )
            )
        )
    if rows:
        mode, baseline = (y.mode, y.baseline) if y else (YIELD_MODE, YIELD_BASELINE)
        known = measured_interference(rows)
        text = [
            Ref("Interference", "interference_pct"),
            f": how much slower each phase's compute ran in {mode}, with communication running beside it, than the same "
            f"operations in {baseline}, where they ran alone. Above 0, overlapping slowed compute down and gave back part "
            "of its yield.",
        ]
        if known:
            _, worst_pct, worst = max(known, key=lambda row: abs(row[0]))
            text += [
                f" The most time {'lost' if worst_pct >= 0 else 'gained'}: {worst.phase}, ",
                Ref(f"{worst_pct:+.1f}%", "interference_pct"),
                f" ({ms(worst.baseline_compute_ms)} ms alone, {ms(worst.compute_ms)} ms beside communication).",
            ]
        if m.env.backend == "gloo":
            text.append(" On CPU, gloo runs each collective on worker threads that compete with compute for the cores.")
        blocks.append(Paragraph(tuple(text)))
        blocks.append(
            Table(
                header=(
                    ("phase",),
                    (Ref("compute", "phase_compute_ms"), f" in {baseline} (ms)"),
                    (Ref("compute", "phase_compute_ms"), f" in {mode} (ms)"),
                    (Ref("interference", "interference_pct"), " (%)"),
                ),
                rows=tuple(
                    ((x.phase,), (ms(x.baseline_compute_ms),), (ms(x.compute_ms),), ("–" if x.pct is None else f"{x.pct:+.1f}",))
                    for x in rows
                ),
                numeric=(False, True, True, True),
                caption=("Compute per phase, per profiled step, mean over ranks; the same operations run in both modes.",),
            )
        )
    return tuple(blocks)


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
    hosts = {r.rank: r.host for r in m.env.ranks}
    blocks: list = []
    for name, mode in m.modes.items():
        ranks = mode.analysis.ranks if mode.analysis else ()
        slow = summary_of(m).modes[name].slowest_rank
        if slow is None:
            blocks.append(Paragraph((f"{name}: no collective was matched on two or more ranks, so there is no wait/transfer split.",)))
            continue
        rows, hi = [], set()
        # Where the aligned clock names another rank, the durations' pick is only that (definitions: clock_slowest_rank).
        clock_slowest = mode.analysis.clock_slowest_rank if mode.analysis else None
        disagree = clock_slowest is not None
        many = mode.analysis if len(ranks) > TABLE_RANKS and mode.analysis is not None and mode.analysis.spread else None
        shares = dict(summary_of(m).modes[name].wait_share_pct)
        for i, r in enumerate(ranks):
            share = shares.get(r.rank)
            rows.append(
                (
                    (str(r.rank),),
                    (hosts.get(r.rank, "?"),),
                    (ms(_ms(r.wait_us)),),
                    (ms(_ms(r.transfer_us)),),
                    (pct(share),),
                    (pct(r.last_arrival_pct),),
                    (("waits least (by duration)" if disagree else "slowest: the others wait for it") if r.rank == slow else "",),
                )
            )
            if r.rank == slow:
                hi.add(i)
        most = max(ranks, key=lambda r: r.wait_us or 0)
        # Records written before clock alignment have no arrival order.
        late = max((r for r in ranks if r.last_arrival_pct is not None), key=lambda r: r.last_arrival_pct or 0.0, default=None)
        arrival = (
            (
                " On the aligned clocks, rank ",
                str(late.rank),
                " arrived last at ",
                Ref(f"{pct(late.last_arrival_pct)}%", "last_arrival_pct"),
                " of the collective calls.",
                *(
                    (
                        f" The durations and the arrivals disagree on which rank the others wait for (rank {slow} against ",
                        Ref(f"rank {clock_slowest}", "clock_slowest_rank"),
                        f"): {WAIT_BY_DURATION}. Why exposed goes by the aligned clocks.",
                    )
                    if disagree
                    else ()
                ),
            )
            if late
            else ()
        )
        blocks.append(
            Paragraph(
                (
                    f"{name}: the slowest rank was rank {slow} on {hosts.get(slow, '?')} (",
                    Ref("slowest rank", "slowest_rank"),
                    "); rank ",
                    str(most.rank),
                    " waited longest, ",
                    Ref(f"{ms(_ms(most.wait_us))} ms", "wait_us"),
                    " over the profiled steps.",
                    *arrival,
                )
            )
        )
        if many:  # the spread over the ranks instead of a row per rank
            blocks.append(spread_table(name, many))
            continue
        blocks.append(
            Table(
                header=(
                    ("rank",),
                    ("host",),
                    (Ref("wait", "wait_us"), " (ms)"),
                    (Ref("transfer", "transfer_us"), " (ms)"),
                    (Ref("wait share", "wait_share_pct"), " (%)"),
                    (Ref("arrived last", "last_arrival_pct"), " (%)"),
                    ("",),
                ),
                rows=tuple(rows),
                numeric=(True, False, True, True, True, True, False),
                highlight=frozenset(hi),
                caption=(
                    f"{name}: collective time of each rank over the profiled steps, split into waiting for peers and moving data, "
                    "and how often the rank started a call last of all ranks (on clocks aligned to the reference rank's).",
                ),
            )
        )
    return tuple(blocks)


def _ms(x_us: float | None) -> float | None:
    """µs of the analysis record in ms; None stays None."""
    return None if x_us is None else x_us / 1e3
