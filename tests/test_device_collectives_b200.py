"""A real 8-rank B200 trace (rank 0; tests/data/tracelens_b200_1rank, NOTICE): torch's symmetric-memory
all-reduce runs as `multimem_all_reduce_kernel`, launched by `symm_mem::multimem_all_reduce_`, with no
NCCL kernel. It is communication, not compute."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from profile_overlap.analysis.folder import analyze_dir

B200 = Path(__file__).parent / "data" / "tracelens_b200_1rank"


def test_the_b200_traces_multimem_all_reduces_are_all_reduce_communication():
    events = json.load(gzip.open(B200 / "eager_trace.json.gz"))["traceEvents"]
    multimem = [e for e in events if e.get("cat") == "kernel" and "multimem_all_reduce_kernel" in e["name"]]
    assert len(multimem) == 73
    (rank,) = analyze_dir(B200).ranks
    by_kind = {c.kind: c for c in rank.collectives}
    assert by_kind["all_reduce"].count == 73  # read 22 µs of communication before: they counted as compute
    assert abs(by_kind["all_reduce"].dur_us - sum(e["dur"] for e in multimem)) < 0.01
    # Their union is communication (with the one NCCL all_gather), none of it compute.
    assert rank.comm_us > 2000 and rank.overlap_us == 0
