"""Hit rate of `advise --verify`: tiny 2-rank transformer runs (CPU, gloo), each advised, its top
verifiable items run against the run in alternating blocks; prints one row per verified item.

    python benchmarks/bench_advise.py --out /tmp/bench_advise --repeats 5   # --steps 15 timed steps per block

Each run verifies its verifiable items (RUNS: how many; --items N caps every run at N): ddp its
smaller buckets and its first bucket's cap, fsdp2 its resharding, prefetch and unit groups (once at
one unit per fully_shard call, once at two), the compare its schedule and the split's wait-ahead.

Runs one job at a time (the machine may be shared). Results: benchmarks/README.md, "advise".
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

TINY = ["--model", "transformer", "--layers", "2", "--dim", "64", "--heads", "4", "--seq-len", "16", "--batch", "4"]
STEPS = ["--warmup-steps", "1", "--profile-steps", "2"]
RUNS = {
    "ddp": (["--mode", "ddp"], 2),
    "fsdp2": (["--mode", "fsdp2"], 3),
    "fsdp2-pairs": (["--mode", "fsdp2", "--fsdp-group", "2"], 3),
    "seq-split": (["--mode", "compare", "--modes", "sequential,split"], 2),
}
"""Run name: (its flags, how many of its advice items to verify)."""


def po(*args: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "profile_overlap", *args], capture_output=True, text=True)
    if proc.returncode:
        sys.exit(f"failed: profile_overlap {' '.join(args)}: {proc.stderr.strip().splitlines()[-1:]}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--items", type=int, default=None, help="verify at most N items per run (default: each run's own count)")
    parser.add_argument("--runs", default=",".join(RUNS))
    parser.add_argument("--steps", type=int, default=15, help="timed steps per block (each block's median is what pairs up)")
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.1f}", flush=True)
    print("run | item | flag | predicted gain ms [interval] | measured gain ms [95%] | hit | sign agrees | overlap with the change")
    hits = total = 0
    for name in args.runs.split(","):
        run_dir = args.out / name
        flags, items = RUNS[name]
        items = items if args.items is None else min(items, args.items)
        if not (run_dir / "metrics.json").is_file():
            steps = ["--steps", str(args.steps), *STEPS]
            po("run", "--nproc-per-node", "2", *flags, *TINY, *steps, "--repeats", "3", "--out", str(args.out), "--name", name)
        po("advise", str(run_dir), "--verify", "--verify-items", str(items), "--repeats", str(args.repeats))
        advice = json.loads((run_dir / "advice.json").read_text())
        for item in advice["items"]:
            v = item["verification"]
            if v:
                hits, total = hits + v["hit"], total + 1
                print(
                    f"{name} | {item['kind']} | `{item['flag']}` | {item['predicted_gain_ms']:.2f} "
                    f"[{item['gain_low_ms']:.2f}, {item['gain_high_ms']:.2f}] | "
                    f"{v['measured_gain_ms']:.2f} [{v['gain_low_ms']:.2f}, {v['gain_high_ms']:.2f}] | {v['hit']} | {v['sign_agrees']} | "
                    f"{'–' if v['changed_overlap_pct'] is None else format(v['changed_overlap_pct'], '.1f') + ' %'}",
                    flush=True,
                )
    print(f"hit rate: {hits} of {total}; load average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
