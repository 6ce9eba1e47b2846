"""The notes of a record of traces alone (a job, a bare folder: RunMetrics.job): rules as in
render/notes.py, on the same thresholds, worded for a job we only traced."""

from __future__ import annotations

from collections.abc import Callable

from profile_overlap.record.metrics import JobFacts, ModeSummary, RunMetrics
from profile_overlap.record.summary import summary_of
from profile_overlap.render.document import Inline, Ref
from profile_overlap.render.notes import EXPOSED_OVER_COMPUTE, NOISY_SPREAD, WELL_HIDDEN_PCT, stragglers
from profile_overlap.render.numbers import ms, pct
from profile_overlap.render.report_job import missing_text


def _mode(m: RunMetrics) -> ModeSummary:
    return next(iter(summary_of(m).modes.values()))


def missing_ranks(m: RunMetrics, job: JobFacts) -> Inline | None:
    return (missing_text(m, job),) if job.missing_ranks else None


def dropped_traces(m: RunMetrics, job: JobFacts) -> Inline | None:
    n = job.dropped_traces
    if not n:
        return None
    return (
        f"{n} trace{'s were' if n > 1 else ' was'} dropped while being written (most likely the disk was full); the "
        "job went on, and those cycles are not in these numbers.",
    )


def exposed_or_hidden(m: RunMetrics, job: JobFacts) -> Inline | None:
    x = _mode(m)
    if x.exposed_comm_ms and x.compute_ms and x.exposed_comm_ms / x.compute_ms >= EXPOSED_OVER_COMPUTE:
        return (
            "Exposed communication dominates: ",
            Ref(f"{ms(x.exposed_comm_ms)} ms", "exposed_comm_ms"),
            f" per step waits for communication, {x.exposed_comm_ms / x.compute_ms:.1f}× the ",
            Ref(f"{ms(x.compute_ms)} ms", "compute_ms"),
            " of compute there is to hide it behind: more work per rank and step (a larger batch), or smaller buckets "
            "or units so that the first collective starts sooner, give the overlap more to work with.",
        )
    if x.overlap_pct is not None and x.overlap_pct >= WELL_HIDDEN_PCT:
        return ("The job hid ", Ref(f"{pct(x.overlap_pct)}%", "mode_overlap_pct"), " of its communication: compute sets the pace.")
    return None


def waiting_ranks(m: RunMetrics, job: JobFacts) -> Inline | None:
    return stragglers(m, summary_of(m).modes)


def noisy_steps(m: RunMetrics, job: JobFacts) -> Inline | None:
    st = next(iter(m.modes.values())).step_time
    if not st.median_ms or len(st.times_ms) <= 2 or st.p10_ms is None or st.p90_ms is None:
        return None
    spread = (st.p90_ms - st.p10_ms) / st.median_ms
    if spread <= NOISY_SPREAD:
        return None
    return (
        f"Profiled step times are noisy: their p10–p90 spans {ms(st.p10_ms)} – {ms(st.p90_ms)} ms, "
        f"{spread:.0%} of the median; profile more steps (active, repeat) before reading small differences.",
    )


RULES: tuple[Callable[[RunMetrics, JobFacts], Inline | None], ...] = (
    missing_ranks,
    dropped_traces,
    exposed_or_hidden,
    waiting_ranks,
    noisy_steps,
)
"""In the report's order."""


def notes(m: RunMetrics, job: JobFacts) -> tuple[Inline, ...]:
    found = tuple(n for rule in RULES if (n := rule(m, job)) is not None)
    return found or (("Nothing in the numbers calls for a note.",),)
