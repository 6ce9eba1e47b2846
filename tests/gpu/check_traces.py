"""What a GPU run's folder (or a user job's log_dir, with --job) must show; prints a table a reader
can check. Used by check.sh and tests/test_gpu.py. Exit 1 with every failed expectation named.

    python tests/gpu/check_traces.py RUN_DIR NUM_GPUS          # a run of ours (compare, any modes)
    python tests/gpu/check_traces.py --job LOG_DIR NUM_GPUS    # a user's job written by profile_overlap.profile

Reads the traces with plain json, so that it checks the analysis rather than repeating it.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from collections import Counter
from pathlib import Path

from profile_overlap.analysis.read.classify import COMM_KERNEL_RE, MEMORY_KERNEL_RE, SYNC_KERNEL_RE

GIB = 2**30
DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
GPU_BOUND_MAX = 1.5
"""A timed step may take at most this times the GPU's busy time per profiled step (+1 ms): the steps
time the GPU's work, not the host's (issue 39: the host-drawn batches made an 8192-wide mlp step
about 0.7 s against about 45 ms of kernels)."""
GPU_BOUND_MIN = 0.8
"""...and at least this times it (-0.5 ms): the CUDA events see the step's kernels."""
PEAK_SLACK = 0.10
"""split's peak may exceed sequential's, less split's optimizer-state saving, by this share of
sequential's peak (transient buckets differ a little); a leaked previous mode is far more."""
SYNC_COLLECTIVE_MODES = {"sequential"}
"""Modes whose profiled collectives are blocking: on torch 2.13 a blocking collective runs on the
current stream by design (pytorch PR 150398), so only the other modes' NCCL kernels must have
streams of their own."""


def read_trace(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return json.load(f)["traceEvents"]


def device_summary(events: list[dict]) -> dict:
    """Compute and NCCL kernels per stream, the GPU's busy time (the union of kernel, memcpy and
    memset intervals, all streams) and the number of profiler steps of one trace."""
    compute, comm = Counter(), Counter()
    spans = []
    steps = set()
    for e in events:
        name = str(e.get("name", ""))
        if name.startswith("ProfilerStep#"):
            steps.add(name)
        cat = str(e.get("cat", "")).lower()
        if cat not in DEVICE_CATS or "dur" not in e:
            continue
        spans.append((float(e["ts"]), float(e["ts"]) + float(e["dur"])))
        if cat != "kernel":
            continue
        stream = e.get("args", {}).get("stream")
        if COMM_KERNEL_RE.search(name):
            comm[stream] += 1
        elif not (MEMORY_KERNEL_RE.search(name) or SYNC_KERNEL_RE.search(name)):
            compute[stream] += 1
    busy, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b > end:
            busy += b - max(a, end)
            end = b
    return {"compute": compute, "comm": comm, "busy_us": busy, "steps": len(steps)}


def traces_of(folder: Path) -> list[Path]:
    return sorted([*folder.glob("*.pt.trace.json.gz"), *folder.glob("*.pt.trace.json")])


def check_run(run_dir: Path, num_gpus: int) -> list[str]:
    if not (run_dir / "metrics.json").is_file():
        return [f"{run_dir} has no metrics.json: the run did not finish (its log says why)"]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    env = metrics["env"]
    problems = []
    if json.loads((run_dir / "status.json").read_text())["state"] != "succeeded":
        problems.append("status.json is not succeeded")
    if env["backend"] != "nccl":
        problems.append(f"backend {env['backend']}, not nccl")
    print(
        f"\nGPU check of {run_dir.name}: {env['ranks'][0]['device']} x{num_gpus}, torch {env['torch']}, CUDA {env['cuda']}, "
        f"NCCL {env['nccl']}, backend {env['backend']}, world size {env['world_size']}"
    )
    print(
        f"{'mode':<15} {'step ms median (p10-p90)':>25} {'timer':>20} {'GPU busy ms/step':>17} {'step/busy':>9} "
        f"{'kernels':>8} {'NCCL kernels':>12} {'compute streams':>15} {'NCCL streams':>12} {'overlap %':>9} "
        f"{'peak GiB':>8} {'state GiB':>9} {'opt GiB':>7}"
    )
    peaks: dict[str, float | None] = {}
    for mode, m in metrics["modes"].items():
        traces = traces_of(run_dir / mode)
        if len(traces) != num_gpus:
            problems.append(f"{mode}: {len(traces)} traces for {num_gpus} ranks")
        compute, comm = Counter(), Counter()
        busy_per_step = []
        for t in traces:
            s = device_summary(read_trace(t))
            compute += s["compute"]
            comm += s["comm"]
            if s["steps"]:
                busy_per_step.append(s["busy_us"] / s["steps"] / 1e3)
        busy = max(busy_per_step) if busy_per_step else 0.0
        st = m["step_time"]
        ranks = (m.get("analysis") or {}).get("ranks", [])
        pct = ranks[0]["overlap_pct"] if ranks else None
        memory = m["memory"]
        peak_bytes = [x["peak_allocated_bytes"] for x in memory if x["peak_allocated_bytes"] is not None]
        peak = max(peak_bytes) / GIB if peak_bytes else None
        peaks[mode] = peak
        state = max(x["param_bytes"] + x["grad_bytes"] + x["optimizer_state_bytes"] for x in memory) / GIB
        held = min(x["param_bytes"] + x["optimizer_state_bytes"] for x in memory) / GIB
        opt = max(x["optimizer_state_bytes"] for x in memory) / GIB
        ratio = st["median_ms"] / busy if busy else float("nan")
        print(
            f"{mode:<15} {st['median_ms']:>9.2f} ({st['p10_ms']:.2f}-{st['p90_ms']:.2f}) {st['method']:>20} {busy:>17.2f} {ratio:>9.2f} "
            f"{sum(compute.values()):>8} {sum(comm.values()):>12} {','.join(map(str, sorted(compute))) or '-':>15} "
            f"{','.join(map(str, sorted(comm))) or '-':>12} {'-' if pct is None else f'{pct:.1f}':>9} "
            f"{'-' if peak is None else f'{peak:.2f}':>8} {state:>9.2f} {opt:>7.2f}"
        )
        if st["method"] != "cuda_events":
            problems.append(f"{mode}: steps not timed with CUDA events")
        if not compute:
            problems.append(f"{mode}: no compute kernels in the traces (CUDA activity missing)")
        elif not GPU_BOUND_MIN * busy - 0.5 <= st["median_ms"] <= GPU_BOUND_MAX * busy + 1.0:
            problems.append(
                f"{mode}: a timed step took {st['median_ms']:.2f} ms against {busy:.2f} ms of GPU work per profiled step "
                f"(allowed {GPU_BOUND_MIN}x-{GPU_BOUND_MAX}x): the steps do not time the GPU's work"
            )
        if not ranks or any(r["device"] != "cuda" for r in ranks):
            problems.append(f"{mode}: analysis did not see a GPU trace")
        if peak is None:
            problems.append(f"{mode}: no peak memory recorded (torch.cuda.max_memory_allocated)")
        elif peak < held:
            problems.append(f"{mode}: peak {peak:.2f} GiB below the {held:.2f} GiB of parameters and optimizer state it holds")
        # Each phase label's range holds the kernels it launched (on any thread).
        for r in ranks:
            phases = {p["phase"]: p for p in r.get("phases", [])}
            missing = [p for p in ("forward", "backward", "optimizer") if phases.get(p, {}).get("compute_us", 0) <= 0]
            if missing:
                problems.append(f"{mode}: rank {r['rank']} has no compute in phase(s) {', '.join(missing)}")
        if num_gpus > 1:
            if not comm:
                problems.append(f"{mode}: no NCCL kernels with {num_gpus} ranks")
            if mode not in SYNC_COLLECTIVE_MODES and set(comm) & set(compute):
                problems.append(f"{mode}: async NCCL kernels share a stream with compute kernels: {set(comm) & set(compute)}")
    problems += _memory_against_sequential(metrics, peaks)
    if num_gpus == 1:
        print(
            "world size 1: NCCL's one-rank path launches no NCCL kernel, so the NCCL and overlap columns show what "
            "ran, nothing is made up; this covers CUDA, CUDA events, the profiler's CUDA activity, the phases' "
            "device windows (the kernels their ranges launched), the memory peaks and the DDP/FSDP2 wiring, not NCCL "
            "kernels (multi-rank NCCL traces are checked in CI from tests/data)."
        )
    checks = [c for m in metrics["modes"].values() for c in m["checks"]] + metrics["checks"]
    if not checks:
        problems.append("no verification check ran")
    for c in checks:
        print(("OK     " if c["passed"] else "FAILED ") + c["name"] + f" (max error {c['max_abs_err']}, tolerance {c['tolerance']})")
        if not c["passed"]:
            problems.append(c["name"])
    return problems


def _memory_against_sequential(metrics: dict, peaks: dict[str, float | None]) -> list[str]:
    """split's peak is below sequential's by split's optimizer-state saving (none at world size 1)."""
    seq, split = peaks.get("sequential"), peaks.get("split")
    if seq is None or split is None:
        return []
    opt = {mode: max(x["optimizer_state_bytes"] for x in metrics["modes"][mode]["memory"]) / GIB for mode in ("sequential", "split")}
    saving = opt["sequential"] - opt["split"]
    allowed = seq - saving + PEAK_SLACK * seq
    print(
        f"memory: split's peak {split:.2f} GiB; sequential's {seq:.2f} GiB less split's optimizer-state saving {saving:.2f} GiB, "
        f"plus {PEAK_SLACK:.0%} of it, allows {allowed:.2f} GiB"
    )
    if split > allowed:
        return [f"split's peak {split:.2f} GiB is above sequential's less its optimizer saving ({allowed:.2f} GiB allowed)"]
    return []


def check_job(log_dir: Path, num_gpus: int) -> list[str]:
    """A user's job (examples/ddp_train.py, examples/fsdp2_train.py): its record, on GPU traces."""
    jobs = [p for p in log_dir.iterdir() if p.is_dir() and not p.name.startswith(".")] if log_dir.is_dir() else []
    if len(jobs) != 1:
        return [f"{log_dir}: {len(jobs)} job folders, expected 1"]
    job = jobs[0]
    problems = []
    status = job / "status.json"
    state = json.loads(status.read_text())["state"] if status.is_file() else "missing"
    if state != "succeeded":
        problems.append(f"{job.name}: status {state}")
    for name in ("metrics.json", "report.html"):
        if not (job / name).is_file():
            problems.append(f"{job.name}: no {name}")
    traces = traces_of(job)
    compute = Counter()
    for t in traces:
        compute += device_summary(read_trace(t))["compute"]
    if not compute:
        problems.append(f"{job.name}: no compute kernels in its {len(traces)} traces (CUDA activity missing)")
    devices: list[str] = []
    if (job / "metrics.json").is_file():
        metrics = json.loads((job / "metrics.json").read_text())
        if metrics["env"]["backend"] != "nccl":
            problems.append(f"{job.name}: backend {metrics['env']['backend']}, not nccl")
        devices = sorted({r["device"] for m in metrics["modes"].values() for r in (m.get("analysis") or {}).get("ranks", [])})
        if devices != ["cuda"]:
            problems.append(f"{job.name}: analysis saw {devices or 'no'} traces, not cuda")
        ranks = {r["rank"] for r in metrics["env"]["ranks"]}
        if len(ranks) != num_gpus:
            problems.append(f"{job.name}: {len(ranks)} ranks recorded for {num_gpus} GPUs")
    print(f"job {job.name}: status {state}, {len(traces)} traces, {sum(compute.values())} compute kernels, analysis devices {devices}")
    return problems


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="a run folder, or with --job a user job's log_dir")
    parser.add_argument("num_gpus", type=int)
    parser.add_argument("--job", action="store_true", help="folder is a user job's log_dir")
    args = parser.parse_args(argv)
    problems = (check_job if args.job else check_run)(args.folder, args.num_gpus)
    for p in problems:
        print("PROBLEM:", p)
    print(f"GPU check of {args.folder.name}:", "PASSED" if not problems else "FAILED")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
