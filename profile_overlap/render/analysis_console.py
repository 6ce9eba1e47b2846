"""The console of `analyze DIR`: per rank, the collectives, the cross-rank wait/transfer split and
the integrity checks that are not ok. Above PER_RANK_UP_TO ranks (unless --per-rank) the per-rank
tables give way to each number's spread over the ranks (record/spread.py), and one line says where
the full tables are. The per-step rows print only with --per-step (a long trace has thousands of
steps; --json OUT writes them to OUT.steps.csv): otherwise one line counts the steps and says where
they are. It reads the analysis record (record/analysis.py) and, beside it, the few facts the
record's JSON does not hold (ConsoleFacts: each rank's record unrounded, its notes, matched calls
and group sizes, --hta-compat). Nothing is recomputed here."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table

from profile_overlap.render import dimensions
from profile_overlap.render.exposed import WAIT_BY_DURATION
from profile_overlap.render.exposed import console_lines as exposed_lines
from profile_overlap.render.integrity import console_lines as integrity_lines
from profile_overlap.render.interference import line as interference_line
from profile_overlap.render.numbers import grouped, nbytes

if TYPE_CHECKING:
    from rich.console import Console

    from profile_overlap.record.analysis import AnalysisRecord, ConsoleFacts

PER_RANK_UP_TO = 8
"""Ranks up to which the full per-rank tables print without --per-rank (they fit a screen)."""
OUTLIERS_SHOWN = 6


def render(
    record: AnalysisRecord,
    console: Console,
    *,
    facts: ConsoleFacts,
    per_rank: bool = False,
    per_step: bool = False,
    tables: str = "",
    steps_csv: str = "",
) -> None:
    """Tables from the analysis record and its console facts; nothing is recomputed here. `tables`
    says where the full tables are (for the summary's last line), `steps_csv` where the per-step rows are written."""
    if not per_rank and len(record.ranks) > PER_RANK_UP_TO:
        console.print(spread_table(record, facts))
        where = tables or "pass --per-rank to print them, or --json OUT to write them to OUT.ranks.csv and OUT.steps.csv"
        console.print(f"Full per-rank, per-step and collective tables: {where}", markup=False, soft_wrap=True)
        _interference(record, console)
        if per_step:
            print_steps(facts, console)
        print_notes(record, facts, console, grouped=True)
        return
    console.print(rank_table(record, facts))
    console.print(collectives_table(facts))
    if per_step:
        print_steps(facts, console)
    else:
        console.print(steps_line(record, steps_csv), markup=False, soft_wrap=True)
    _interference(record, console)
    for table in dimensions.console_tables(record):
        console.print(table)
    if line := dimensions.console_verdict(record):
        console.print(line, markup=False, soft_wrap=True)
    print_notes(record, facts, console)


def print_steps(facts: ConsoleFacts, console: Console) -> None:
    steps = step_table(facts)
    if steps.row_count:
        console.print(steps)
    else:
        console.print(NO_STEPS)


NO_STEPS = "No ProfilerStep#N annotations: per-step metrics need prof.step() in the training loop."


def steps_line(record: AnalysisRecord, steps_csv: str = "") -> str:
    """The profiled steps counted, in place of their rows: how many, which, and where the rows are."""
    counts = sorted({len(r.steps) for r in record.ranks})
    if counts == [0]:
        return NO_STEPS
    numbers = [s.step for r in record.ranks for s in r.steps[:1] + r.steps[-1:]]
    many = f"{counts[0]:,}" if len(counts) == 1 else f"{counts[0]:,} to {counts[-1]:,}"
    where = (
        f"in {steps_csv}, or pass --per-step"
        if steps_csv
        else "pass --per-step to print them, or --json OUT to write them to OUT.steps.csv"
    )
    return f"Profiler steps: {many} per rank (ProfilerStep#{min(numbers)} to #{max(numbers)}); per-step rows: {where}"


def _interference(record: AnalysisRecord, console: Console) -> None:
    text = interference_line(record.interference)
    if text:
        console.print(text, markup=False, soft_wrap=True)


def rank_table(record: AnalysisRecord, facts: ConsoleFacts) -> Table:
    title = f"Overlap per rank: {record.source} (world size {record.world_size})"
    if facts.hta_compat:
        title += ", HTA-compatible (last step dropped)"
    t = Table(title=title, title_justify="left")
    for col in ("rank", "device", "comm_us", "compute_us", "overlap_us", "exposed_comm_us", "overlap %", "wait_us", "transfer_us"):
        t.add_column(col, justify="left" if col == "device" else "right")
    for rank in facts.ranks:
        r = rank.record
        mark = " (slowest)" if r.rank == record.slowest_rank else ""
        t.add_row(
            f"{r.rank}{mark}",
            r.device,
            grouped(r.comm_us),
            grouped(r.compute_us),
            grouped(r.overlap_us),
            grouped(r.exposed_comm_us),
            grouped(r.overlap_pct, 2),
            grouped(r.wait_us if rank.matched else None),
            grouped(r.transfer_us if rank.matched else None),
        )
    return t


def collectives_table(facts: ConsoleFacts) -> Table:
    t = Table(title="Collectives per rank (totals; algbw = S/t, busbw = algbw * factor(kind, n), as nccl-tests)", title_justify="left")
    for col in ("rank", "kind", "count", "n", "bytes", "dur_us", "algbw GB/s", "busbw GB/s"):
        t.add_column(col, justify="left" if col == "kind" else "right")
    for rank in facts.ranks:
        r = rank.record
        for c in r.collectives:
            t.add_row(
                str(r.rank),
                c.kind,
                str(c.count),
                str(rank.group_size[c.kind] or "-"),
                nbytes(c.nbytes),
                grouped(c.dur_us),
                grouped(c.algbw_gbps, 2),
                grouped(c.busbw_gbps, 2),
            )
    return t


def step_table(facts: ConsoleFacts) -> Table:
    t = Table(title="Profiler steps (each metric clipped to the ProfilerStep#N window)", title_justify="left")
    for col in ("rank", "step", "step_us", "comm_us", "compute_us", "overlap_us", "exposed_comm_us", "overlap %"):
        t.add_column(col, justify="right")
    for r in (rank.record for rank in facts.ranks):
        for s in r.steps:
            t.add_row(
                str(r.rank),
                str(s.step),
                grouped(s.step_us),
                grouped(s.comm_us),
                grouped(s.compute_us),
                grouped(s.overlap_us),
                grouped(s.exposed_comm_us),
                grouped(s.overlap_pct, 2),
            )
    return t


def _ranks(ranks: tuple[int, ...] | list[int], shown: int) -> str:
    text = ", ".join(map(str, ranks[:shown]))
    return text + (f" and {len(ranks) - shown} more" if len(ranks) > shown else "")


def spread_table(record: AnalysisRecord, facts: ConsoleFacts) -> Table:
    """Each per-rank number over the ranks: distribution, worst and best ranks, outliers (rule in Metrics)."""
    title = f"Overlap over {len(record.ranks):,} ranks: {record.source} (world size {record.world_size}; µs, overlap in %)"
    if facts.hta_compat:
        title += ", HTA-compatible (last step dropped)"
    t = Table(title=title, title_justify="left")
    for col in ("per rank", "min", "p10", "median", "p90", "max", "worst ranks", "best ranks", "outliers"):
        t.add_column(col, justify="left" if col in ("per rank", "outliers") else "right")
    for s in record.spread:
        digits = 2 if s.metric == "overlap_pct" else 0
        name = "overlap %" if s.metric == "overlap_pct" else s.metric
        t.add_row(
            name,
            *(grouped(x, digits) for x in (s.min, s.p10, s.median, s.p90, s.max)),
            ", ".join(map(str, s.worst)) or "all equal",
            ", ".join(map(str, s.best)) or "all equal",
            f"{len(s.outliers)}: {_ranks(s.outliers, OUTLIERS_SHOWN)}" if s.outliers else "0",
        )
    return t


def print_notes(record: AnalysisRecord, facts: ConsoleFacts, console: Console, *, grouped: bool = False) -> None:
    """The wait/transfer sentence, each rank's notes and the integrity checks that are not ok."""
    # slowest_rank is null beside two ranks' wait_us only when every rank waits the same (outputs.md).
    if record.slowest_rank is not None or sum(r.wait_us is not None for r in record.ranks) >= 2:
        slow = record.rank(record.slowest_rank) if record.slowest_rank is not None else None
        late = record.rank(record.clock_slowest_rank) if record.clock_slowest_rank is not None else None
        if late is not None and slow is not None:
            who = (
                f"Rank {slow.rank} waits least by duration, but on the aligned clock rank {late.rank} started last at "
                f"{late.last_arrival_pct:.1f}% of its matched calls (rank {slow.rank} at {slow.last_arrival_pct:.1f}%): "
                f"{WAIT_BY_DURATION}, so the two disagree on which rank the others wait for; why exposed goes by the aligned clock."
            )
        elif slow is not None:
            who = f"Rank {slow.rank} waits least: the others wait for it."
        else:
            who = "Every rank waits the same: none holds the others back."
        console.print(
            f"Wait vs transfer: each collective call is matched across ranks by process group, kind and order; "
            f"transfer = the fastest rank's duration, wait = the rest. {who}"
        )
    if record.exposed is not None:
        for line in exposed_lines("these traces", record.exposed):
            console.print(line, markup=False)
    if grouped:  # one line per distinct note, naming its ranks
        by_note: dict[str, list[int]] = {}
        for rank in facts.ranks:
            for note in rank.notes:
                by_note.setdefault(note, []).append(rank.record.rank)
        for note, ranks in by_note.items():
            console.print(f"note (rank {_ranks(ranks, 4)}): {note}", style="yellow", markup=False)
    else:
        for rank in facts.ranks:
            for note in rank.notes:
                console.print(f"note: {note}", style="yellow")
    styles = {"error": "bold red", "warning": "yellow"}
    for line in integrity_lines(record.integrity.checks if record.integrity else ()):
        style = next((styles[s] for s in styles if line.startswith(f"integrity: {s.upper()}")), "")
        console.print(line, style=style, markup=False)
