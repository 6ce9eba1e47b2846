"""What profile_overlap.trace_handler adds to a training job, against torch's tensorboard_trace_handler.

    python benchmarks/bench_trace_handler.py            # 2 ranks, DDP transformer, 6 blocks each way
    python benchmarks/bench_trace_handler.py --quick    # smoke run (figures meaningless)

One torchrun job trains a DDP transformer (profile_overlap.run.models.Transformer; gloo on CPU,
NCCL on GPUs) and alternates blocks of steps: without a profiler ("off"), under torch.profiler with
torch's tensorboard_trace_handler ("torch"), and under torch.profiler with one
profile_overlap.trace_handler made once for the whole job ("ours": its worker process lives across
blocks, as in a real job). The order of the three rotates every block, so drift favours none.
Both profilers record the same (CPU, plus CUDA on GPU, record_shapes=True) on the same schedule:
`--wait` unprofiled steps, 1 warmup step and `--active` recorded steps per cycle, `--cycles`
cycles per block. Every step is timed as `run` times them (a barrier, then perf_counter; CUDA is
synchronised first on GPU), prof.step() included, the slowest rank per step.

Reported, per handler, medians over all blocks:
- profiled cycle: the warmup and recorded steps of one cycle together, the trace export included
  (it runs in the prof.step() that ends the cycle): what a profiled cycle costs the training loop;
- export step: the step whose prof.step() writes the trace;
- unprofiled step: a step of the schedule's wait phase (the profiler idle; our worker may still be
  compressing and analysing the last trace in the background), against steps without a profiler;
and ours / torch for each. After each block of ours, the benchmark waits (untimed) until our
worker is idle, so that its work never lands in another handler's block.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


# ---- one job (every rank) -----------------------------------------------------------------


def run_job(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.profiler import ProfilerAction, ProfilerActivity, profile, schedule, tensorboard_trace_handler

    import profile_overlap
    from profile_overlap.run.models import VOCAB, Transformer

    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    net = Transformer(layers=args.layers, dim=args.dim, heads=4, seq_len=args.seq_len).to(device)
    model = torch.nn.parallel.DistributedDataParallel(net, bucket_cap_mb=1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    data = torch.Generator().manual_seed(rank)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    out = Path(args.out)

    def train_step() -> None:
        tokens = torch.randint(VOCAB, (args.batch, args.seq_len + 1), generator=data).to(device)
        loss = F.cross_entropy(model(tokens[:, :-1]).flatten(0, 1), tokens[:, 1:].flatten())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    def timed(after_step=None) -> float:
        if cuda:
            torch.cuda.synchronize()
        dist.barrier()
        t0 = time.perf_counter()
        train_step()
        if after_step is not None:
            after_step()
        if cuda:
            torch.cuda.synchronize()
        return (time.perf_counter() - t0) * 1e3

    def slowest(times: list[float]) -> list[float]:
        everyone: list = [None] * world
        dist.all_gather_object(everyone, times)
        return [max(step) for step in zip(*everyone)]

    sched = schedule(wait=args.wait, warmup=1, active=args.active, repeat=args.cycles)
    steps_per_block = args.cycles * (args.wait + 1 + args.active)
    actions = [sched(i) for i in range(steps_per_block)]
    ours = profile_overlap.trace_handler(out / "ours")
    theirs = tensorboard_trace_handler(str(out / "torch"))
    for _ in range(args.warmup_steps):
        train_step()

    blocks = []
    order = ["off", "torch", "ours"]
    for block in range(args.blocks):
        result = {}
        for kind in order[block % 3 :] + order[: block % 3]:
            if kind == "off":
                result["off"] = slowest([timed() for _ in range(steps_per_block)])
                continue
            with profile(
                activities=activities, record_shapes=True, schedule=sched, on_trace_ready=ours if kind == "ours" else theirs
            ) as prof:
                times = [timed(prof.step) for _ in range(steps_per_block)]
            result[kind] = slowest(times)
            if kind == "ours":
                t0 = time.perf_counter()
                ours.flush()
                result["drain_ms"] = slowest([(time.perf_counter() - t0) * 1e3])[0]
        blocks.append(result)
    ours.close()
    # The worker is this rank's only child process: its CPU time, per profiled cycle of ours.
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    everyone: list = [None] * world
    dist.all_gather_object(everyone, (usage.ru_utime + usage.ru_stime) / (args.blocks * args.cycles) * 1e3)
    if rank == 0:
        names = [a.name for a in actions]
        record = {"backend": dist.get_backend(), "device_type": device.type, "world_size": world, "actions": names, "blocks": blocks}
        record["config"] = {k: getattr(args, k) for k in ("layers", "dim", "batch", "seq_len", "wait", "active", "cycles", "blocks")}
        record["worker_cpu_ms_per_cycle"] = everyone
        record["ours_job_dir"] = str(ours.job_dir)
        record["ours_trace_mb"] = sum(p.stat().st_size for p in ours.job_dir.glob("*.pt.trace.json.gz")) / 2**20
        record["torch_trace_mb"] = sum(p.stat().st_size for p in (out / "torch").glob("*")) / 2**20
        assert ProfilerAction.RECORD_AND_SAVE.name in names
        Path(args.worker_json).write_text(json.dumps(record))
    dist.destroy_process_group()


# ---- the benchmark (parent): start the job, report ----------------------------------------


def summarize(record: dict) -> dict:
    actions = record["actions"]
    wait = [i for i, a in enumerate(actions) if a == "NONE"]
    save = [i for i, a in enumerate(actions) if a == "RECORD_AND_SAVE"]
    cycles, start = [], None
    for i, a in enumerate(actions):
        if a == "WARMUP":
            start = i
        if a == "RECORD_AND_SAVE":
            cycles.append(range(start, i + 1))
    out = {"off_step_ms": statistics.median(t for b in record["blocks"] for t in b["off"])}
    for kind in ("torch", "ours"):
        times = [b[kind] for b in record["blocks"]]
        out[kind] = {
            "cycle_ms": statistics.median(sum(t[i] for i in c) for t in times for c in cycles),
            "export_step_ms": statistics.median(t[i] for t in times for i in save),
            "wait_step_ms": statistics.median(t[i] for t in times for i in wait),
        }
    out["ratio"] = {k: out["ours"][k] / out["torch"][k] for k in ("cycle_ms", "export_step_ms", "wait_step_ms")}
    per_block = [
        statistics.median(sum(b["ours"][i] for i in c) for c in cycles) / statistics.median(sum(b["torch"][i] for i in c) for c in cycles)
        for b in record["blocks"]
    ]
    out["cycle_ratio_blocks"] = [min(per_block), max(per_block)]
    out["wait_vs_off"] = {k: out[k]["wait_step_ms"] / out["off_step_ms"] for k in ("torch", "ours")}
    out["drain_ms"] = statistics.median(b["drain_ms"] for b in record["blocks"])
    out["worker_cpu_ms_per_cycle"] = record["worker_cpu_ms_per_cycle"]
    return out


def report(record: dict, s: dict) -> None:
    cfg = record["config"]
    print(
        f"trace handler overhead: {record['world_size']} ranks, {record['backend']} ({record['device_type']}), DDP transformer "
        f"K={cfg['layers']} dim {cfg['dim']}, batch {cfg['batch']} x {cfg['seq_len']} tokens; {cfg['blocks']} blocks of "
        f"{cfg['cycles']} cycles (wait {cfg['wait']}, warmup 1, active {cfg['active']}) per handler, steps without a profiler as many"
    )
    print(f"{'':<34} {'torch':>9} {'ours':>9} {'ours/torch':>11}")
    rows = (
        ("profiled cycle (warmup+active+export)", "cycle_ms"),
        ("export step", "export_step_ms"),
        ("unprofiled step (wait)", "wait_step_ms"),
    )
    for label, key in rows:
        print(f"{label:<34} {s['torch'][key]:>9.1f} {s['ours'][key]:>9.1f} {s['ratio'][key]:>11.3f}")
    print(f"{'step without a profiler':<34} {s['off_step_ms']:>9.1f}")
    print(
        f"unprofiled step / step without a profiler: torch {s['wait_vs_off']['torch']:.3f}, ours {s['wait_vs_off']['ours']:.3f}; "
        f"our worker's work left after a block: {s['drain_ms']:.0f} ms (median); traces: torch {record['torch_trace_mb']:.1f} MiB, "
        f"ours {record['ours_trace_mb']:.1f} MiB gzipped"
    )
    cpu = ", ".join(f"rank {r} {ms:.0f}" for r, ms in enumerate(s["worker_cpu_ms_per_cycle"]))
    print(f"our workers' CPU time per profiled cycle (ms; rank 0's includes the job's record and report after each block): {cpu}")
    lo, hi = s["cycle_ratio_blocks"]
    print(f"profiled cycle ours/torch per block: {lo:.3f} to {hi:.3f}; load average before/after: {s['load']}")
    print("times in ms, medians over every block; the slowest rank per step; prof.step() included in its step")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nproc", type=int, default=2, help="ranks (default: %(default)s)")
    parser.add_argument("--blocks", type=int, default=6, help="blocks per handler (default: %(default)s)")
    parser.add_argument("--cycles", type=int, default=2, help="profiler cycles per block (default: %(default)s)")
    parser.add_argument("--wait", type=int, default=4, help="unprofiled steps per cycle (default: %(default)s)")
    parser.add_argument("--active", type=int, default=3, help="recorded steps per cycle (default: %(default)s)")
    parser.add_argument("--warmup-steps", type=int, default=3, help="untimed steps before the blocks (default: %(default)s)")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--quick", action="store_true", help="smoke run, figures meaningless: 2 blocks, 1 cycle, dim 64")
    parser.add_argument("--json", metavar="OUT", help="write the summary here")
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--worker-json", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker_json:
        run_job(args)
        return 0
    if args.quick:
        args.blocks, args.cycles, args.wait, args.active, args.dim, args.layers = 3, 1, 2, 2, 64, 2
    load_before = os.getloadavg()[0]
    tmp = Path(tempfile.mkdtemp(prefix="bench_trace_handler_"))
    try:
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc-per-node={args.nproc}",
            str(Path(__file__).resolve()),
        ]
        for name in ("blocks", "cycles", "wait", "active", "warmup_steps", "layers", "dim", "batch", "seq_len"):
            cmd += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
        cmd += ["--out", str(tmp / "runs"), "--worker-json", str(tmp / "job.json")]
        env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
        if proc.returncode != 0:
            sys.exit(f"bench_trace_handler: job failed (exit {proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}")
        record = json.loads((tmp / "job.json").read_text())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    summary = summarize(record)
    summary["load"] = f"{load_before:.2f} / {os.getloadavg()[0]:.2f}"
    report(record, summary)
    if args.json:
        Path(args.json).write_text(json.dumps({"config": record["config"], **summary}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
