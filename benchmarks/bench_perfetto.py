"""Benchmark `perfetto` on the benchmark pair of bench_analyze.py (two ranks of ~76 MB of
synthetic Kineto trace each): wall time and peak memory of the whole command in a fresh process,
against `analyze_dir` alone (the analysis it runs first), and the file's size against the gzipped
traces (bound: 1.5x).

    python benchmarks/bench_perfetto.py              # 2 ranks x ~76 MB, 3 runs, medians
    python benchmarks/bench_perfetto.py --mb 10 --runs 1
    python benchmarks/bench_perfetto.py --quick      # smoke run: 2 x 5 MB, 1 run
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_analyze import _REPORT, REPO, make_traces, measure

_PERFETTO = """
import sys, time
from pathlib import Path
from profile_overlap.tools.perfetto import write_perfetto
from profile_overlap.tools.perfetto.source import find_source
t = time.perf_counter()
write_perfetto(find_source(Path(sys.argv[1]).parent), Path(sys.argv[1]).parent.parent / "merged.json.gz")
seconds = time.perf_counter() - t
"""


def measure_perfetto(files: list[Path]) -> dict:
    p = subprocess.run([sys.executable, "-c", _PERFETTO + _REPORT, str(files[0])], capture_output=True, text=True, cwd=REPO)
    if p.returncode != 0:
        raise RuntimeError(f"perfetto failed:\n{p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=76, help="uncompressed size of each rank's trace (default 76)")
    ap.add_argument("--runs", type=int, default=3, help="runs per measurement; medians are reported (default 3)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 2 x 5 MB, 1 run")
    args = ap.parse_args()
    if args.quick:
        args.mb, args.runs = 5, 1
    with tempfile.TemporaryDirectory(prefix="bench_perfetto_") as tmp:
        files, expected = make_traces(Path(tmp) / "main", ranks=2, mb=args.mb)
        gz = sum(f.stat().st_size for f in files)
        largest_mb = max(e.nbytes for e in expected) / 2**20
        rows = {
            "profile_overlap analyze_dir (2 processes)": [measure("ours", files) for _ in range(args.runs)],
            "profile_overlap perfetto (analysis included)": [measure_perfetto(files) for _ in range(args.runs)],
        }
        size = (Path(tmp) / "merged.json.gz").stat().st_size
        print(
            f"2 ranks x {expected[0].nbytes / 1e6:.1f} MB uncompressed ({expected[0].num_events:,} events each, {gz / 1e6:.1f} MB gzipped)"
        )
        print()
        print("| what | time (s) | peak RSS (MiB) | x largest file |")
        print("|---|---:|---:|---:|")
        for label, runs in rows.items():
            s, mb = statistics.median(r["seconds"] for r in runs), max(r["peak_rss_mb"] for r in runs)
            print(f"| {label} | {s:.2f} | {mb:.0f} | {mb / largest_mb:.2f} |")
        print(f"\nmerged file: {size / 1e6:.1f} MB = {size / gz:.2f}x the gzipped traces")
    return 0


if __name__ == "__main__":
    sys.exit(main())
