"""What a GPU run's folder must show; prints the table for the closing note. Used by check.sh
and by tests/test_gpu.py. Exit 1 with the failed expectation named."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

from profile_overlap.analysis.classify import COMM_KERNEL_RE, MEMORY_KERNEL_RE, SYNC_KERNEL_RE


def kernels_by_stream(path: Path) -> tuple[Counter, Counter]:
    """(compute kernels per stream, NCCL kernels per stream) of one trace, read with plain json."""
    import gzip

    with gzip.open(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    compute, comm = Counter(), Counter()
    for e in events:
        if str(e.get("cat", "")).lower() != "kernel":
            continue
        stream = e.get("args", {}).get("stream")
        if COMM_KERNEL_RE.search(e["name"]):
            comm[stream] += 1
        elif not (MEMORY_KERNEL_RE.search(e["name"]) or SYNC_KERNEL_RE.search(e["name"])):
            compute[stream] += 1
    return compute, comm


def main(run_dir: Path, num_gpus: int) -> int:
    metrics = json.loads((run_dir / "metrics.json").read_text())
    problems = []
    if json.loads((run_dir / "status.json").read_text())["state"] != "succeeded":
        problems.append("status.json is not succeeded")
    print(
        f"\nGPU check: {metrics['env']['ranks'][0]['device']} x{num_gpus}, torch {metrics['env']['torch']}, "
        f"CUDA {metrics['env']['cuda']}, NCCL {metrics['env']['nccl']}"
    )
    print(
        f"{'mode':<11} {'step ms (median, p10-p90)':>27} {'timer':>12} {'kernels':>8} {'NCCL kernels':>13} "
        f"{'compute streams':>16} {'NCCL streams':>13} {'overlap %':>9} {'peak GiB':>9}"
    )
    for mode, m in metrics["modes"].items():
        traces = sorted((run_dir / mode).glob("*.pt.trace.json.gz"))
        if len(traces) != num_gpus:
            problems.append(f"{mode}: {len(traces)} traces for {num_gpus} ranks")
        compute, comm = Counter(), Counter()
        for t in traces:
            c, n = kernels_by_stream(t)
            compute += c
            comm += n
        st = m["step_time"]
        ranks = m["analysis"]["ranks"]
        pct = ranks[0]["overlap_pct"]
        peaks = [x["peak_allocated_bytes"] for x in m["memory"] if x["peak_allocated_bytes"] is not None]
        peak = max(peaks) / 2**30 if peaks else float("nan")
        print(
            f"{mode:<11} {st['median_ms']:>10.2f} ({st['p10_ms']:.2f}-{st['p90_ms']:.2f}) {st['method']:>12} "
            f"{sum(compute.values()):>8} {sum(comm.values()):>13} {','.join(map(str, sorted(compute))):>16} "
            f"{','.join(map(str, sorted(comm))) or '-':>13} {'-' if pct is None else f'{pct:.1f}':>9} {peak:>9.2f}"
        )
        if st["method"] != "cuda_events":
            problems.append(f"{mode}: steps not timed with CUDA events")
        if not compute:
            problems.append(f"{mode}: no compute kernels in the traces (CUDA activity missing)")
        if any(r["device"] != "cuda" for r in ranks):
            problems.append(f"{mode}: analysis did not see a GPU trace")
        # Each phase label's range holds the kernels it launched (on any thread).
        for r in ranks:
            phases = {p["phase"]: p for p in r.get("phases", [])}
            missing = [p for p in ("forward", "backward", "optimizer") if phases.get(p, {}).get("compute_us", 0) <= 0]
            if missing:
                problems.append(f"{mode}: rank {r['rank']} has no compute in phase(s) {', '.join(missing)}")
        if num_gpus > 1:
            if not comm:
                problems.append(f"{mode}: no NCCL kernels with {num_gpus} ranks")
            if set(comm) & set(compute):
                problems.append(f"{mode}: NCCL kernels share a stream with compute kernels: {set(comm) & set(compute)}")
    if num_gpus == 1:
        print(
            "world size 1: NCCL's one-rank path launches no NCCL kernel, so the NCCL-stream and overlap columns "
            "are empty by design. This covers CUDA, streams, CUDA events, the profiler's CUDA activity, the phase "
            "labels' device-side ranges and the DDP/FSDP2 wiring, not NCCL kernels; multi-rank NCCL traces are "
            "checked in CI from tests/data."
        )
    checks = [c for m in metrics["modes"].values() for c in m["checks"]] + metrics["checks"]
    for c in checks:
        print(("OK     " if c["passed"] else "FAILED ") + c["name"] + f" (max error {c['max_abs_err']})")
        if not c["passed"]:
            problems.append(c["name"])
    for p in problems:
        print("PROBLEM:", p)
    print("GPU check:", "PASSED" if not problems else "FAILED")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), int(sys.argv[2])))
