"""Reading a merged Perfetto file back for the tests: its tracks, slices, flows and metadata."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

OURS = {"profile_overlap", "mode"}
"""Categories of the slices the command draws itself (the rest come from the traces)."""


@dataclass
class Merged:
    doc: dict
    processes: dict[int, str]
    threads: dict[tuple[int, int], str]
    slices: dict[tuple[int, int], list[dict]]
    flows: dict[int, list[dict]]

    def rank_pid(self, rank: int) -> int:
        (pid,) = [p for p, name in self.processes.items() if name.split(" (")[0] == f"rank {rank}"]
        return pid

    def track(self, rank: int, name: str) -> list[dict]:
        pid = self.rank_pid(rank)
        return [e for (p, t), events in self.slices.items() if p == pid and self.threads[(p, t)].split(" (")[0] == name for e in events]

    def traces_slices(self) -> int:
        return sum(1 for events in self.slices.values() for e in events if e.get("cat") not in OURS)


def load_merged(path: Path) -> Merged:
    doc = json.loads(gzip.decompress(Path(path).read_bytes()))
    processes, threads = {}, {}
    slices: dict[tuple[int, int], list[dict]] = defaultdict(list)
    flows: dict[int, list[dict]] = defaultdict(list)
    for e in doc["traceEvents"]:
        if e["ph"] == "M" and e["name"] == "process_name":
            processes[e["pid"]] = e["args"]["name"]
        elif e["ph"] == "M" and e["name"] == "thread_name":
            threads[(e["pid"], e["tid"])] = e["args"]["name"]
        elif e["ph"] == "X":
            slices[(e["pid"], e["tid"])].append(e)
        elif e["ph"] in ("s", "t", "f"):
            flows[e["id"]].append(e)
    return Merged(doc, processes, threads, dict(slices), dict(flows))


def partial_overlaps(events: list[dict]) -> int:
    """Slices of one track that start inside an earlier one and end after it (in whole ns, as Perfetto reads them)."""
    spans = sorted(((round(e["ts"] * 1000), round((e["ts"] + e.get("dur", 0)) * 1000)) for e in events), key=lambda x: (x[0], -x[1]))
    bad, open_ends = 0, []
    for start, end in spans:
        while open_ends and open_ends[-1] <= start:
            open_ends.pop()
        if open_ends and end > open_ends[-1]:
            bad += 1
        else:
            open_ends.append(end)
    return bad


def raw_tracks(folder: Path) -> dict[tuple[str, str, str], list[dict]]:
    """The complete slices of every trace under `folder`, by (file, pid, tid)."""
    tracks: dict[tuple[str, str, str], list[dict]] = defaultdict(list)
    for path in sorted(Path(folder).rglob("*.json*")):
        data = path.read_bytes()
        doc = json.loads(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)
        for e in doc["traceEvents"]:
            if e.get("ph") == "X":
                tracks[(path.name, str(e.get("pid")), str(e.get("tid")))].append(e)
    return dict(tracks)
