"""Integrity checks of the events themselves: classification, GPU streams and timing
(docs/metrics.md "Integrity checks"). Called by integrity.check_integrity."""

from __future__ import annotations

import statistics

import numpy as np

from profile_overlap.analysis.integrity.checks import (
    BANDWIDTH,
    CUT_SHORT_RATIO,
    OK,
    OUTSIDE_ERROR_PCT,
    OUTSIDE_WARNING_PCT,
    OVERLAP,
    STEPS,
    UNCLASSIFIED_WARNING_PCT,
    listed,
    new_check,
    rank_list,
    status_of,
    with_meaning,
)
from profile_overlap.analysis.rank.per_rank import RankAnalysis
from profile_overlap.record.integrity import IntegrityCheck

# ---------------------------------------------------------------- classification


def classification_checks(ranks: list[RankAnalysis]) -> list[IntegrityCheck]:
    return [_unclassified_check(ranks), _comm_like_check(ranks), _sizes_check(ranks)]


def _unclassified_check(ranks: list[RankAnalysis]) -> IntegrityCheck:
    """Time in events of no class (neither compute nor communication)."""
    unclassified = {r.rank: r.facts.unclassified for r in ranks if r.facts.unclassified_us > 0}
    share = {r.rank: 100 * r.facts.unclassified_us / r.facts.all_compute_us for r in ranks if r.facts.all_compute_us > 0}
    heavy = [rank for rank in unclassified if share.get(rank, 100.0) > UNCLASSIFIED_WARNING_PCT]
    totals: dict[str, list[float]] = {}
    for items in unclassified.values():
        for name, count, total in items:
            acc = totals.setdefault(name, [0, 0.0])
            acc[0] += count
            acc[1] += total
    top = sorted(totals.items(), key=lambda kv: -kv[1][1])[:10]
    figures = {
        "unclassified_us": {r.rank: round(r.facts.unclassified_us, 3) for r in ranks},
        "share_of_compute_pct": {k: round(v, 3) for k, v in share.items()},
        "top": [{"name": n, "count": c, "total_us": round(t, 3)} for n, (c, t) in top],
        "ignored_by_rule": {r.rank: [{"name": n, "count": c, "total_us": round(t, 3)} for n, c, t in r.facts.ignored] for r in ranks},
    }
    detail = (
        f"{sum(r.facts.unclassified_us for r in ranks) / 1000:,.1f} ms in events of no class, most in "
        + listed([f"{n} ({t / 1000:,.1f} ms)" for n, (_, t) in top], 3)
        if unclassified
        else "every event is communication, compute or ignored by rule"
    )
    return with_meaning(
        new_check("classification.unclassified", status_of(False, bool(heavy)), detail, figures),
        "time in no class counts neither as compute nor as communication: if it is compute, overlap is under-counted",
        OVERLAP,
    )


def _comm_like_check(ranks: list[RankAnalysis]) -> IntegrityCheck:
    """Communication not recognised as such: compute kernels named like it, ranks with collectives and no communication."""
    like = {r.rank: r.facts.comm_like for r in ranks if r.facts.comm_like}
    blind = [
        r.rank for r in ranks if r.facts.comm_events == 0 and (r.facts.comm_like or r.facts.collective_ops) and (r.world_size or 2) > 1
    ]
    names = sorted({n for items in like.values() for n, _, _ in items})
    if blind:
        detail = (
            f"{rank_list(blind)} issued collectives ({sum(r.facts.collective_ops for r in ranks if r.rank in blind)} collective ops) "
            "but no event was recognised as communication" + (f"; compute kernels named like it: {listed(names, 3)}" if names else "")
        )
    elif like:
        detail = f"compute kernels named like communication on {rank_list(list(like))}: {listed(names, 3)}"
    else:
        detail = "no compute event is named like communication"
    return with_meaning(
        new_check(
            "classification.communication",
            status_of(bool(blind), bool(like)),
            detail,
            {
                "ranks_without_communication": blind,
                "comm_like_compute": {k: [{"name": n, "count": c, "total_us": round(t, 3)} for n, c, t in v] for k, v in like.items()},
                "collective_ops": {r.rank: r.facts.collective_ops for r in ranks},
                "comm_events": {r.rank: r.facts.comm_events for r in ranks},
            },
        ),
        "communication counted as compute: comm and overlap are wrong (a renamed NCCL kernel gives no communication at all)",
        OVERLAP,
        BANDWIDTH,
    )


def _sizes_check(ranks: list[RankAnalysis]) -> IntegrityCheck:
    """Collective calls of unknown size (traced without record_shapes)."""
    unknown: dict[int, dict[str, int]] = {}
    for r in ranks:
        inst = r.instances
        unsized = inst.nbytes < 0
        if not unsized.any():  # the usual case: no np.unique of nothing, per rank
            continue
        codes, first, count = np.unique(inst.kind[unsized], return_index=True, return_counts=True)
        if codes.size:  # per kind, in the order first met
            unknown[r.rank] = {inst.kinds[c]: n for _, c, n in sorted(zip(first.tolist(), codes.tolist(), count.tolist()))}
    total = sum(len(r.instances) for r in ranks)
    n_unknown = sum(sum(v.values()) for v in unknown.values())
    kinds = sorted({k for v in unknown.values() for k in v})
    return with_meaning(
        new_check(
            "classification.sizes",
            status_of(False, bool(unknown)),
            f"{n_unknown} of {total} collective call(s) of unknown size ({listed(kinds)}), on {rank_list(list(unknown))}"
            if unknown
            else f"every collective call's size is known ({total} calls)",
            {"unknown_size_calls": unknown, "calls": total},
        ),
        "calls of unknown size are left out of bytes and bandwidth (record_shapes=True records them)",
        BANDWIDTH,
    )


# ---------------------------------------------------------------- streams


def stream_checks(ranks: list[RankAnalysis]) -> list[IntegrityCheck]:
    gpu = [r for r in ranks if r.device == "cuda"]
    if not gpu:
        return [
            with_meaning(new_check(name, OK, "CPU traces: no GPU streams", {}), meaning, OVERLAP)
            for name, meaning in (
                ("streams.shared", "communication on a compute stream serialises with that compute: nothing can hide it"),
                ("streams.default_stream", "communication on the default stream serialises with the compute there"),
                ("streams.overlap", "kernels of one stream run one after another: an overlap there means wrong timestamps"),
            )
        ]
    shared = {r.rank: sorted(set(r.facts.comm_streams) & set(r.facts.compute_streams)) for r in gpu}
    shared = {k: v for k, v in shared.items() if v}
    streams = {r.rank: {"comm": list(r.facts.comm_streams), "compute": list(r.facts.compute_streams)} for r in gpu}
    first = next(iter(streams.values()))
    comm_on, compute_on = ", ".join(first["comm"]) or "-", ", ".join(first["compute"]) or "-"
    same = with_meaning(
        new_check(
            "streams.shared",
            status_of(False, bool(shared)),
            f"communication and compute kernels share stream(s) on {rank_list(list(shared))}: "
            + listed([f"rank {k}: stream {', '.join(v)}" for k, v in shared.items()], 3)
            if shared
            else f"communication on stream(s) {comm_on}, compute on {compute_on} (rank {gpu[0].rank})",
            {"streams": streams, "shared": shared},
        ),
        "communication on a compute stream serialises with that compute: nothing can hide it",
        OVERLAP,
    )
    on_default = {r.rank: r.facts.default_stream_comm for r in gpu if r.facts.default_stream_comm}
    default = with_meaning(
        new_check(
            "streams.default_stream",
            status_of(False, bool(on_default)),
            f"{sum(on_default.values())} communication kernel(s) on the default stream, on {rank_list(list(on_default))}"
            if on_default
            else "no communication kernel on the default stream",
            {"comm_kernels_on_default_stream": on_default},
        ),
        "communication on the default stream serialises with the compute there",
        OVERLAP,
    )
    bad = {r.rank: (r.facts.stream_overlaps, r.facts.stream_overlap_max_us) for r in gpu if r.facts.stream_overlaps}
    overlap = with_meaning(
        new_check(
            "streams.overlap",
            status_of(bool(bad), False),
            f"{sum(n for n, _ in bad.values())} kernel(s) start before the previous one on their stream ended "
            f"(up to {max(m for _, m in bad.values()):,.1f} µs), on {rank_list(list(bad))}"
            if bad
            else "kernels of each stream run one after another",
            {"overlapping_kernels": {k: n for k, (n, _) in bad.items()}, "max_overlap_us": {k: round(m, 3) for k, (_, m) in bad.items()}},
        ),
        "kernels of one stream run one after another: an overlap there means wrong timestamps or stream ids",
        OVERLAP,
    )
    return [same, default, overlap]


# ---------------------------------------------------------------- timing


def timing_checks(ranks: list[RankAnalysis]) -> list[IntegrityCheck]:
    return [_outside_steps(ranks), _start_gap(ranks), _durations(ranks), _cut_short(ranks)]


def _outside_steps(ranks: list[RankAnalysis]) -> IntegrityCheck:
    """timing.outside_steps: comm and compute outside every step, counted in the totals or not."""
    outside, counted_pct = {}, {}
    for r in ranks:
        f = r.facts
        if not r.steps:
            continue
        pct_comm = 100 * f.outside_comm_us / f.all_comm_us if f.all_comm_us > 0 else 0.0
        pct_compute = 100 * f.outside_compute_us / f.all_compute_us if f.all_compute_us > 0 else 0.0
        outside[r.rank] = {
            "comm_us": round(f.outside_comm_us, 3),
            "comm_pct": round(pct_comm, 2),
            "compute_us": round(f.outside_compute_us, 3),
            "compute_pct": round(pct_compute, 2),
            "counted": not f.in_steps,
        }
        if not f.in_steps:
            counted_pct[r.rank] = max(pct_comm, pct_compute)
    worst = max(counted_pct.values(), default=0.0)
    if counted_pct and worst > OUTSIDE_WARNING_PCT:
        rank = max(counted_pct, key=lambda k: counted_pct[k])
        o = outside[rank]
        detail = (
            f"up to {worst:.0f}% of a rank's counted time is outside every step (rank {rank}: "
            f"{o['comm_pct']:.0f}% of comm, {o['compute_pct']:.0f}% of compute); --steps measures inside the steps only"
        )
    elif outside:
        total = sum(o["comm_us"] + o["compute_us"] for o in outside.values())
        how = "not counted: measured inside the steps" if not counted_pct else "counted in the totals"
        detail = f"{total / 1000:,.1f} ms of comm and compute outside every step ({how})"
    else:
        detail = "no rank has steps"
    outside_check = with_meaning(
        new_check("timing.outside_steps", status_of(worst >= OUTSIDE_ERROR_PCT, worst > OUTSIDE_WARNING_PCT), detail, {"outside": outside}),
        "time outside the steps (profiler start, stragglers, trailing work) in the totals is not training-step time",
        OVERLAP,
    )
    return outside_check


def _start_gap(ranks: list[RankAnalysis]) -> IntegrityCheck:
    """timing.start_gap: from the profiler's start to the first step, against a median step."""
    gaps, long = {}, []
    for r in ranks:
        if not r.steps:
            continue
        gap = min(s.start_us for s in r.steps) - r.facts.first_event_us
        median = statistics.median(s.step_us for s in r.steps)
        gaps[r.rank] = {"gap_us": round(gap, 3), "median_step_us": round(median, 3), "counted": not r.facts.in_steps}
        if gap > median and not r.facts.in_steps:
            long.append(r.rank)
    most = max((g["gap_us"] for g in gaps.values()), default=0.0) / 1000
    if not gaps:
        detail = "no rank has steps"
    elif long:
        detail = f"{rank_list(long)} hold more than a median step before the first step (up to {most:,.1f} ms), counted in the totals"
    else:
        detail = f"profiler start to first step: at most {most:,.1f} ms"
    gap_check = with_meaning(
        new_check("timing.start_gap", status_of(False, bool(long)), detail, {"gaps": gaps}),
        "events between the profiler's start and the first step count in the totals (not in the per-step numbers)",
        OVERLAP,
    )
    return gap_check


def _durations(ranks: list[RankAnalysis]) -> IntegrityCheck:
    """timing.durations: comm and compute events of negative or zero length."""
    neg = {r.rank: r.facts.negative for r in ranks if r.facts.negative}
    zero = {r.rank: r.facts.zero for r in ranks if r.facts.zero}
    parts = [f"{sum(neg.values())} negative" if neg else "", f"{sum(zero.values())} zero" if zero else ""]
    durations = with_meaning(
        new_check(
            "timing.durations",
            status_of(bool(neg), bool(zero)),
            " and ".join(p for p in parts if p) + " duration(s) among comm and compute events"
            if neg or zero
            else "every duration is positive",
            {"negative": neg, "zero": zero},
        ),
        "an event of negative or zero length is a broken or lost record: it adds nothing to the unions",
        OVERLAP,
    )
    return durations


def _cut_short(ranks: list[RankAnalysis]) -> IntegrityCheck:
    """timing.cut_short: a last step under half of every other (a trace cut mid-step)."""
    cut = {}
    for r in ranks:
        if len(r.steps) >= 3:
            # Shorter than every other step by half: noise does not do that (on a busy machine one
            # step can take twice another, so a median would fire), a trace cut mid-step does.
            ordered = sorted(r.steps, key=lambda s: s.start_us)
            last, shortest = ordered[-1], min(s.step_us for s in ordered[:-1])
            if last.step_us < CUT_SHORT_RATIO * shortest:
                cut[r.rank] = {"step": last.step, "step_us": round(last.step_us, 3), "shortest_other_us": round(shortest, 3)}
    cut_check = with_meaning(
        new_check(
            "timing.cut_short",
            status_of(False, bool(cut)),
            "the last step is under half of every other step on " + listed([f"rank {k} (#{v['step']})" for k, v in cut.items()], 3)
            if cut
            else "no trace ends in the middle of a step",
            {"cut_short": cut},
        ),
        "a trace that ends mid-step lacks part of that step's work: its per-step numbers are incomplete",
        STEPS,
    )
    return cut_check
