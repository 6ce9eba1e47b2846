"""The integrity checks, rendered: compact console lines, the report's Integrity section and the
verdict's sentence on numbers that rest on a failed check. Reads the record's checks
(record/integrity.py); computes nothing."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rich.console import Console

from profile_overlap.record.integrity import IntegrityCheck, IntegrityRecord
from profile_overlap.record.metrics import RunMetrics
from profile_overlap.render.document import Inline, Paragraph, Ref, Section, Table


def console_lines(checks: Sequence[IntegrityCheck], *, prefix: str = "integrity") -> list[str]:
    """One line per check that is not ok (errors first), or one line saying all are ok."""
    bad = [c for c in checks if c.status == "error"] + [c for c in checks if c.status == "warning"]
    if not checks:
        return []
    if not bad:
        return [f"{prefix}: {len(checks)} checks ok"]
    ok = len(checks) - len(bad)
    lines = [f"{prefix}: {c.status.upper()} {c.name}: {c.detail}" for c in bad]
    return lines + [f"{prefix}: {ok} other checks ok"] if ok else lines


def section_blocks(all_records: Mapping[str, IntegrityRecord | None]) -> tuple:
    """A table of every check's status per mode (or job), then what each check that is not ok
    found and what it means for the numbers."""
    records = {mode: r for mode, r in all_records.items() if r is not None}
    if not records:
        return (Paragraph(("This record predates the integrity checks: analyze the traces again to get them.",)),)
    names = list(dict.fromkeys(c.name for r in records.values() for c in r.checks))
    status = {mode: {c.name: c.status for c in r.checks} for mode, r in records.items()}
    rows = tuple(((Ref(name, name),), *((status[mode].get(name, "–"),) for mode in records)) for name in names)
    highlight = frozenset(i for i, name in enumerate(names) if any(status[m].get(name) == "error" for m in records))
    table = Table(
        header=(("check",), *((mode,) for mode in records)),
        rows=rows,
        numeric=(False,) * (1 + len(records)),
        caption=("Each check is ok, warning or error; the Metrics section defines every check and its thresholds.",),
        highlight=highlight,
    )
    found = [(mode, c) for mode, r in records.items() for c in r.failed]
    blocks: list = [table]
    if found:
        label = len(records) > 1
        blocks.append(
            Table(
                header=(("check",), ("status",), ("found",), ("what it means",)),
                rows=tuple(((f"{mode}: {c.name}" if label else c.name,), (c.status,), (c.detail,), (c.meaning,)) for mode, c in found),
                numeric=(False, False, False, False),
                highlight=frozenset(i for i, (_, c) in enumerate(found) if c.status == "error"),
            )
        )
    else:
        blocks.append(Paragraph((f"All {len(names)} checks are ok.",), tone="ok"))
    offsets = {mode: r.clock_offsets_us for mode, r in records.items() if len(r.clock_offsets_us) > 1}
    for mode, off in offsets.items():
        unc = records[mode].clock_uncertainty_us
        moved = records[mode].clock_moved
        text = ", ".join(f"rank {k}: {_us(v)} ± {_us(unc.get(k))}{' (moved)' if int(k) in moved else ''}" for k, v in off.items())
        rule = (
            "Only offsets larger than their uncertainty move a rank's times in the cross-rank views (marked moved)."
            if moved
            else "Every offset lies within its uncertainty, so no rank's times are moved: "
            "the ranks' clocks agree as far as the calls can tell."
        )
        blocks.append(Paragraph((f"Clock offsets against the reference rank{f' ({mode})' if len(offsets) > 1 else ''}: {text}. {rule}",)))
    return tuple(blocks)


def _us(x: float | None) -> str:
    return "?" if x is None else f"{x:,.1f} µs"


def verdict_note(records: Mapping[str, IntegrityRecord | None]) -> Inline:
    """A sentence naming the numbers that rest on a failed (error) check, or () when none does."""
    failed = [(mode, c) for mode, r in records.items() if r is not None for c in r.with_status("error")]
    if not failed:
        return ()
    label = len(records) > 1
    parts = [
        f"the {', '.join(c.affects) or 'numbers'}{f' of {mode}' if label else ''} rest on the failed check {c.name} ({c.detail})"
        for mode, c in failed
    ]
    return ("Integrity: " + "; ".join(parts) + ". See ", Ref("Integrity", "integrity"), ".")


def records_of(metrics: RunMetrics) -> dict[str, IntegrityRecord | None]:
    """Each mode's integrity (a job has one mode), from the record's `analysis`."""
    return {mode: mm.analysis.integrity if mm.analysis and mm.analysis.integrity else None for mode, mm in metrics.modes.items()}


def with_section(sections: tuple, metrics: RunMetrics) -> tuple:
    """The report's sections with an Integrity section before the Notes; unchanged for records
    written before the checks existed."""
    records = records_of(metrics)
    if not any(records.values()):
        return sections
    section = Section("integrity", "Integrity", section_blocks(records))
    at = next((i for i, s in enumerate(sections) if s.id == "notes"), len(sections))
    return (*sections[:at], section, *sections[at:])


def verdict_paragraphs(metrics: RunMetrics) -> tuple:
    """The verdict's paragraph on numbers that rest on a failed check (none when all passed)."""
    note = verdict_note(records_of(metrics))
    return (Paragraph(note, tone="warning"),) if note else ()


def print_console(metrics: RunMetrics, console: Console) -> None:
    """The run's console lines: per mode, the checks that are not ok, or that all are ok."""
    records = records_of(metrics)
    for mode, record in records.items():
        if record is not None:
            for line in console_lines(record.checks, prefix=f"integrity ({mode})" if len(records) > 1 else "integrity"):
                style = "red" if ": ERROR " in line else "yellow" if ": WARNING " in line else ""
                console.print(line, style=style, markup=False, highlight=False)
