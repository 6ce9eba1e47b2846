"""Renderers of the `advise` record (record/advice.py): console lines, the report's "What to change"
section and TensorBoard's text. They format the record's fields; nothing is recomputed."""

from __future__ import annotations

from pathlib import Path

from profile_overlap.record.advice import NOTHING, SHOWN, Advice, AdviceItem, load_advice
from profile_overlap.record.interference_used import NONE, source_text
from profile_overlap.render.document import Code, Items, Paragraph, Section, Table
from profile_overlap.render.numbers import ms


def _gain(i: AdviceItem) -> str:
    if i.predicted_gain_ms is None:
        return "–"
    if i.gain_low_ms is None:
        return ms(i.predicted_gain_ms)
    return f"{ms(i.predicted_gain_ms)} [{ms(i.gain_low_ms)}, {ms(i.gain_high_ms)}]"


def _verdict(i: AdviceItem) -> str:
    """Why an item with a predicted gain is not advised (`advice_worth_it`): the change is predicted
    slower, or its gain is within the noise of the step time; "" for one worth making, and for a
    bandwidth bound, which is what the link costs, not a change."""
    if i.predicted_gain_ms is None or i.worth_it or i.kind in (NOTHING, "bandwidth"):
        return ""
    return " (slower: not advised)" if i.predicted_gain_ms < 0 else " (within the noise: not advised)"


def _how(i: AdviceItem) -> str:
    return i.flag or i.code or "–"


def measured_text(i: AdviceItem) -> str:
    v = i.verification
    if v is None:
        return "not verified" if i.verifiable else "–"
    word = "hit" if v.hit else "miss"
    if v.predicted_here_ms is not None:  # the prediction quoted on the verification's own original blocks
        word += f": {ms(v.predicted_here_ms)} predicted on its {ms(v.baseline_ms)} step"
    return f"{ms(v.measured_gain_ms)} [{ms(v.gain_low_ms)}, {ms(v.gain_high_ms)}] ({word}, {v.repeats} blocks)"


def _charged_none(i: AdviceItem) -> bool:
    """A replayed item whose every phase charged no measured interference (source NONE)."""
    return i.interference is not None and all(u.source == NONE for u in i.interference)


def interference_text(i: AdviceItem) -> str:
    """The interference an item's replay charged, per phase with its source; "–" for items not replayed."""
    if i.interference is None:
        return "–"
    if _charged_none(i):
        return "none measured (0% charged)"
    known = [u for u in i.interference if u.source != NONE]
    parts = []
    for u in known:
        interval = f" [{u.low_pct:+.1f}, {u.high_pct:+.1f}]" if u.low_pct is not None and u.high_pct is not None else ""
        pairs = f", {u.pairs} pairs" if u.pairs is not None else ""
        charged = " (0% charged)" if u.slowdown_pct < 0 else ""
        parts.append(f"{u.phase} {u.slowdown_pct:+.1f}%{interval} ({source_text(u)}{pairs}){charged}")
    return ", ".join(parts)


def item_line(n: int, i: AdviceItem) -> str:
    if i.kind == NOTHING:
        return f"{n}. {i.change}"
    gain = "" if i.predicted_gain_ms is None else f"; predicted gain {_gain(i)} ms per step"
    gain += _verdict(i)
    if i.interference is not None:
        gain += f"; interference assumed: {interference_text(i)}"
    step = "" if i.predicted_ms is None else f" ({ms(i.baseline_ms)} -> {ms(i.predicted_ms)} ms)"
    how = f"; apply: {_how(i)}" if _how(i) != "–" else ""
    done = "" if i.verification is None else f"; measured {measured_text(i)}"
    return f"{n}. [{i.mode}] {i.change}{gain}{step}{how}{done} (cause: {i.cause})"


def lines(a: Advice, *, limit: int | None = SHOWN) -> list[str]:
    shown = a.items if limit is None else a.items[:limit]
    out = [item_line(n, i) for n, i in enumerate(shown, 1)]
    if limit is not None and len(a.items) > limit:
        out.append(f"... {len(a.items) - limit} more in {Path(a.source) / 'advice.json'}")
    hits, done = a.hits
    if done:
        out.append(f"verified: {hits} of {done} predictions inside the measured 95% interval")
    return out + [f"note: {note}" for note in a.notes]


def print_advice(a: Advice, console, *, limit: int | None = SHOWN) -> None:
    console.print(f"What to change in {a.source} (ranked by predicted gain; ms per step, 95% intervals in brackets):")
    for line in lines(a, limit=limit):
        console.print(line, markup=False, highlight=False)


def tensorboard_text(a: Advice) -> str:
    """Markdown for TensorBoard's text tab: every item."""
    return "\n".join(f"- {line}" for line in lines(a, limit=None))


def report_sections(run_dir: Path) -> tuple[Section, ...]:
    """The report's "What to change" section: the top items, once `advise` has stored its record."""
    a = load_advice(run_dir)
    if a is None:
        return ()
    rows = tuple(
        ((str(n),), (i.mode,), (i.change,), (i.cause,), (_gain(i) + _verdict(i),), (ms(i.predicted_ms),), (_how(i),), (measured_text(i),))
        for n, i in enumerate(a.items[:SHOWN], 1)
    )
    table = Table(
        header=(
            ("#",),
            ("mode",),
            ("change",),
            ("cause",),
            ("predicted gain ms",),
            ("predicted step ms",),
            ("apply",),
            ("measured gain ms",),
        ),
        rows=rows,
        numeric=(True, False, False, False, True, True, False, False),
        caption=(
            "Predicted by the whatif replay; intervals are 95%; measured: `advise --verify`, alternating blocks against the run as it was.",
        ),
    )
    blocks: list = [table]
    if a.is_job:
        blocks.append(
            Paragraph(
                ("This is a job: its advice is not verified here. To try an item, change the code line, rerun the job, and compare:",)
            )
        )
        blocks.append(Code(f"python -m profile_overlap report --compare {a.source} <the new job's folder>"))
    elif not any(i.verification for i in a.items):
        # Where the top item's replay charged nothing for the overlap it buys, measure that first (docs/advise.md).
        top = next((i for i in a.items if i.verifiable), None)
        calibrate = top is not None and _charged_none(top)
        what = "the interference the top item would pay, then the item" if calibrate else "the top item"
        blocks.append(Paragraph((f"To measure {what} against this run:",)))
        blocks.append(Code(f"python -m profile_overlap advise {a.source}{' --calibrate' if calibrate else ''} --verify --repeats 5"))
    hits, done = a.hits
    if done:
        blocks.append(Paragraph((f"{hits} of {done} verified predictions lie inside the measured 95% interval.",)))
    if a.notes:
        blocks.append(Items(tuple((n,) for n in a.notes)))
    return (Section("advice", "What to change", tuple(blocks)),)
