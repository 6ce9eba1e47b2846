"""Profiler overhead: step time with and without torch.profiler, in the same job, on the same state.

    python benchmarks/bench_overhead.py            # default CPU config, 4 ranks, 5 blocks of 10 steps each way, 3 jobs
    python benchmarks/bench_overhead.py --quick    # smoke run (figures meaningless): 2 ranks, 2 blocks of 2 steps, small layers

Each job is a real torchrun job running the real pipelines (profile_overlap.run.pipelines) with the `run`
command's default config (profile_overlap.run.config.Config). Per mode, after warmup steps, it
alternates blocks of steps without and with the profiler (the order flips every block, so drift
favours neither side). Profiled blocks record what `run` records (CPU activities, plus CUDA on GPU,
record_shapes=True, prof.step() per step) after one untimed profiler warmup step, as `run` does.
Step times are taken as in `run`: a barrier, then perf_counter around the step on CPU (CUDA events
on GPU), the slowest rank per step. Stopping the profiler and exporting the trace happen outside
the timed steps and are reported apart (a one-off per profiled window, not a per-step cost).

Reported per mode: median step time off and on, their ratio (on / off), the per-block ratios'
range, and across jobs the ratio's spread. Target on GPU: ratio <= 1.05.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


# ---- one job (every rank) -----------------------------------------------------------------


def _slowest(dist, times: list[float]) -> list[float]:
    everyone: list = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, times)
    return [max(step) for step in zip(*everyone)]


def run_job(args: argparse.Namespace) -> None:
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile

    from profile_overlap.run import job, pipelines, timing
    from profile_overlap.run.config import Config
    from profile_overlap.run.harness import DTYPES

    config = Config.of(**{k: getattr(args, k) for k in ("layers", "dim", "batch", "dtype") if getattr(args, k) is not None})
    backend = job.resolve_backend(config)
    device = job.check_devices(backend)
    job.init_process_group(backend, device, config.job.timeout_s)  # its ordering rule matters here too
    rank, world = dist.get_rank(), dist.get_world_size()
    config.check_world_size(world)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    trace_dir = Path(tempfile.mkdtemp(prefix="bench_overhead_"))
    record = {
        "config": config.to_dict(),
        "backend": backend,
        "device_type": device.type,
        "world_size": world,
        "blocks": args.blocks,
        "steps_per_block": args.steps,
        "modes": {},
    }
    for mode in config.workload.modes:
        state = pipelines.build_state(mode, config=config, rank=rank, world_size=world, device=device, dtype=DTYPES[config.workload.dtype])
        step_fn = pipelines.PIPELINES[mode]
        step = 0
        for _ in range(config.schedule.warmup_steps):
            step_fn(state, step)
            step += 1
        blocks = []
        for block in range(args.blocks):
            result = {}
            for kind in ("off", "on") if block % 2 == 0 else ("on", "off"):
                if kind == "off":
                    times = timing.timed_steps(step_fn, state, first_step=step, num_steps=args.steps, device=device)
                    step += args.steps
                else:
                    with profile(activities=activities, record_shapes=True) as prof:
                        step_fn(state, step)  # the profiler's warmup step, untimed, as in `run`
                        prof.step()
                        step += 1
                        times = timing.timed_steps(
                            step_fn, state, first_step=step, num_steps=args.steps, device=device, after_step=prof.step
                        )
                        step += args.steps
                        state.finish()  # no collective may outlive the profiler session (run/profiler.py)
                        t0 = time.perf_counter()
                    prof.export_chrome_trace(str(trace_dir / f"rank{rank}.json"))
                    result["export_ms"] = max(_slowest(dist, [(time.perf_counter() - t0) * 1e3]))
                result[kind] = _slowest(dist, times)
            blocks.append(result)
        record["modes"][mode] = summarize(blocks)
    for path in trace_dir.iterdir():
        path.unlink()
    trace_dir.rmdir()
    if rank == 0:
        Path(args.worker_json).write_text(json.dumps(record))
    dist.destroy_process_group()


def summarize(blocks: list[dict]) -> dict:
    off = [t for b in blocks for t in b["off"]]
    on = [t for b in blocks for t in b["on"]]
    block_ratios = [statistics.median(b["on"]) / statistics.median(b["off"]) for b in blocks]
    return {
        "off_median_ms": statistics.median(off),
        "on_median_ms": statistics.median(on),
        "ratio": statistics.median(on) / statistics.median(off),
        "block_ratio_min": min(block_ratios),
        "block_ratio_max": max(block_ratios),
        "export_median_ms": statistics.median(b["export_ms"] for b in blocks),
        "blocks": blocks,
    }


# ---- the benchmark (parent): start the jobs, report --------------------------------------


def start_job(args: argparse.Namespace, worker_json: Path) -> dict:
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={args.nproc}",
        str(Path(__file__).resolve()),
        "--worker-json",
        str(worker_json),
        "--blocks",
        str(args.blocks),
        "--steps",
        str(args.steps),
    ]
    for flag in ("layers", "dim", "batch", "dtype"):
        if getattr(args, flag) is not None:
            cmd += [f"--{flag}", str(getattr(args, flag))]
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
    if proc.returncode != 0:
        sys.exit(f"bench_overhead: job failed (exit {proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}")
    return json.loads(worker_json.read_text())


def report(jobs: list[dict]) -> dict:
    first = jobs[0]
    modes = {}
    for mode in first["modes"]:
        per_job = [job["modes"][mode] for job in jobs]
        ratios = [j["ratio"] for j in per_job]
        modes[mode] = {
            "off_median_ms": statistics.median(j["off_median_ms"] for j in per_job),
            "on_median_ms": statistics.median(j["on_median_ms"] for j in per_job),
            "ratio_median": statistics.median(ratios),
            "ratio_min": min(ratios),
            "ratio_max": max(ratios),
            "block_ratio_min": min(j["block_ratio_min"] for j in per_job),
            "block_ratio_max": max(j["block_ratio_max"] for j in per_job),
            "export_median_ms": statistics.median(j["export_median_ms"] for j in per_job),
            "per_job_ratio": ratios,
        }
    cfg = first["config"]
    print(
        f"profiler overhead: {first['world_size']} ranks, {first['backend']} ({first['device_type']}), "
        f"K={cfg['layers']} layers of {cfg['dim']}x{cfg['dim']} {cfg['dtype']}, batch {cfg['batch']}; "
        f"{len(jobs)} job(s) x {first['blocks']} blocks x {first['steps_per_block']} steps each way"
    )
    header = f"{'mode':<11} {'off ms':>8} {'on ms':>8} {'on/off':>7} {'jobs min-max':>13} {'blocks min-max':>15} {'export ms':>10}"
    print(header)
    for mode, m in modes.items():
        print(
            f"{mode:<11} {m['off_median_ms']:>8.2f} {m['on_median_ms']:>8.2f} {m['ratio_median']:>7.3f} "
            f"{m['ratio_min']:>6.3f}-{m['ratio_max']:<6.3f} {m['block_ratio_min']:>7.3f}-{m['block_ratio_max']:<7.3f} "
            f"{m['export_median_ms']:>10.1f}"
        )
    print(
        "off/on ms: median step time (slowest rank) without/with the profiler; on/off: their ratio, median over jobs;\n"
        "jobs min-max: that ratio's range over jobs; blocks min-max: over blocks (median on / median off per block);\n"
        "export ms: stopping the profiler and writing one trace, once per profiled window, not in the step times."
    )
    return {
        "world_size": first["world_size"],
        "backend": first["backend"],
        "device_type": first["device_type"],
        "config": cfg,
        "jobs": len(jobs),
        "blocks": first["blocks"],
        "steps_per_block": first["steps_per_block"],
        "modes": modes,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nproc", type=int, default=4, help="ranks per job (default: %(default)s, the CPU default of `run`)")
    parser.add_argument("--blocks", type=int, default=5, help="blocks each way per mode (default: %(default)s)")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per block (default: %(default)s)")
    parser.add_argument("--jobs", type=int, default=3, help="separate torchrun jobs, for the run-to-run spread (default: %(default)s)")
    parser.add_argument(
        "--quick", action="store_true", help="smoke run, figures meaningless: 2 ranks, 2 blocks of 2 steps, 1 job, 4 layers of 128x128"
    )
    parser.add_argument("--json", metavar="OUT", help="write the summary here")
    for flag in ("layers", "dim", "batch"):
        parser.add_argument(f"--{flag}", type=int, default=None, help=f"override `run`'s default --{flag}")
    parser.add_argument("--dtype", default=None, help="override `run`'s default --dtype")
    parser.add_argument("--worker-json", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker_json:
        run_job(args)
        return 0
    if args.quick:
        args.nproc, args.blocks, args.steps, args.jobs = 2, 2, 2, 1
        args.layers, args.dim, args.batch = args.layers or 4, args.dim or 128, args.batch or 32
    with tempfile.TemporaryDirectory() as tmp:
        jobs = [start_job(args, Path(tmp) / f"job{i}.json") for i in range(args.jobs)]
    summary = report(jobs)
    if args.json:
        from profile_overlap.core.io import write_json_atomic

        write_json_atomic(Path(args.json), summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
