"""Benchmark `analyze` against the floor (a bare orjson.loads of the same files) and, when it is
installed, Holistic Trace Analysis. Every measurement runs in a fresh Python process so that its
peak memory (RSS high-water, children included) is its own.

    python benchmarks/bench_analyze.py              # two ranks of ~76 MB, 5 runs, scaling 2/8/32 ranks
    python benchmarks/bench_analyze.py --mb 100     # per-rank size (10, 50, 100 ...)
    python benchmarks/bench_analyze.py --quick      # smoke run: small files, 2 runs

Targets: analysis time <= 1.5x the floor; peak memory <= 1.5x the largest uncompressed file.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from profile_overlap.synthetic import write_large_trace  # noqa: E402

# Each child prints {"seconds": ..., "peak_rss_mb": ...}. Timing starts after imports.
_CHILD = {
    "floor": """
import gzip, orjson, sys, time
t = time.perf_counter()
for p in sys.argv[1:]:
    with gzip.open(p) as f:
        doc = orjson.loads(f.read())
    del doc
seconds = time.perf_counter() - t
""",
    "ours_1proc": """
import sys, time
from pathlib import Path
from profile_overlap.analysis import analyze_dir
t = time.perf_counter()
analyze_dir(Path(sys.argv[1]).parent, max_workers=1)
seconds = time.perf_counter() - t
""",
    "ours": """
import sys, time
from pathlib import Path
from profile_overlap.analysis import analyze_dir
t = time.perf_counter()
analyze_dir(Path(sys.argv[1]).parent)
seconds = time.perf_counter() - t
""",
    "hta": """
import sys, time, logging
from pathlib import Path
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
t = time.perf_counter()
TraceAnalysis(trace_dir=str(Path(sys.argv[1]).parent)).get_comm_comp_overlap(visualize=False)
seconds = time.perf_counter() - t
""",
}
# Peak RSS: VmHWM of this process (per address space, so unlike ru_maxrss it does not inherit
# the parent's high-water mark across fork + exec), and ru_maxrss of any worker processes.
_REPORT = """
import json, resource
hwm_kb = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
peak_kb = max(hwm_kb, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
print(json.dumps({"seconds": seconds, "peak_rss_mb": peak_kb / 1024}))
"""


def measure(kind: str, files: list[Path]) -> dict:
    p = subprocess.run([sys.executable, "-c", _CHILD[kind] + _REPORT, *map(str, files)],
                       capture_output=True, text=True, cwd=REPO)
    if p.returncode != 0:
        raise RuntimeError(f"{kind} failed:\n{p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def hta_available() -> bool:
    return subprocess.run([sys.executable, "-c", "import hta.trace_analysis"], capture_output=True).returncode == 0


def make_traces(folder: Path, *, ranks: int, mb: float) -> tuple[list[Path], list]:
    folder.mkdir(parents=True, exist_ok=True)
    files, expected = [], []
    for rank in range(ranks):
        path = folder / f"rank{rank}.pt.trace.json.gz"
        expected.append(write_large_trace(path, target_bytes=int(mb * 1e6), rank=rank, world_size=ranks))
        files.append(path)
    return files, expected


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=76, help="uncompressed size of each rank's trace (default 76)")
    ap.add_argument("--ranks", type=int, default=2, help="ranks in the main comparison (default 2)")
    ap.add_argument("--runs", type=int, default=5, help="runs per measurement; medians are reported (default 5)")
    ap.add_argument("--scaling", default="2,8,32", help="rank counts for the scaling table (default 2,8,32)")
    ap.add_argument("--scaling-mb", type=float, default=4, help="per-rank size in the scaling table (default 4)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 2 x 5 MB, 2 runs, scaling 2,8 ranks of 1 MB")
    args = ap.parse_args()
    if args.quick:
        args.mb, args.runs, args.scaling, args.scaling_mb = 5, 2, "2,8", 1

    kinds = ["floor", "ours_1proc", "ours"] + (["hta"] if hta_available() else [])
    with tempfile.TemporaryDirectory(prefix="bench_analyze_") as tmp:
        tmp = Path(tmp)
        files, expected = make_traces(tmp / "main", ranks=args.ranks, mb=args.mb)
        largest_mb = max(e.nbytes for e in expected) / 2**20
        print(f"{args.ranks} ranks x {expected[0].nbytes / 1e6:.1f} MB uncompressed "
              f"({expected[0].num_events:,} events each, {sum(f.stat().st_size for f in files) / 1e6:.1f} MB gzipped), "
              f"{args.runs} runs each, medians")

        # Our numbers are right before they are fast.
        from profile_overlap.analysis import analyze_dir
        result = analyze_dir(tmp / "main")
        for r, e in zip(result.ranks, expected):
            assert (r.comm_us, r.compute_us, r.overlap_us) == (e.comm_us, e.compute_us, e.overlap_us), (r, e)

        rows = {}
        for kind in kinds:
            runs = [measure(kind, files) for _ in range(args.runs)]
            rows[kind] = (statistics.median(r["seconds"] for r in runs), max(r["peak_rss_mb"] for r in runs))
        floor_s = rows["floor"][0]
        print()
        print("| what | time (s) | x floor | peak RSS (MiB) | x largest file |")
        print("|---|---:|---:|---:|---:|")
        label = {"floor": "floor: gzip + orjson.loads, one file after the other",
                 "ours_1proc": "profile_overlap analyze_dir, 1 process",
                 "ours": f"profile_overlap analyze_dir, {args.ranks} processes",
                 "hta": "HTA TraceAnalysis + get_comm_comp_overlap"}
        for kind, (s, mb) in rows.items():
            print(f"| {label[kind]} | {s:.2f} | {s / floor_s:.2f} | {mb:.0f} | {mb / largest_mb:.2f} |")
        if "hta" not in rows:
            print("\n(HTA is not installed: pip install HolisticTraceAnalysis to add it.)")

        print()
        print(f"Scaling: analyze_dir on N ranks of {args.scaling_mb:g} MB each (median of {args.runs})")
        print()
        print("| ranks | time (s) | s per rank |")
        print("|---:|---:|---:|")
        for n in [int(x) for x in args.scaling.split(",")]:
            sfiles, _ = make_traces(tmp / f"scale{n}", ranks=n, mb=args.scaling_mb)
            s = statistics.median(measure("ours", sfiles)["seconds"] for _ in range(args.runs))
            print(f"| {n} | {s:.2f} | {s / n:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
