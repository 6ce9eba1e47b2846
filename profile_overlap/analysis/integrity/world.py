"""Integrity checks: the evidence every analysis carries about its own numbers (stage 3).

Each check looks at one way a trace set can give wrong numbers without a warning (ranks
missing, steps that differ, collectives that do not match, events in no class, streams that
cannot be right, time outside the steps) and says `ok`, `warning` or `error`, with the figures
it rests on and one line on what it means for the numbers. docs/metrics.md
("Integrity checks") defines every check and threshold. Computed once, from the facts the
per-file and per-rank stages keep (analysis/file/facts.py), when the ranks are combined.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from profile_overlap.analysis.integrity.checks import (
    ERROR,
    MAX_WORLD_SIZE,
    OK,
    OVERLAP,
    PHASE,
    STEPS,
    WAIT,
    WARNING,
    Integrity,
    credible_world_size,
    listed,
    missing_ranges,
    new_check,
    rank_list,
    status_of,
    with_meaning,
)
from profile_overlap.analysis.integrity.events import classification_checks, stream_checks, timing_checks
from profile_overlap.analysis.rank.per_rank import RankAnalysis
from profile_overlap.record.integrity import IntegrityCheck

__all__ = ["ERROR", "OK", "WARNING", "Integrity", "check_integrity"]


def check_integrity(ranks: Sequence[RankAnalysis], *, duplicates: Sequence[str] = ()) -> Integrity:
    """Every check, in docs/metrics.md's order. duplicates: files left out because another file
    claimed the same rank and time (analyze --skip-bad, own jobs)."""
    ranks = list(ranks)
    if not ranks:
        return Integrity(())
    checks = [
        *_rank_checks(ranks, duplicates),
        _steps_check(ranks),
        _phases_check(ranks),
        *_collective_checks(ranks),
        *classification_checks(ranks),
        *stream_checks(ranks),
        *timing_checks(ranks),
    ]
    return Integrity(tuple(checks))


# ---------------------------------------------------------------- ranks and steps


def _rank_checks(ranks: list[RankAnalysis], duplicates: Sequence[str]) -> list[IntegrityCheck]:
    found = [r.rank for r in ranks]
    declared = max((r.world_size for r in ranks if r.world_size), default=None)
    files = sum(len(r.files) for r in ranks)
    figures: dict[str, Any] = {"world_size": declared, "ranks_found": found}
    if declared is None:
        detail = f"the traces do not record the world size (no distributedInfo): {len(found)} rank(s) found, none known missing"
        world = new_check("ranks.world_size", WARNING, detail, figures)
    elif not credible_world_size(declared):
        detail = (
            f"the traces declare a world size of {declared:,} and {files} rank file(s) were found: no job has that many ranks "
            f"(at most {MAX_WORLD_SIZE:,} are believed), so their distributedInfo is corrupt; the world is taken as the "
            f"{len(found)} rank(s) found"
        )
        world = new_check("ranks.world_size", ERROR, detail, figures | {"rank_files": files, "believed_max": MAX_WORLD_SIZE})
    else:
        # Runs of missing ranks, never the set of every declared rank (a world of 10**9 is a few numbers here).
        missing = missing_ranges(found, declared)
        count = sum(last - first + 1 for first, last in missing)
        extra = [r for r in found if r >= declared]
        figures |= {"missing": [list(run) for run in missing], "missing_count": count, "beyond_world": extra}
        if extra:
            detail = f"{rank_list(extra)} beyond the world size {declared}: traces of different jobs in one folder?"
        elif missing:
            named = [r for first, last in missing for r in range(first, min(last, first + 8) + 1)][:8]
            more = f" and {count - len(named)} more" if count > len(named) else ""
            which = f"{'rank' if count == 1 else 'ranks'} {', '.join(map(str, named))}{more}"
            detail = f"{len(found)} of {declared} ranks found; missing {which}"
        else:
            detail = f"all {declared} ranks found"
        world = new_check("ranks.world_size", status_of(bool(extra), bool(missing)), detail, figures)
    world = with_meaning(world, "cross-rank numbers cover only the ranks found; per-rank numbers stand", WAIT)

    if duplicates:
        detail = f"{len(duplicates)} file(s) left out: another file claims the same rank and time ({listed(duplicates, 2)})"
    else:
        detail = "one trace per rank and time" + (f" ({files} files: successive profiler spans)" if files > len(ranks) else "")
    figures = {"left_out": list(duplicates), "files_per_rank": {r.rank: len(r.files) for r in ranks}}
    dup = new_check("ranks.duplicates", status_of(bool(duplicates), False), detail, figures)
    dup = with_meaning(dup, "which copy of a rank is analysed is arbitrary: its numbers may belong to another run", OVERLAP, WAIT)

    stepless = [r.rank for r in ranks if not r.steps]
    steps = new_check(
        "ranks.profiler_steps",
        status_of(False, bool(stepless)),
        f"{rank_list(stepless)} without ProfilerStep windows" if stepless else "every rank has ProfilerStep windows",
        {"ranks_without_steps": stepless},
    )
    steps = with_meaning(steps, "without prof.step() there are no per-step numbers, and the totals cover the whole trace", STEPS, OVERLAP)
    return [world, dup, steps]


def _steps_check(ranks: list[RankAnalysis]) -> IntegrityCheck:
    per_rank = {r.rank: [s.step for s in r.steps] for r in ranks}
    with_steps = {k: set(v) for k, v in per_rank.items() if v}
    every = set.union(*with_steps.values()) if with_steps else set()
    common = set.intersection(*with_steps.values()) if with_steps else set()
    partial = sorted(every - common)
    figures = {"steps": per_rank, "partial_steps": partial}
    if not with_steps:
        detail = "no rank has ProfilerStep windows"
    elif partial:
        where = {s: [r for r, v in with_steps.items() if s in v] for s in partial}
        where_text = "; ".join(f"#{s}: {rank_list(rs)}" for s, rs in list(where.items())[:3])
        detail = f"step(s) {listed(partial)} on only some ranks ({where_text})"
    else:
        lo, hi = min(common), max(common)
        detail = f"every rank has the same {len(common)} step(s), #{lo}" + (f" to #{hi}" if hi != lo else "")
    check = new_check("steps.common", status_of(False, bool(partial)), detail, figures)
    return with_meaning(check, "ranks' per-step numbers then describe different steps; means over ranks mix them", STEPS)


def _phases_check(ranks: list[RankAnalysis]) -> IntegrityCheck:
    """steps.phases: steps in which no phase was found, neither from labels nor from torch's ranges."""
    missing = {r.rank: [s.step for s in r.steps if not s.phases] for r in ranks}
    missing = {rank: steps for rank, steps in missing.items() if steps}
    sources = {r.rank: {p.phase: list(p.sources) for p in r.phases} for r in ranks if r.steps}
    figures = {"steps_without_phases": missing, "sources": sources}
    total = sum(len(r.steps) for r in ranks)
    if not total:
        detail = "no rank has ProfilerStep windows"
    elif missing:
        n = sum(len(v) for v in missing.values())
        where = "; ".join(f"rank {rank}: {listed([f'#{s}' for s in steps], 3)}" for rank, steps in list(missing.items())[:3])
        detail = (
            f"{n} of the ranks' {total} steps have no phase ({where}): no forward/backward/optimizer label in them, "
            "and none of torch's ranges (autograd's frames, FSDP2, DDP, torch.optim)"
        )
    else:
        found = sorted({x for per_phase in sources.values() for s in per_phase.values() for x in s})
        detail = f"every step's phases found (from {', '.join(found)})"
    check = new_check("steps.phases", status_of(False, bool(missing)), detail, figures)
    meaning = "the communication and compute of those steps count in no phase: per-phase numbers leave them out"
    return with_meaning(check, meaning, PHASE)


# ---------------------------------------------------------------- collectives


SAME_SIZE_KINDS = frozenset({"all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "barrier"})
"""Collectives whose size S is the same on every rank of the group (all_to_all's splits may differ)."""


def _collective_checks(ranks: list[RankAnalysis]) -> list[IntegrityCheck]:
    # Per (group, kind), per rank: the calls' sizes in seq order (UNKNOWN: not in the trace).
    calls: dict[tuple[str, str], dict[int, np.ndarray]] = defaultdict(dict)
    members: dict[str, set[int]] = defaultdict(set)
    none = np.zeros(0, dtype=np.int64)
    for r in ranks:
        inst = r.facts.calls  # the whole trace in seq order, numbered before any step window
        if inst is None:
            continue
        code = inst.pg.astype(np.int64) * len(inst.kinds) + inst.kind
        for c in np.unique(code).tolist():
            pg = inst.pgs[c // len(inst.kinds)]
            calls[(pg, inst.kinds[c % len(inst.kinds)])][r.rank] = inst.nbytes[code == c]
            members[pg].add(r.rank)
    unmatched: list[dict[str, Any]] = []
    resized: list[dict[str, Any]] = []
    for (pg, kind), per in sorted(calls.items()):
        group = sorted(members[pg])
        if len(group) < 2:
            continue
        low = min(len(per.get(rank, ())) for rank in group)
        for rank in group:
            n = len(per.get(rank, ()))
            if n > low:
                unmatched.append(
                    {"pg": pg, "kind": kind, "rank": rank, "calls": f"#{low}" + (f"-#{n - 1}" if n - 1 > low else ""), "count": n - low}
                )
        first = per.get(group[0], none)[:low]
        if kind in SAME_SIZE_KINDS and any(not np.array_equal(per.get(rank, none)[:low], first) for rank in group):
            for seq in range(low):
                call_sizes = {rank: None if (b := int(per[rank][seq])) < 0 else b for rank in group}
                if len(set(call_sizes.values()) - {None}) > 1:
                    resized.append({"pg": pg, "kind": kind, "call": seq, "nbytes": call_sizes})
    figures = {
        "calls": [{"pg": pg, "kind": kind, "per_rank": {k: len(v) for k, v in per.items()}} for (pg, kind), per in sorted(calls.items())],
        "unmatched": unmatched,
        "size_mismatch": resized,
    }
    if len(ranks) < 2:
        detail = "one rank: nothing to match"
    elif resized:
        named = [f"{x['kind']} #{x['call']} of group {x['pg']}" for x in resized]
        detail = f"{len(resized)} call(s) matched by order differ in size across ranks, so they are different calls: {listed(named, 3)}"
    elif unmatched:
        named = [f"{u['kind']} {u['calls']} of group {u['pg']} on rank {u['rank']}" for u in unmatched]
        detail = f"{sum(u['count'] for u in unmatched)} call(s) without a peer: {listed(named, 3)}"
    else:
        detail = f"every rank of each group has the same calls ({len(calls)} (group, kind) pairs, equal sizes)"
    match = with_meaning(
        new_check("collectives.matched", status_of(bool(resized), bool(unmatched)), detail, figures),
        "calls are matched across ranks by order: a missing or different call makes wait/transfer and clock offsets pair the wrong calls",
        WAIT,
    )

    no_group = {r.rank: r.facts.no_group_calls for r in ranks if r.facts.no_group_calls}
    declared = max(r.facts.declared_groups for r in ranks)
    risky = bool(no_group) and declared > 1
    found_by = {r.rank: r.dimensions.method for r in ranks if r.dimensions is not None}
    unplaced = {r.rank: r.dimensions.unplaced for r in ranks if r.dimensions is not None and r.dimensions.unplaced}
    detail = (
        f"{sum(no_group.values())} call(s) on {rank_list(list(no_group))} name no process group"
        + (f", while the traces declare {declared} groups: all are matched as one group" if risky else " (matched as one group)")
        if no_group
        else "every call names its process group"
    )
    if unplaced:
        kinds = sorted({k for per in unplaced.values() for k in per})
        detail = (
            f"{sum(sum(per.values()) for per in unplaced.values())} call(s) on {rank_list(list(unplaced))} could not be placed "
            f"in a process group ({listed(kinds, 3)}): counted apart, in no dimension; " + detail
        )
    elif declared > 1 and not no_group and found_by:
        hows: dict[str, list[int]] = defaultdict(list)
        for rank, method in found_by.items():
            hows[method.split(":")[0]].append(rank)
        detail += "; groups found by " + "; ".join(f"{how} ({rank_list(rs)})" for how, rs in hows.items())
    groups_figures: dict[str, Any] = {
        "calls_without_group": no_group,
        "declared_groups": declared,
        "groups_found_by": found_by,
        "unplaced_calls": unplaced,
    }
    groups = with_meaning(
        new_check("collectives.process_group", status_of(False, risky or bool(unplaced)), detail, groups_figures),
        "calls of different groups may be matched with each other, skewing wait/transfer",
        WAIT,
    )
    return [match, groups]
