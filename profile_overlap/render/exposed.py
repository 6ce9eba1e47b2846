"""Why communication is exposed, rendered: the console block per mode, the report's section "Where
the exposed time goes" and the verdict's sentence on the largest cause. Reads record/exposed.py's
typed record (each mode's `exposed`) and formats it; nothing is computed here."""

from __future__ import annotations

from profile_overlap.record.exposed import Exposed, ExposedCall, Straggler
from profile_overlap.record.metrics import RunMetrics
from profile_overlap.render.document import Inline, Paragraph, Ref, Section, Table
from profile_overlap.render.numbers import gbps, mib, ms, pct

CONSOLE_CALLS = 3
"""Calls the console names per mode."""
WHAT_TEXT = {"compute": "compute", "idle": "idle time (no compute, no communication)", "exposed comm": "own exposed communication"}


WAIT_BY_DURATION = "a call that runs on after its peers' calls have ended counts as wait on that rank"
"""Why the durations' slowest_rank and the aligned clock can name different ranks (definitions:
`clock_slowest_rank`): the console and the report say it where clock_slowest_rank is set."""


def _ms(us: float | None) -> str:
    return "–" if us is None else ms(us / 1e3)


def call_name(call: ExposedCall) -> str:
    """`reduce_scatter #3 in backward`: the call's kind, index in the step and phase."""
    return f"{call.kind} #{call.call} in {call.phase}"


def slack_text(call: ExposedCall) -> str:
    if call.slack_us is None:
        return "slack unknown"
    if call.slack_us == 0:
        return "waited at once: no bandwidth hides it"
    needed = f", hidden at {gbps(call.required_gbps)} GB/s bus bandwidth" if call.required_gbps is not None else ""
    return f"slack {_ms(call.slack_us)} ms{needed}"


def straggler_sentence(s: Straggler) -> str:
    # extra_pct is of the peers' whole time in the phase, not of their time in `what` (definitions: `extra_pct`).
    more = f" (+{pct(s.extra_pct)}% of the peers' time in {s.phase})" if s.extra_pct is not None else ""
    return (
        f"rank {s.rank} arrives late: its {WHAT_TEXT.get(s.what, s.what)} in {s.phase} ran {ms(s.extra_ms)} ms longer "
        f"per step than its peers' median{more}"
    )


def split_text(e: Exposed) -> str:
    """`80.3 ms exposed = 20.1 ms wait (25.0%) + 60.2 ms transfer (75.0%)`, or exposed alone."""
    if e.wait_us is None:
        return f"{_ms(e.exposed_us)} ms exposed (wait and transfer need every rank's trace)"
    return (
        f"{_ms(e.exposed_us)} ms exposed = {_ms(e.wait_us)} ms wait ({pct(e.wait_pct)}%) "
        f"+ {_ms(e.transfer_us)} ms transfer ({pct(e.transfer_pct)}%)"
    )


def console_lines(mode: str, e: Exposed) -> list[str]:
    """One mode's block: the split, the three largest calls, the straggler sentence."""
    lines = [f"why exposed, {mode} (summed over ranks and profiled steps): {split_text(e)}"]
    for call in e.top[:CONSOLE_CALLS]:
        parts = [f"{_ms(call.exposed_us)} ms"]
        if call.wait_us is not None:
            parts.append(f"{_ms(call.wait_us)} wait + {_ms(call.transfer_us)} transfer")
        if call.late_rank is not None:
            parts.append(f"late rank {call.late_rank}")
        parts.append(slack_text(call))
        lines.append(f"  {call_name(call)}: " + "; ".join(parts))
    if e.stragglers:
        lines.append("  " + straggler_sentence(e.stragglers[0]))
    return lines


def run_console_lines(metrics: RunMetrics) -> list[str]:
    """Every profiled mode's block, in the run's order."""
    return [line for name, m in metrics.modes.items() if (e := m.exposed) is not None for line in console_lines(name, e)]


def largest_cause(mode: str, e: Exposed) -> Inline | None:
    """The verdict's sentence: the larger of wait and transfer, and what stands behind it."""
    if not e.top or e.wait_us is None:
        return None
    if e.transfer_us is not None and e.wait_us > e.transfer_us and e.stragglers:
        why = straggler_sentence(e.stragglers[0])
        return (f"The largest cause of exposed communication in {mode} is ", Ref("wait", "exposed_us"), f" ({pct(e.wait_pct)}%): {why}.")
    top = e.top[0]
    return (
        f"The largest cause of exposed communication in {mode} is ",
        Ref("transfer", "exposed_us"),
        f" ({pct(e.transfer_pct)}%); the call exposing most is {call_name(top)} ({_ms(top.exposed_us)} ms; {slack_text(top)}).",
    )


def verdict_paragraphs(metrics: RunMetrics) -> tuple[Paragraph, ...]:
    """The largest cause, for the mode with the most exposed time."""
    found = [(name, e) for name, m in metrics.modes.items() if (e := m.exposed) is not None and e.top]
    if not found:
        return ()
    name, e = max(found, key=lambda x: x[1].exposed_us)
    sentence = largest_cause(name, e)
    return (Paragraph(sentence),) if sentence else ()


def calls_table(e: Exposed) -> Table:
    header = (
        ("call",),
        ("MiB",),
        (Ref("exposed ms", "exposed_us"),),
        (Ref("wait ms", "exposed_us"),),
        (Ref("transfer ms", "exposed_us"),),
        (Ref("slack ms", "slack_us"),),
        (Ref("required GB/s", "required_gbps"),),
        (Ref("late rank", "late_rank"),),
    )
    rows = tuple(
        (
            (call_name(c),),
            (mib(c.bytes),),
            (_ms(c.exposed_us),),
            (_ms(c.wait_us),),
            (_ms(c.transfer_us),),
            (_ms(c.slack_us),),
            ("waited at once" if c.slack_us == 0 else gbps(c.required_gbps),),
            ("–" if c.late_rank is None else str(c.late_rank),),
        )
        for c in e.top
    )
    caption = ("Summed over ranks and profiled steps; a call that recurs every step is one row (kind, index in the step, phase).",)
    return Table(header=header, rows=rows, numeric=(False, True, True, True, True, True, True, True), caption=caption)


def mode_blocks(mode: str, e: Exposed) -> list:
    blocks: list = [Paragraph((f"{mode}: {split_text(e)} (", Ref("definitions", "exposed_us"), ")."))]
    if e.top:
        blocks.append(calls_table(e))
    for s in e.stragglers:
        blocks.append(Paragraph((Ref("Straggler", "stragglers"), f": {straggler_sentence(s)}.")))
    path = e.critical_path
    if path is not None:
        blocks.append(
            Paragraph(
                (
                    Ref("Critical path", "critical_path"),
                    f" of the median profiled step: {_ms(path.length_us)} ms, {pct(path.compute_pct)}% compute, "
                    f"{pct(path.transfer_pct)}% transfer, {pct(path.wait_pct)}% wait (the rest idle), through rank(s) "
                    + " → ".join(str(r) for r in path.ranks)
                    + ".",
                )
            )
        )
    return blocks


def report_sections(metrics: RunMetrics) -> tuple[Section, ...]:
    """The report section "Where the exposed time goes", every profiled mode; none for records
    written before the causes (or without profiling)."""
    blocks = [b for name, m in metrics.modes.items() if (e := m.exposed) is not None for b in mode_blocks(name, e)]
    return (Section("exposed", "Where the exposed time goes", tuple(blocks)),) if blocks else ()
