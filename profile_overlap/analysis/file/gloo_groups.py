"""Which process group ran each gloo work item (CPU traces name no group: gloo records no
record_param_comms), inferred from gloo's worker threads.

Each ProcessGroupGloo starts its own pool of worker threads (`GLOO_POOL_THREADS`, gloo's default)
when it is created, one thread right after the other, and pools are created in the order the rank
created its groups, the order Kineto's `distributedInfo.pg_config` lists them. Thread ids grow in
creation order within a process (not by one: the other ranks' processes create threads at the
same time, so ids interleave), and a pool whose group had no work in the trace has no events and
is not seen. So: the worker threads, in id order, are cut into pools of GLOO_POOL_THREADS; the
pools, in order, are the last groups the rank created (a group created earlier, such as the
default group under a DeviceMesh, is the one left without work). This assumes every pool with
work shows all its threads; a pool whose work all ran on one thread shifts the cut, and the
cross-rank check below then fails for that rank's groups. Point-to-point calls run on the calling thread: they belong to the pipeline group
(pg_desc "mesh_pp") if the rank has one, else to the default group. The cross-rank check
(collectives.matched) then tests the guess: each group's calls must agree across its ranks in
count, kind and size. A pool that cannot be placed (more pools than groups) is UNPLACED, counted
apart and named by the integrity check, never merged into a group.
"""

from __future__ import annotations

from dataclasses import dataclass

from profile_overlap.analysis.read.trace import ProcessGroupInfo

GLOO_POOL_THREADS = 2
"""Worker threads per gloo process group (ProcessGroupGloo::Options' default)."""
UNPLACED = "unplaced"
"""The group of calls whose group could not be inferred."""
DEFAULT_DESC = "default_pg"
PIPELINE_DESC = "mesh_pp"


@dataclass(frozen=True)
class GlooGroups:
    """Per gloo worker thread (its code in the trace's tids), the process group it works for."""

    by_tid: dict[int, str]
    p2p_group: str
    """The group of point-to-point calls (on the calling thread)."""
    method: str
    """How the groups were found, in words (for the integrity check)."""


def pools(tids: list[int]) -> list[list[int]]:
    """Thread ids -> pools: in id order, GLOO_POOL_THREADS threads each (the last one may have fewer)."""
    ordered = sorted(set(tids))
    return [ordered[i : i + GLOO_POOL_THREADS] for i in range(0, len(ordered), GLOO_POOL_THREADS)]


def _label(g: ProcessGroupInfo) -> str:
    return f"{g.name} ({g.desc})" if g.desc else g.name


def infer_groups(worker_tids: dict[int, int], groups: tuple[ProcessGroupInfo, ...], *, fallback: str) -> GlooGroups:
    """worker_tids: tid code -> numeric thread id of each gloo worker thread with events;
    groups: pg_config in creation order; fallback: the group of every call when the trace
    declares at most one group."""
    p2p = next((g.name for g in groups if g.desc == PIPELINE_DESC), None)
    p2p = p2p or next((g.name for g in groups if g.desc == DEFAULT_DESC), None) or (groups[0].name if groups else fallback)
    if len(groups) <= 1:
        how = "one group declared" if groups else "no group declared"
        return GlooGroups({code: fallback for code in worker_tids}, p2p, f"{how}: every call in group {fallback}")
    found = pools(list(worker_tids.values()))
    code_of = {tid: code for code, tid in worker_tids.items()}
    by_tid: dict[int, str] = {}
    placed = groups[len(groups) - len(found) :] if len(found) <= len(groups) else ()
    if not placed and found:
        for pool in found:
            for tid in pool:
                by_tid[code_of[tid]] = UNPLACED
        return GlooGroups(
            by_tid, p2p, f"gloo worker-thread pools: {len(found)} pools for {len(groups)} declared groups, their calls not placed"
        )
    for pool, group in zip(found, placed):
        for tid in pool:
            by_tid[code_of[tid]] = group.name
    names = ", ".join(_label(g) for g in placed)
    how = f"gloo worker-thread pools, in creation order: {len(found)} pool(s) for groups {names}" if found else "no gloo work: none"
    return GlooGroups(by_tid, p2p, how)
