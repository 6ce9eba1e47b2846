"""How well does `whatif` predict a bigger run? Run a compare job on 2 ranks and on 4 ranks, predict
the 4-rank step of every mode from the 2-rank run (α and B fitted to the 2-rank run's own
collectives, `--fit run`), and print the error against the measured 4-rank run; with the
self-replay error of both runs.

    python benchmarks/whatif_scaling.py                           # the default mlp (--layers 8 --dim 512 --batch 64)
    python benchmarks/whatif_scaling.py -- --model transformer    # flags after -- go to both runs

On CPU the ranks share the machine's cores (4 ranks on 2 cores run at most 2 at a time) and gloo's
loopback "network" is memory copies on the same cores, so the 4-rank run is slower for reasons the
model leaves out: the figure is a floor on the error of a CPU prediction, not a claim about GPUs.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from profile_overlap.record.folder import load_run
from profile_overlap.tools.whatif import whatif


def compare_run(nproc: int, out: Path, flags: list[str]) -> Path:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"]
    cmd += ["-m", "profile_overlap", "--mode", "compare", "--out", str(out), *flags]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"the {nproc}-rank run failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    return run_dir


def pct(x: float | None) -> str:
    return "–" if x is None else f"{x:+.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("flags", nargs="*", help="run flags for both runs (after --)")
    args = parser.parse_args()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        small = compare_run(2, Path(tmp) / "w2", args.flags)
        big = compare_run(4, Path(tmp) / "w4", args.flags)
        predicted = whatif(small, world_sizes=(4,), fit="run")
        self4 = {s.mode: s for s in whatif(big, world_sizes=(4,), fit="run").self_replay}
        measured = load_run(big).metrics
        bw = predicted.link_gbps[0]
        print(f"flags: {' '.join(args.flags) or '(defaults)'}; load average before {load_before[0]:.2f}, after {os.getloadavg()[0]:.2f}")
        print(f"fit to the 2-rank run's collectives: α = {predicted.latency_us:.3g} µs, B = {bw:.3g} GB/s")
        print(f"{'mode':<16}{'predicted 4 ms':>16}{'measured 4 ms':>15}{'error %':>9}{'4-rank profiled ms':>20}{'error %':>9}")
        for mode in predicted.modes:
            p = predicted.point(mode, 4, bw).step_ms
            m = measured.modes[mode].step_time.median_ms
            prof = self4[mode].profiled_ms
            e1 = 100 * (p - m) / m if m else None
            e2 = 100 * (p - prof) / prof if prof else None
            print(f"{mode:<16}{p:>16.1f}{m:>15.1f}{pct(e1):>9}{prof or 0:>20.1f}{pct(e2):>9}")
        for label, result in (("2-rank", predicted), ("4-rank", None)):
            replays = result.self_replay if result else tuple(self4.values())
            for s in replays:
                print(
                    f"self-replay ({label}): {s.mode} measured {s.measured_ms:.1f} ms, predicted {s.predicted_ms:.1f} ms "
                    f"(error {pct(s.error_pct)} %; profiled steps {s.profiled_ms:.1f} ms, error {pct(s.profiled_error_pct)} %)"
                )


if __name__ == "__main__":
    main()
