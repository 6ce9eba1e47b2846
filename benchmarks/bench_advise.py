"""Hit rate of `advise --verify`: tiny 2-rank transformer runs (CPU, gloo), each advised, its top
verifiable items run against the run in alternating blocks; prints one row per verified item.

    python benchmarks/bench_advise.py --out /tmp/bench_advise --repeats 5   # --steps 15 timed steps per block

Each run is advised with `--calibrate` (a mode that overlaps nothing, as ddp at its default bucket,
gets its interference from one profiled run of its best change) and verifies its verifiable items
(RUNS: how many; --items N caps every run at N): ddp its smaller buckets and its first bucket's
cap, fsdp2 its resharding, prefetch and unit groups (once at one unit per fully_shard call, once at
two), the compare its schedule and the split's wait-ahead.

Runs one job at a time (the machine may be shared). Results: benchmarks/README.md, "advise".

    python benchmarks/bench_advise.py --reevaluate /tmp/bench_advise2 /tmp/bench_advise3 ...

advises each earlier series' runs again with today's code (on a copy, without verifying) and scores
its predictions against the gains those series measured: a model change tried on every measured
item without verifying anything again (only `--calibrate`'s run, for a mode that measured no
interference of its own).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from profile_overlap.tools.advise.verify import quoted_here

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


def reevaluate(series: list[Path]) -> None:
    """Today's predictions against each series' measured gains (matched by flag)."""
    print("series | run | flag | predicted gain ms now [interval] | predicted then | measured gain ms [95%] | hit now | hit then")
    hits = then = total = 0
    with tempfile.TemporaryDirectory() as tmp:
        for folder in series:
            got = 0
            for name in RUNS:
                src = folder / name
                if not (src / "advice.json").is_file():
                    continue
                copy = Path(tmp) / folder.name / name
                shutil.copytree(src, copy, ignore=shutil.ignore_patterns("verify"))
                po("advise", str(copy), "--calibrate")
                now = {i["flag"]: i for i in json.loads((copy / "advice.json").read_text())["items"] if i["flag"]}
                timed = {m: mode["step_time"]["median_ms"] for m, mode in json.loads((src / "metrics.json").read_text())["modes"].items()}
                for item in json.loads((src / "advice.json").read_text())["items"]:
                    v, new = item["verification"], now.get(item["flag"])
                    if not v or new is None or new["predicted_gain_ms"] is None:
                        continue
                    low, high = v["gain_low_ms"], v["gain_high_ms"]
                    # Quoted on the verification's original blocks, as advise --verify scores it (verify.quoted_here).
                    here = quoted_here(new["predicted_gain_ms"], baseline_ms=v["baseline_ms"], timed_ms=timed.get(item["mode"]))
                    hit = low <= here <= high
                    hits, then, total, got = hits + hit, then + v["hit"], total + 1, got + hit
                    print(
                        f"{folder.name} | {name} | `{item['flag']}` | {new['predicted_gain_ms']:.2f} [{new['gain_low_ms']:.2f}, "
                        f"{new['gain_high_ms']:.2f}] ({here:.2f} on its baseline) | {item['predicted_gain_ms']:.2f} | "
                        f"{v['measured_gain_ms']:.2f} [{low:.2f}, {high:.2f}] | {hit} | {v['hit']}",
                        flush=True,
                    )
            print(f"{folder.name}: {got} hits now")
    print(f"hit rate now: {hits} of {total} (then: {then})")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reevaluate", type=Path, nargs="+", metavar="SERIES_DIR", help="score today's predictions on earlier series")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--items", type=int, default=None, help="verify at most N items per run (default: each run's own count)")
    parser.add_argument("--runs", default=",".join(RUNS))
    parser.add_argument("--steps", type=int, default=15, help="timed steps per block (each block's median is what pairs up)")
    args = parser.parse_args()
    if args.reevaluate:
        return reevaluate(args.reevaluate)
    if args.out is None:
        parser.error("--out is required (or --reevaluate SERIES_DIR ...)")
    print(f"load average at start: {os.getloadavg()[0]:.1f}", flush=True)
    print(
        "run | item | flag | predicted gain ms [interval] (quoted on the verification's baseline ms) | "
        "measured gain ms [95%] | hit | sign agrees | overlap with the change"
    )
    hits = total = 0
    for name in args.runs.split(","):
        run_dir = args.out / name
        flags, items = RUNS[name]
        items = items if args.items is None else min(items, args.items)
        if not (run_dir / "metrics.json").is_file():
            steps = ["--steps", str(args.steps), *STEPS]
            po("run", "--nproc-per-node", "2", *flags, *TINY, *steps, "--repeats", "3", "--out", str(args.out), "--name", name)
        po("advise", str(run_dir), "--calibrate", "--verify", "--verify-items", str(items), "--repeats", str(args.repeats))
        advice = json.loads((run_dir / "advice.json").read_text())
        for item in advice["items"]:
            v = item["verification"]
            if v:
                hits, total = hits + v["hit"], total + 1
                print(
                    f"{name} | {item['kind']} | `{item['flag']}` | {item['predicted_gain_ms']:.2f} "
                    f"[{item['gain_low_ms']:.2f}, {item['gain_high_ms']:.2f}] ({v['predicted_here_ms']:.2f} on {v['baseline_ms']:.2f}) | "
                    f"{v['measured_gain_ms']:.2f} [{v['gain_low_ms']:.2f}, {v['gain_high_ms']:.2f}] | {v['hit']} | {v['sign_agrees']} | "
                    f"{'–' if v['changed_overlap_pct'] is None else format(v['changed_overlap_pct'], '.1f') + ' %'}",
                    flush=True,
                )
    print(f"hit rate: {hits} of {total}; load average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
