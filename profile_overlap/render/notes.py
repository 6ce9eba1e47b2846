"""Notes a report adds because the numbers call for them: each rule reads the record, fires only
when its condition holds, and quotes the numbers that made it fire (linked to their definitions).

A rule returns None when it has nothing to say; the order of RULES is the order in the report
(the most consequential first).
"""

from __future__ import annotations

from profile_overlap.core.modes import SPEEDUP_BASELINE, SPEEDUP_MODE
from profile_overlap.record.metrics import ModeSummary, RunMetrics, StepTimes
from profile_overlap.record.summary import measured_interference, summary_of
from profile_overlap.render.document import Inline, Ref
from profile_overlap.render.modes import bytes_inline, expectation, hidden_inline
from profile_overlap.render.numbers import mib, ms, pct, times

# Thresholds, with the reason each is where it is.
GLOO_RS_AS_ALL_REDUCE = 0.7
"""reduce_scatter moves half an all_reduce's data; at 70% or more of the all_reduce's time per
call it is evidently doing the all_reduce's work (gloo's implementation)."""
EXPOSED_OVER_COMPUTE = 1.0
"""More exposed communication than the whole compute it could hide behind."""
COMPUTE_BOUND_PREDICTED = 1.1
"""Perfect overlap would gain less than 10%."""
WELL_HIDDEN_PCT = 80.0
STRAGGLER_WAIT_SHARE = 0.3
"""A rank waiting for 30% of its collective time is waiting on a peer, not moving data."""
NOISY_SPREAD = 0.2
"""p10-p90 wider than 20% of the median."""
SHORT_OF_IDEAL = 0.8
"""Measured speedup below 80% of the predicted ideal."""
INTERFERENCE_PCT = 10.0
"""Compute 10% or more slower beside communication than alone: a cost worth naming next to the yield."""


def notes(m: RunMetrics, s: dict[str, ModeSummary]) -> tuple[Inline, ...]:
    found = tuple(n for rule in RULES if (n := rule(m, s)) is not None)
    return found or (
        ("Nothing in the numbers calls for a note: verification passed, step times are steady, and no rank waited long for another.",),
    )


def failed_checks(m: RunMetrics, s: dict[str, ModeSummary]) -> Inline | None:
    bad = [c for c in m.all_checks() if not c.passed]
    if not bad:
        return None
    c = bad[0]
    differs = "has values that are " if c.max_abs_err is None else "differs by "
    return (
        f"Verification failed ({len(bad)} check{'s' if len(bad) > 1 else ''}): {c.name} {differs}",
        Ref(c.error_text, "max_abs_err"),
        " (",
        Ref(f"tolerance {c.tolerance:.3g}", "tolerance"),
        f") at rank {c.worst_rank}. Fix correctness before reading any timing.",
    )


def gloo_reduce_scatter(m: RunMetrics, s: dict[str, ModeSummary]) -> Inline | None:
    if m.env.backend != "gloo" or SPEEDUP_BASELINE not in s or SPEEDUP_MODE not in s:
        return None
    ar = _kind(s[SPEEDUP_BASELINE], "all_reduce")
    rs = _kind(s[SPEEDUP_MODE], "reduce_scatter")
    ag = _kind(s[SPEEDUP_MODE], "all_gather")
    if ar is None or rs is None:
        return None
    ratio = rs.time_per_call_us.mean / ar.time_per_call_us.mean
    if ratio < GLOO_RS_AS_ALL_REDUCE:
        return None
    text: list = [
        "On gloo, reduce_scatter runs as a full all_reduce: split's reduce_scatter took ",
        Ref(f"{ms(rs.time_per_call_us.mean / 1e3)} ms", "time_per_call_us"),
        " per call, ",
        f"{ratio:.0%} of sequential's all_reduce of the same bucket (",
        Ref(f"{ms(ar.time_per_call_us.mean / 1e3)} ms", "time_per_call_us"),
        ")",
    ]
    if ag is not None:
        text += [", and split then all_gathers on top (", Ref(f"{ms(ag.time_per_call_us.mean / 1e3)} ms", "time_per_call_us"), " per call)"]
    won = bool(m.speedup and m.speedup.measured > 1 and not summary_of(m).within_noise)
    text += [
        ". So split communicates more than sequential here ("
        if (s[SPEEDUP_MODE].comm_ms or 0) > (s[SPEEDUP_BASELINE].comm_ms or 0)
        else ". So split saves less communication time than its reduce_scatter's half-size data would suggest (",
        Ref(f"{ms(s[SPEEDUP_MODE].comm_ms)} ms", "comm_ms"),
        " vs ",
        Ref(f"{ms(s[SPEEDUP_BASELINE].comm_ms)} ms", "comm_ms"),
        " per step)",
        ", and won despite it, through overlap and Adam on a 1/N shard" if won else ", which overlap has to make up for on CPU",
        "; on NCCL, reduce_scatter moves half an all_reduce's data.",
    ]
    return tuple(text)


def exposed_dominates(m: RunMetrics, s: dict[str, ModeSummary]) -> Inline | None:
    x = s[summary_of(m).headline_mode]
    if x.exposed_comm_ms is None or not x.compute_ms or x.exposed_comm_ms / x.compute_ms < EXPOSED_OVER_COMPUTE:
        return None
    return (
        f"Exposed communication dominates {x.mode}: ",
        Ref(f"{ms(x.exposed_comm_ms)} ms", "exposed_comm_ms"),
        " per step waits for communication, ",
        f"{x.exposed_comm_ms / x.compute_ms:.1f}× the ",
        Ref(f"{ms(x.compute_ms)} ms", "compute_ms"),
        " of compute there is to hide it behind. Give the overlap more to work with: "
        f"more layers (more, smaller units, so the first collective starts sooner; now --layers {m.config.layers}) "
        f"or a larger batch (more forward compute per step; now --batch {m.config.batch}).",
    )


def compute_bound(m: RunMetrics, s: dict[str, ModeSummary]) -> Inline | None:
    if not m.speedup or m.speedup.predicted is None or m.speedup.predicted >= COMPUTE_BOUND_PREDICTED:
        return None
    seq = s[SPEEDUP_BASELINE]
    return (
        "The run is compute-bound: sequential spent ",
        Ref(f"{ms(seq.comm_ms)} ms", "comm_ms"),
        " per step communicating and ",
        Ref(f"{ms(seq.compute_ms)} ms", "compute_ms"),
        " computing, so even hiding all of its communication would gain at most ",
        Ref(times(m.speedup.predicted), "predicted_speedup"),
        ". Overlap cannot help much further; the split's remaining benefit is memory (1/N of the optimizer state).",
    )


def well_hidden(m: RunMetrics, s: dict[str, ModeSummary]) -> Inline | None:
    x = s.get(SPEEDUP_MODE)
    if x is None or x.overlap_pct is None or x.overlap_pct < WELL_HIDDEN_PCT:
        return None
    return (
        "The split hid ",
        Ref(f"{pct(x.overlap_pct)}%", "mode_overlap_pct"),
        " of its communication; only ",
        Ref(f"{ms(x.exposed_comm_ms)} ms", "exposed_comm_ms"),
        " per step is left exposed, so compute now sets the pace.",
    )


def short_of_ideal(m: RunMetrics, s: dict[str, ModeSummary]) -> Inline | None:
    sp = m.speedup
    if not sp or sp.predicted is None or sp.measured >= SHORT_OF_IDEAL * sp.predicted or sp.predicted < COMPUTE_BOUND_PREDICTED:
        return None
    split = s[SPEEDUP_MODE]
    return (
        "The measured speedup ",
        Ref(times(sp.measured), "speedup"),
        " falls short of the ideal ",
        Ref(times(sp.predicted), "predicted_speedup"),
        " that perfect overlap of sequential's communication would give: split hid ",
        *hidden_inline(split, " per step ("),
        ").",
    )


def stragglers(m: RunMetrics, s: dict[str, ModeSummary]) -> Inline | None:
    worst = None
    for name, mode in m.modes.items():
        ranks = {r.rank: r for r in mode.analysis.ranks} if mode.analysis else {}
        slow = s[name].slowest_rank
        if slow is None:
            continue
        for rank, share_pct in s[name].wait_share_pct:
            share = (share_pct or 0.0) / 100
            if share >= STRAGGLER_WAIT_SHARE and (worst is None or share > worst[0]):
                worst = (share, name, ranks[rank], slow)
    if worst is None:
        return None
    share, name, r, slow = worst
    analysis = m.modes[name].analysis
    slow_rank = analysis.rank(slow) if analysis else None
    late = slow_rank.last_arrival_pct if slow_rank else None  # absent from older records
    arrival: tuple = ("; it arrived last at ", Ref(f"{pct(late)}%", "last_arrival_pct"), " of the calls") if late is not None else ()
    other = analysis.rank(analysis.clock_slowest_rank) if analysis and analysis.clock_slowest_rank is not None else None
    if other is not None:  # the aligned clock names another rank: say so (definitions: clock_slowest_rank)
        at = Ref(f"{pct(other.last_arrival_pct)}%", "last_arrival_pct")
        arrival += (f", rank {other.rank} at ", at, ": the durations and the arrivals disagree")
    hosts = {x.rank: x.host for x in m.env.ranks}
    shared = m.env.num_nodes == 1 and m.env.device_type == "cpu"
    advice = (
        "All ranks share one CPU host here, so this is most likely the OS scheduling ranks unevenly, not a slow link."
        if shared
        else f"Look at what else runs on {hosts.get(slow, 'its host')}, and at its links."
    )
    return (
        f"Ranks wait for each other: in {name}, rank {r.rank} spent ",
        Ref(f"{pct(100 * share)}%", "wait_share_pct"),
        " of its collective time (",
        Ref(f"{ms((r.wait_us or 0.0) / 1e3)} ms", "wait_us"),
        ") waiting, mostly for rank ",
        str(slow),
        " (",
        Ref("the slowest rank", "slowest_rank"),
        *arrival,
        "). ",
        advice,
    )


def relative_spread(st: StepTimes) -> float | None:
    """(p90 − p10) / median of a timed mode; None without timed steps."""
    if not st.median_ms or st.p10_ms is None or st.p90_ms is None:
        return None
    return (st.p90_ms - st.p10_ms) / st.median_ms


def noisy_steps(m: RunMetrics, s: dict[str, ModeSummary]) -> Inline | None:
    spreads = {x.mode: sp for x in m.modes.values() if (sp := relative_spread(x.step_time)) is not None and sp > NOISY_SPREAD}
    if not spreads:
        return None
    x = m.modes[max(spreads, key=lambda mode: spreads[mode])]
    st = x.step_time
    tail = ""
    if m.speedup and summary_of(m).within_noise:
        tail = " That is why the verdict calls the two modes equal."
    return (
        f"Step times are noisy: {x.mode}'s p10–p90 spans ",
        Ref(f"{ms(st.p10_ms)} – {ms(st.p90_ms)} ms", "step_time_ms"),
        f", {spreads[x.mode]:.0%} of its median ",
        Ref(f"{ms(st.median_ms)} ms", "step_time_ms"),
        f". Differences smaller than that are not meaningful; use more --steps (now {m.config.steps}), --repeats 5 (intervals "
        "over blocks of steps, modes alternating) or a quieter machine.",
        tail,
    )


def interference(m: RunMetrics, s: dict[str, ModeSummary]) -> Inline | None:
    known = [row for row in measured_interference(summary_of(m).interference) if row[1] >= INTERFERENCE_PCT]
    if not known:
        return None
    lost, _, worst = max(known, key=lambda row: row[0])
    if m.env.backend == "gloo":
        why = (
            "On CPU, gloo runs each collective on worker threads that take cores from compute; fewer ranks per host than "
            "cores leaves them room."
        )
    else:
        why = "Communication kernels share the GPU's SMs and memory bandwidth with compute while they overlap."
    return (
        f"Overlap slows compute down: split's {worst.phase} compute took ",
        Ref(f"{ms(worst.compute_ms)} ms", "phase_compute_ms"),
        " per step beside communication against ",
        Ref(f"{ms(worst.baseline_compute_ms)} ms", "phase_compute_ms"),
        " alone in split-blocking (",
        Ref(f"{worst.pct:+.1f}%", "interference_pct"),
        f" interference), {ms(lost)} ms per step that overlapping gives back. ",
        why,
    )


def bytes_mismatch(m: RunMetrics, s: dict[str, ModeSummary]) -> Inline | None:
    """A mode whose collectives did not move the model's parameter bytes as its algorithm says."""
    bad = [(x.mode, c) for x in s.values() for c in x.bytes_checks if c.matches is False]
    if not bad:
        return None
    text: list = ["Collective bytes do not add up: per profiled step, with P the model's parameter bytes, "]
    for i, (mode, c) in enumerate(bad):
        text += ["; " if i else "", *bytes_inline(mode, [c])]
        text.append(f", where {c.expected:.0f}× was expected ({expectation(m, mode, c)})")
    why = []
    if any(c.ratio is not None and c.ratio < c.expected for _, c in bad):
        why.append(" Below it: some of those collectives ran outside the profiled steps' windows or in another phase, or never ran.")
    if any(c.ratio is not None and c.ratio > c.expected for _, c in bad):
        why.append(" Above it: extra collectives, or more padding than a multiple of the world size explains.")
    return (*text, ".", *why, " The bytes table under Communication by phase has every row.")


def bytes_match(m: RunMetrics, s: dict[str, ModeSummary]) -> Inline | None:
    """Every checked row moved the parameter bytes its algorithm says: the attribution and sizes hold up."""
    rows = [(x.mode, c) for x in s.values() for c in x.bytes_checks if c.matches is not None]
    if not rows or any(not c.matches for _, c in rows):
        return None
    param_bytes = next(m.modes[mode].model_param_bytes for mode, _ in rows)
    by_mode: dict[str, list] = {}
    for mode, c in rows:
        by_mode.setdefault(mode, []).append(c)
    text: list = ["Collective bytes add up: per profiled step, "]
    for i, (mode, checks) in enumerate(by_mode.items()):
        text += ["; " if i else "", *bytes_inline(mode, checks)]
        if any(c.expected == 0 for c in checks):
            text.append(" (not resharded after forward)")
    return (
        *text,
        ", where P = ",
        Ref(f"{mib(param_bytes)} MiB", "model_param_bytes"),
        " is the model's parameter bytes: every collective moved what its algorithm says.",
    )


def _kind(x: ModeSummary, kind: str):
    return next((c for c in x.collectives if c.kind == kind), None)


RULES = (
    failed_checks,
    bytes_mismatch,
    gloo_reduce_scatter,
    compute_bound,
    exposed_dominates,
    short_of_ideal,
    well_hidden,
    interference,
    stragglers,
    noisy_steps,
    bytes_match,
)
