"""A/A benchmark: the same config run twice, many times over; how often does `report --compare` say "different"?

    python benchmarks/bench_aa.py                  # 20 pairs without and 20 with --repeats 5 (about half an hour on 2 cores)
    python benchmarks/bench_aa.py --pairs 40       # more pairs: a tighter rate
    python benchmarks/bench_aa.py --quick          # smoke run (figures meaningless): 2 pairs each, tiny steps

Every run is a separate job (`python -m profile_overlap run --nproc-per-node 2 --mode compare --modes
sequential,split`, small layers, --no-profile: the verdict reads step times only), so whatever differs
from one job to the next (where the ranks land, the load of that minute) is in the figures. The pairs of
the two kinds alternate (single A, single B, repeats A, repeats B, single A, ...) so that a change of
load over the benchmark's half hour weighs on both kinds alike.

Each pair goes through the same function `report --compare` uses for its verdict
(profile_overlap.record.summary.compare_runs), per mode: "different" when the verdict claims a
difference. Also counted, for the record: the rule compare used before --repeats (each median outside
the other's p10-p90 range). From the pairs it estimates what record/noise.py assumes: SINGLE_RUN_SD
(the spread of log median step time between single runs) and RUN_TO_RUN_SD (the part of the spread
between runs with repeats that their own blocks do not show). Load average before and after.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from profile_overlap.core.io import write_json_atomic  # noqa: E402
from profile_overlap.record import noise  # noqa: E402
from profile_overlap.record.load import load_metrics  # noqa: E402
from profile_overlap.record.summary import blocks, compare_runs, within_noise  # noqa: E402

MODES = "sequential,split"


def run_job(out: Path, name: str, *, repeats: int, args: argparse.Namespace) -> Path:
    cmd = [sys.executable, "-m", "profile_overlap", "run", "--nproc-per-node", str(args.nproc), "--mode", "compare", "--modes", MODES]
    cmd += ["--layers", str(args.layers), "--dim", str(args.dim), "--batch", str(args.batch), "--steps", str(args.steps)]
    cmd += ["--repeats", str(repeats), "--no-profile", "--out", str(out), "--name", name]
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
    if proc.returncode != 0:
        sys.exit(f"bench_aa: run {name} failed (exit {proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}")
    return out / name


def judge(a_dir: Path, b_dir: Path) -> dict:
    """Per mode: the verdict of compare_runs, the old p10-p90 rule, and the numbers the estimates need."""
    a, b = load_metrics(a_dir / "metrics.json"), load_metrics(b_dir / "metrics.json")
    result = {}
    for mode, diff in compare_runs(a, b).items():
        ta, tb = a.modes[mode].step_time, b.modes[mode].step_time
        ba, bb = blocks(ta), blocks(tb)
        result[mode] = {
            "a_median_ms": ta.median_ms,
            "b_median_ms": tb.median_ms,
            "log_ratio": math.log(diff.ratio),
            "different": diff.different,
            "rule": diff.rule,
            "smallest_change": diff.smallest_change,
            "old_rule_different": not within_noise(ta, tb),
            # As compare_runs draws them (B's bootstrap seeded SEED + 1): what the runs' own blocks (or steps) show.
            "own": [
                [noise.own_log_sd(ba) ** 2, noise.own_units(ba)],
                [noise.own_log_sd(bb, seed=noise.SEED + 1) ** 2, noise.own_units(bb)],
            ],
        }
    return result


def load() -> str:
    return Path("/proc/loadavg").read_text().split()[0] if Path("/proc/loadavg").exists() else "?"


def estimate_sd(verdicts: list[dict]) -> tuple[float, float]:
    """(total, job) from pairs of one kind, d = log of B's median / A's. total = sqrt(mean(d^2) / 2): the
    spread between runs. job: the sd that record/noise.compare_runs must add for both runs, each beyond what
    its own blocks (or steps) show (v = sd_A^2 + sd_B^2), so that d / sqrt(v + 2 job^2) has unit variance
    over the pairs: the root of mean(d^2 / (v + 2 job^2)) = 1, 0 when the pairs' own spread already
    explains them. Pairs differ in v (the load of their minutes), hence this weighting rather than
    mean(d^2) - mean(v). What record/noise.py's SINGLE_RUN_SD and RUN_TO_RUN_SD stand for."""
    pairs = [(v["log_ratio"] ** 2, max(v["own"][0][0] + v["own"][1][0], 1e-12)) for v in verdicts]
    total = math.sqrt(statistics.fmean(d2 for d2, _ in pairs) / 2)

    def excess(job: float) -> float:
        return statistics.fmean(d2 / (own + 2 * job * job) for d2, own in pairs) - 1

    lo, hi = 0.0, 10.0
    if excess(lo) <= 0:
        return total, 0.0
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if excess(mid) > 0 else (lo, mid)
    return total, hi


def cross_validated(pairs: list[dict]) -> dict:
    """The false-different rate out of sample: the spread is estimated on the even pairs and the rule of
    record/noise.compare_runs applied with it to the odd ones, then the other way round. Constants fitted
    on the very pairs they judge would make the rate small by construction."""
    folds = [[v for i, p in enumerate(pairs) if i % 2 == k for v in p.values()] for k in (0, 1)]
    different = total = 0
    for fit, judged in ((folds[0], folds[1]), (folds[1], folds[0])):
        if not fit or not judged:
            continue
        _, job_sd = estimate_sd(fit)
        for v in judged:
            (var_a, units_a), (var_b, units_b) = v["own"]
            different += abs(v["log_ratio"]) > noise.difference_limit(var_a, units_a, var_b, units_b, job_sd)
            total += 1
    return {"different": different, "verdicts": total, "rate": different / total if total else math.nan}


def summarize(pairs: list[dict]) -> dict:
    verdicts = [m for p in pairs for m in p.values()]
    n = len(verdicts)
    logs = [v["log_ratio"] for v in verdicts]
    total_sd, job_sd = estimate_sd(verdicts) if verdicts else (math.nan, math.nan)
    return {
        "pairs": len(pairs),
        "verdicts": n,
        "different": sum(v["different"] for v in verdicts),
        "rate": sum(v["different"] for v in verdicts) / n if n else math.nan,
        "pairs_any_different": sum(any(v["different"] for v in p.values()) for p in pairs),
        "old_rule_different": sum(v["old_rule_different"] for v in verdicts),
        "median_abs_change_pct": 100 * (math.exp(statistics.median(abs(x) for x in logs)) - 1) if logs else math.nan,
        "max_abs_change_pct": 100 * (math.exp(max(abs(x) for x in logs)) - 1) if logs else math.nan,
        "median_smallest_change_pct": 100 * statistics.median(v["smallest_change"] for v in verdicts) if n else math.nan,
        "sd_between_runs": total_sd,
        "job_sd": job_sd,
        "cross_validated": cross_validated(pairs),
        "median_step_ms": statistics.median(x for v in verdicts for x in (v["a_median_ms"], v["b_median_ms"])) if n else math.nan,
    }


def report(result: dict) -> None:
    print(
        f"A/A: {result['nproc']} ranks, --modes {MODES}, --layers {result['layers']} --dim {result['dim']} --batch {result['batch']} "
        f"--steps {result['steps']} --no-profile; load average {result['load_before']} before, {result['load_after']} after"
    )
    print(f"record/noise.py now: SINGLE_RUN_SD {noise.SINGLE_RUN_SD}, RUN_TO_RUN_SD {noise.RUN_TO_RUN_SD}")
    header = f"{'runs':<12} {'pairs':>5} {'verdicts':>8} {'different':>9} {'rate':>6} {'pairs any':>9} {'old rule':>8} "
    header += f"{'median step':>11} {'med |B/A-1|':>11} {'max |B/A-1|':>11} {'can tell':>8} {'total sd':>8} {'job sd':>7} {'cv rate':>12}"
    print(header)
    for kind, s in result["kinds"].items():
        cv = s["cross_validated"]
        print(
            f"{kind:<12} {s['pairs']:>5} {s['verdicts']:>8} {s['different']:>9} {100 * s['rate']:>5.1f}% {s['pairs_any_different']:>9} "
            f"{s['old_rule_different']:>8} {s['median_step_ms']:>9.2f}ms {s['median_abs_change_pct']:>10.1f}% "
            f"{s['max_abs_change_pct']:>10.1f}% {s['median_smallest_change_pct']:>7.1f}% {s['sd_between_runs']:>8.4f} {s['job_sd']:>7.4f} "
            f"{cv['different']:>2}/{cv['verdicts']:<3} {100 * cv['rate']:>4.1f}%"
        )
    print(
        "verdicts: one per mode and pair; different: the compare verdict claims a difference (rate = different / verdicts);\n"
        "pairs any: pairs with at least one mode called different; old rule: verdicts the p10-p90 rule of compare before\n"
        "--repeats would have called different; med/max |B/A-1|: change of median step time between the two runs of a pair;\n"
        "can tell: median of the least change the verdict could tell from noise; total sd: sqrt(mean(log(B/A)^2) / 2), the\n"
        "sd of log median step time between runs; job sd: the part the runs' own blocks (steps) do not show, what\n"
        "record/noise.py's SINGLE_RUN_SD and RUN_TO_RUN_SD stand for; cv rate: 'different' verdicts with job sd estimated\n"
        "on the other half of the pairs (out of sample)."
    )
    single = result["kinds"].get("single")
    repeated = next((k for name, k in result["kinds"].items() if name != "single"), None)
    if single and repeated:
        print(f"measured here: SINGLE_RUN_SD = {single['job_sd']:.3f}, RUN_TO_RUN_SD = {repeated['job_sd']:.3f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=20, help="pairs of runs of each kind (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=5, help="--repeats of the runs with repeats (default: %(default)s)")
    parser.add_argument("--nproc", type=int, default=2, help="ranks per run (default: %(default)s)")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--steps", type=int, default=10, help="timed steps per block (default: %(default)s, run's default)")
    parser.add_argument("--quick", action="store_true", help="smoke run, figures meaningless: 2 pairs each, --repeats 3, 3 steps")
    parser.add_argument("--json", metavar="OUT", help="write every verdict and the summary here")
    parser.add_argument("--keep", metavar="DIR", help="write the run folders here and keep them (default: a temporary folder)")
    parser.add_argument("--from", dest="source", metavar="DIR", help="judge the pairs already in DIR (a --keep folder) instead of running")
    args = parser.parse_args()
    if args.quick:
        args.pairs, args.repeats, args.steps, args.dim, args.batch = 2, 3, 3, 64, 16
    if args.source:  # the kept runs' own config, not the defaults
        config = json.loads(next(Path(args.source).glob("repeats*/p0a/config.json")).read_text())
        args.nproc = config["nproc_per_node"]
        for key in ("layers", "dim", "batch", "steps", "repeats"):
            setattr(args, key, config[key])
    kinds = {"single": 1, f"repeats {args.repeats}": args.repeats}
    before = "n/a (judged again from kept runs)" if args.source else load()
    pairs: dict[str, list[dict]] = {kind: [] for kind in kinds}
    if args.source:
        for kind in kinds:
            folder = Path(args.source) / kind.replace(" ", "")
            done = sorted(int(p.name[1:-1]) for p in folder.glob("p*b") if (p / "metrics.json").exists())
            pairs[kind] = [judge(folder / f"p{i}a", folder / f"p{i}b") for i in done]
    else:
        with tempfile.TemporaryDirectory(prefix="bench_aa_") as tmp:
            for i in range(args.pairs):
                for kind, repeats in kinds.items():
                    out = Path(args.keep or tmp) / kind.replace(" ", "")
                    a, b = (run_job(out, f"p{i}{side}", repeats=repeats, args=args) for side in "ab")
                    pairs[kind].append(judge(a, b))
                done = ", ".join(f"{k} {sum(v['different'] for p in pairs[k] for v in p.values())} different" for k in kinds)
                print(f"pair {i + 1}/{args.pairs}: {done} (load {load()})", flush=True)
    result = {
        **{k: getattr(args, k) for k in ("nproc", "layers", "dim", "batch", "steps", "repeats")},
        "load_before": before,
        "load_after": "n/a" if args.source else load(),
        "kinds": {kind: summarize(p) for kind, p in pairs.items()},
        "pairs": pairs,
    }
    report(result)
    if args.json:
        write_json_atomic(Path(args.json), result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
