"""The full per-rank and per-step tables as CSV files beside `analyze --json OUT`: OUT's name with
.ranks.csv and .steps.csv (one row per rank; one per rank and profiled step). Every column is a
field of the record (docs/outputs.md); an empty cell is an unknown (None)."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from profile_overlap.core.io import write_text_atomic
from profile_overlap.record.analysis import AnalysisRecord

RANK_COLUMNS = (
    "rank", "device", "comm_us", "compute_us", "overlap_us", "exposed_comm_us", "overlap_pct",
    "wait_us", "transfer_us", "last_arrivals", "last_arrival_pct", "exposed_wait_us", "exposed_transfer_us",
)  # fmt: skip
STEP_COLUMNS = ("rank", "step", "step_us", "comm_us", "compute_us", "overlap_us", "exposed_comm_us", "overlap_pct")


def csv_paths(json_path: Path) -> tuple[Path, Path]:
    stem = json_path.name.removesuffix(".json")
    return json_path.with_name(f"{stem}.ranks.csv"), json_path.with_name(f"{stem}.steps.csv")


def _text(rows: list[list]) -> str:
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerows([["" if v is None else v for v in row] for row in rows])
    return out.getvalue()


def write_tables(record: AnalysisRecord, json_path: Path) -> tuple[Path, Path]:
    """Both files, written atomically; returns their paths."""
    exposed = record.exposed.ranks if record.exposed is not None else {}
    ranks: list[list] = [list(RANK_COLUMNS)]
    steps: list[list] = [list(STEP_COLUMNS)]
    for r in record.ranks:
        e = exposed.get(r.rank)
        ranks.append(
            [
                *(getattr(r, c) for c in RANK_COLUMNS[:11]),
                None if e is None or e.wait_us is None else round(e.wait_us, 3),
                None if e is None or e.transfer_us is None else round(e.transfer_us, 3),
            ]
        )
        steps += [[r.rank, *(getattr(s, c) for c in STEP_COLUMNS[1:])] for s in r.steps]
    rank_path, step_path = csv_paths(json_path)
    write_text_atomic(rank_path, _text(ranks))
    write_text_atomic(step_path, _text(steps))
    return rank_path, step_path
