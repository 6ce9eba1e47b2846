"""The report's tables: sequential vs split side by side, the timeline figure's section, collectives
(nccl-tests style) and stragglers (wait vs transfer per rank)."""

from __future__ import annotations

from profile_overlap.record.folder import Run
from profile_overlap.record.metrics import ModeSummary, RunMetrics
from profile_overlap.render.document import (
    Figure,
    Inline,
    Paragraph,
    Ref,
    Table,
    gbps,
    mib,
    ms,
    pct,
    times,
    us,
)


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
        slow = m.summary.modes[name].slowest_rank
        if slow is None:
            blocks.append(Paragraph((f"{name}: no collective was matched on two or more ranks, so there is no wait/transfer split.",)))
            continue
        rows, hi = [], set()
        shares = dict(m.summary.modes[name].wait_share_pct)
        for i, r in enumerate(ranks):
            share = shares.get(r["rank"])
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
