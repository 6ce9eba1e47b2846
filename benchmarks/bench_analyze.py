"""Benchmark `analyze` against the floor (a bare orjson.loads of the same files) and, when it is
installed, Holistic Trace Analysis. Every measurement runs in a fresh Python process so that its
peak memory (RSS high-water, children included) is its own.

    python benchmarks/bench_analyze.py              # two ranks of ~76 MB, 5 runs, scaling 2/8/32 ranks
    python benchmarks/bench_analyze.py --mb 100     # per-rank size (10, 50, 100 ...)
    python benchmarks/bench_analyze.py --quick      # smoke run: small files, 2 runs
    python benchmarks/bench_analyze.py --baseline /tmp/base   # beside another checkout, run by run
    python benchmarks/bench_analyze.py --many 1024  # also 1,024 ranks of small files (time and peak RSS)
    python benchmarks/bench_analyze.py --large 0.5,1,2,4 --tmp /tmp   # one trace of each size (GB): peak RSS, CPU
    python benchmarks/bench_analyze.py --large 1 --tmp /tmp --baseline /tmp/base   # and the baseline on each file
    python benchmarks/bench_analyze.py --parse --baseline /tmp/base   # the streaming parse alone, beside the baseline
    python benchmarks/bench_analyze.py --command --tmp /tmp --many 1024   # the `analyze` command as a user runs it (below)

Targets: analysis time <= 1.5x the floor; peak memory <= 1.5x the largest uncompressed file.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from synthetic import write_large_trace  # noqa: E402

# Each child prints {"seconds": ..., "peak_rss_mb": ...}. Timing starts after imports.
_CHILD = {
    "floor": """
import gzip, orjson, sys, time
from pathlib import Path
t = time.perf_counter()
paths = [Path(p) for p in sys.argv[1:]]
if len(paths) == 1 and paths[0].is_dir():
    paths = sorted(paths[0].glob("*.json*"))
for p in paths:
    with (gzip.open(p) if p.name.endswith(".gz") else open(p, "rb")) as f:
        doc = orjson.loads(f.read())
    del doc
seconds = time.perf_counter() - t
""",
    "ours_1proc": """
import sys, time
from pathlib import Path
from profile_overlap.analysis.folder import analyze_dir
t = time.perf_counter()
analyze_dir(Path(sys.argv[1]).parent, max_workers=1)
seconds = time.perf_counter() - t
""",
    "ours": """
import sys, time
from pathlib import Path
from profile_overlap.analysis.folder import analyze_dir
t = time.perf_counter()
analyze_dir(Path(sys.argv[1]).parent)
seconds = time.perf_counter() - t
""",
    "cli": """
import contextlib, io, sys, time
from pathlib import Path
t = time.perf_counter()
from profile_overlap.cli.main import main
with contextlib.redirect_stdout(io.StringIO()):
    assert main(["analyze", str(Path(sys.argv[1]).parent)]) == 0
seconds = time.perf_counter() - t
""",
    "parse": """
import sys, time
from pathlib import Path
from profile_overlap.analysis.read.trace import load_trace
t = time.perf_counter()
for p in sys.argv[1:]:
    load_trace(Path(p))
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
# CPU seconds: user + system of this process and its workers, imports included (steadier than
# wall time on a shared machine).
_REPORT = """
import json, resource
hwm_kb = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
peak_kb = max(hwm_kb, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
cpu_s = sum(u.ru_utime + u.ru_stime for u in map(resource.getrusage, (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)))
print(json.dumps({"seconds": seconds, "peak_rss_mb": peak_kb / 1024, "cpu_s": cpu_s}))
"""


def measure(kind: str, files: list[Path], *, tree: Path | None = None) -> dict:
    """One fresh process; `tree`: import profile_overlap from that source tree instead of ours."""
    env = dict(os.environ, PYTHONPATH=str(tree or REPO))
    # Many files would overflow the command line: the floor gets their folder instead, the
    # others the first file (they read its folder).
    args = files if len(files) <= 64 else [files[0].parent] if kind == "floor" else files[:1]
    p = subprocess.run(
        [sys.executable, "-c", _CHILD[kind] + _REPORT, *map(str, args)], capture_output=True, text=True, cwd=tree or REPO, env=env
    )
    if p.returncode != 0:
        raise RuntimeError(f"{kind} failed:\n{p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def measure_command(folder: Path, *, json_out: Path | None, console: Path, tree: Path | None = None) -> dict:
    """`python -m profile_overlap analyze DIR [--json OUT]` as a user runs it: a fresh interpreter
    (start and imports included), the console written to a file (not a terminal: COLUMNS=140);
    wall time around the process, peak RSS its own or its largest worker's (wait4's ru_maxrss)."""
    import time

    env = dict(os.environ, PYTHONPATH=str(tree or REPO), COLUMNS="140")
    cmd = [sys.executable, "-m", "profile_overlap", "analyze", str(folder)] + (["--json", str(json_out)] if json_out else [])
    with console.open("w") as out:
        t = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.PIPE, cwd=tree or REPO, env=env)
        _, status, usage = os.wait4(p.pid, 0)
        seconds = time.perf_counter() - t
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        raise RuntimeError(f"analyze {folder} failed: {p.stderr.read().decode()[-2000:] if p.stderr else ''}")
    return {"seconds": seconds, "peak_rss_mb": usage.ru_maxrss / 1024, "cpu_s": usage.ru_utime + usage.ru_stime}


def compiled(tree: Path | None) -> None:
    """The tree's modules compiled to bytecode first, as pip compiles an installed package: under
    PYTHONDONTWRITEBYTECODE=1 (this machine's environment) an editable install compiles every module
    it imports at every start, about 0.1 s of the command's 3 s at 1,024 ranks, which a user's
    installed copy does not pay."""
    import compileall

    if tree is not None:
        compileall.compile_dir(str(tree / "profile_overlap"), quiet=1)


def command(cases: list[tuple[str, Path, list[Path], float]], *, runs: int, tmp: Path, baseline: Path | None) -> None:
    """Per case (label, folder, files, GB uncompressed), run by run in turn: the floor, analyze_dir in
    process (default workers), the command, the command with --json (and the baseline's two commands);
    medians, and the median of each run's ratio to that run's floor (steadier on a busy machine); CPU is
    user + system time, workers included (steadier still than wall time under load)."""
    kinds = ["floor", "ours", "cmd", "cmd_json"] + (["base_cmd", "base_cmd_json"] if baseline else [])
    for tree in (REPO, baseline):
        compiled(tree)
    label = {
        "floor": "floor: orjson.loads (gzip first for .gz), one file after the other",
        "ours": "analyze_dir in process (one worker per core), imports excluded",
        "cmd": "`analyze DIR`, console to a file",
        "cmd_json": "`analyze DIR --json OUT`, console to a file",
        "base_cmd": f"baseline ({baseline}) `analyze DIR`",
        "base_cmd_json": f"baseline ({baseline}) `analyze DIR --json OUT`",
    }
    for name, folder, files, gb in cases:
        got: dict[str, list[dict]] = {k: [] for k in kinds}
        for _ in range(runs):
            for kind in kinds:
                tree = baseline if kind.startswith("base_") else None
                if kind == "floor":
                    got[kind].append(measure("floor", files))
                elif kind == "ours":
                    got[kind].append(measure("ours", files))
                else:
                    json_out = tmp / "out.json" if kind.endswith("_json") else None
                    got[kind].append(measure_command(folder, json_out=json_out, console=tmp / "console.txt", tree=tree))
        load = os.getloadavg()[0]
        print(f"\n{name}: {len(files):,} files, {gb:.3f} GB uncompressed; {runs} runs, the kinds alternating; load average {load:.1f}\n")
        print("| what | time (s), median | x floor (median of per-run ratios) | CPU (s) | CPU x floor | peak RSS (MiB) | MiB per GB |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for kind in kinds:
            secs = statistics.median(r["seconds"] for r in got[kind])
            ratio = statistics.median(a["seconds"] / f["seconds"] for a, f in zip(got[kind], got["floor"]))
            cpu = statistics.median(r["cpu_s"] for r in got[kind])
            cpu_ratio = statistics.median(a["cpu_s"] / f["cpu_s"] for a, f in zip(got[kind], got["floor"]))
            peak = max(r["peak_rss_mb"] for r in got[kind])
            print(f"| {label[kind]} | {secs:.2f} | {ratio:.2f} | {cpu:.2f} | {cpu_ratio:.2f} | {peak:.0f} | {peak / gb:.0f} |", flush=True)


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


def tile_real_trace(source: Path, folder: Path, *, ranks: int, mb: float) -> tuple[list[Path], float, int]:
    """Copies of a real trace's steps laid end to end until each rank's file reaches `mb`:
    timestamps shifted by the trace's span, ProfilerStep numbers, correlation, External id and
    flow ids offset so every link stays unique. Returns the files, the uncompressed size and
    the number of tiles (our comm_us must be exactly tiles x the source's)."""
    import gzip

    import orjson

    doc = orjson.loads(gzip.open(source).read() if source.suffix == ".gz" else source.read_bytes())
    events = doc["traceEvents"]
    timed = [e for e in events if "ts" in e and e.get("ph") != "M"]
    start = min(e["ts"] for e in timed)
    span = max(e["ts"] + e.get("dur", 0) for e in timed) - start + 1000.0
    tile_bytes = len(orjson.dumps(events))
    tiles = max(1, round(mb * 1e6 / tile_bytes))
    folder.mkdir(parents=True, exist_ok=True)
    files = []
    for rank in range(ranks):
        out = []
        for k in range(tiles):
            for e in events:
                if e.get("ph") == "M":
                    if k == 0:
                        out.append(e)
                    continue
                e = dict(e, ts=e["ts"] + k * span) if "ts" in e else dict(e)
                if "id" in e and e.get("ph") in ("s", "f", "t"):
                    e["id"] = e["id"] + k * 10**9 if isinstance(e["id"], int) else f"{e['id']}-{k}"
                if "args" in e:
                    args = dict(e["args"])
                    for key in ("correlation", "External id"):
                        if isinstance(args.get(key), int):
                            args[key] += k * 10**9
                    e["args"] = args
                name = e.get("name", "")
                if name.startswith("ProfilerStep#"):
                    e["name"] = f"ProfilerStep#{int(name[13:]) + k * 1000}"
                out.append(e)
        info = dict(doc.get("distributedInfo", {}), rank=rank, world_size=ranks)
        path = folder / f"rank{rank}.pt.trace.json.gz"
        body = orjson.dumps({**{k: v for k, v in doc.items() if k != "traceEvents"}, "distributedInfo": info, "traceEvents": out})
        path.write_bytes(gzip.compress(body, compresslevel=6))
        files.append(path)
    return files, len(body), tiles


def many(folder: Path, *, ranks: int, kb: float, runs: int) -> None:
    """Many ranks of small files: what must not be dominated by process start or imports."""
    folder.mkdir(parents=True, exist_ok=True)
    files, expected = [], []
    for rank in range(ranks):
        path = folder / f"rank{rank}.pt.trace.json.gz"
        expected.append(write_large_trace(path, target_bytes=int(kb * 1e3), rank=rank, world_size=ranks, layers_per_step=20))
        files.append(path)
    from profile_overlap.analysis.folder import analyze_dir

    result = analyze_dir(folder)
    assert [r.rank for r in result.ranks] == list(range(ranks))
    for r, e in zip(result.ranks, expected):
        assert (r.comm_us, r.compute_us, r.overlap_us) == (e.comm_us, e.compute_us, e.overlap_us), (r, e)
    rows = {}
    for kind in ("floor", "ours_1proc", "ours", "cli"):
        got = [measure(kind, files) for _ in range(runs)]
        rows[kind] = (statistics.median(r["seconds"] for r in got), max(r["peak_rss_mb"] for r in got))
    print()
    print(
        f"Many ranks: {ranks} files x {expected[0].nbytes / 1e3:.0f} kB uncompressed ({expected[0].num_events:,} events each, "
        f"{sum(f.stat().st_size for f in files) / 1e6:.1f} MB gzipped in all), median of {runs}"
    )
    print()
    print("| what | time (s) | x floor | ms per file | peak RSS (MiB) |")
    print("|---|---:|---:|---:|---:|")
    label = {
        "floor": "floor: gzip + orjson.loads, one file after the other",
        "ours_1proc": "profile_overlap analyze_dir, 1 process",
        "ours": "profile_overlap analyze_dir, one process per core",
        "cli": "the `analyze DIR` command: imports and console tables included (output discarded)",
    }
    for kind, (s, mb) in rows.items():
        print(f"| {label[kind]} | {s:.2f} | {s / rows['floor'][0]:.2f} | {1000 * s / ranks:.1f} | {mb:.0f} |")


def large(sizes_gb: list[float], tmp: Path, baseline: Path | None = None) -> int:
    """Peak memory against the file size: one trace per size, the largest also gzipped, analysed in
    process (analyze_dir, one worker) and by the command as a user runs it (`analyze DIR --json OUT`);
    with a baseline, that tree on the same file right after."""
    import shutil

    before = " baseline: CPU (s) | baseline: peak RSS (MiB) | baseline: command's peak (MiB) |" if baseline else ""
    print(
        "| file | events | time (s) | CPU (s) | peak RSS (MiB) | MiB per GB |"
        " command: time (s) | command: peak RSS (MiB) | command: MiB per GB |" + before
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|" + "---:|---:|---:|" * bool(baseline))
    cases = [(gb, ".json") for gb in sizes_gb] + [(max(sizes_gb), ".json.gz")]
    for gb, suffix in cases:
        if shutil.disk_usage(tmp).free < 1.2 * gb * 1e9:
            print(f"| {gb:g} GB{suffix} | skipped: not enough free space in {tmp} | | | | |")
            continue
        folder = Path(tempfile.mkdtemp(prefix="bench_large_", dir=tmp))
        try:
            path = folder / f"rank0.pt.trace{suffix}"
            e = write_large_trace(path, target_bytes=int(gb * 1e9), rank=0, world_size=1)
            got = measure("ours_1proc", [path])
            # The command as a user runs it (`analyze DIR --json OUT`, console to a file): its own process.
            # Its outputs beside the folder, not in it (a later run would read them as traces).
            out = Path(f"{folder}.out")
            out.mkdir()
            cmd = measure_command(folder, json_out=out / "a.json", console=out / "console.txt")
            base = measure("ours_1proc", [path], tree=baseline) if baseline else None
            base_cmd = measure_command(folder, json_out=out / "b.json", console=out / "console.txt", tree=baseline) if baseline else None
            gb_file = e.nbytes / 1e9
            print(
                f"| {gb_file:.2f} GB{' gzipped' if suffix.endswith('gz') else ''} | {e.num_events:,} | "
                f"{got['seconds']:.1f} | {got['cpu_s']:.1f} | {got['peak_rss_mb']:.0f} | {got['peak_rss_mb'] / gb_file:.0f} | "
                f"{cmd['seconds']:.1f} | {cmd['peak_rss_mb']:.1f} | {cmd['peak_rss_mb'] / gb_file:.1f} |"
                + (
                    f" {base.get('cpu_s', float('nan')):.1f} | {base['peak_rss_mb']:.0f} | {base_cmd['peak_rss_mb']:.1f} |"
                    if base and base_cmd
                    else ""
                ),
                flush=True,
            )
        finally:
            shutil.rmtree(folder)
            shutil.rmtree(f"{folder}.out", ignore_errors=True)
    return 0


def parse_only(files: list[Path], nbytes: int, *, runs: int, baseline: Path | None) -> int:
    """The streaming parse alone (trace.load_trace of each file, one after the other, in a fresh
    process), ours and the baseline alternating run by run."""
    got: dict[str, list[dict]] = {"ours": [], "base": []}
    for _ in range(runs):
        got["ours"].append(measure("parse", files))
        if baseline:
            got["base"].append(measure("parse", files, tree=baseline))
    print(f"load_trace of {len(files)} files x {nbytes / 1e6:.1f} MB uncompressed, {runs} runs" + (", alternating" if baseline else ""))
    print()
    print("| tree | median time (s) | runs (s) | MB/s | peak RSS (MiB) |")
    print("|---|---:|---|---:|---:|")
    for kind, label in (("ours", str(REPO)), ("base", f"baseline {baseline}")):
        if got[kind]:
            times = [r["seconds"] for r in got[kind]]
            med = statistics.median(times)
            print(
                f"| {label} | {med:.3f} | {', '.join(f'{t:.2f}' for t in times)} | {len(files) * nbytes / 1e6 / med:.0f} "
                f"| {max(r['peak_rss_mb'] for r in got[kind]):.0f} |"
            )
    if baseline:
        ratio = statistics.median(r["seconds"] for r in got["ours"]) / statistics.median(r["seconds"] for r in got["base"])
        print(f"\nours / baseline (medians): {ratio:.3f}x")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=76, help="uncompressed size of each rank's trace (default 76)")
    ap.add_argument("--ranks", type=int, default=2, help="ranks in the main comparison (default 2)")
    ap.add_argument("--runs", type=int, default=5, help="runs per measurement; medians are reported (default 5)")
    ap.add_argument("--scaling", default="2,8,32", help="rank counts for the scaling table (default 2,8,32)")
    ap.add_argument("--scaling-mb", type=float, default=4, help="per-rank size in the scaling table (default 4)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 2 x 5 MB, 2 runs, scaling 2,8 ranks of 1 MB")
    ap.add_argument("--many", type=int, default=0, metavar="N", help="also N ranks of small files (e.g. 1024), time and peak RSS")
    ap.add_argument(
        "--large",
        metavar="GB,...",
        help="only this: one trace of each size (e.g. 0.5,1,2,4; the largest also gzipped) written to --tmp, analysed "
        "in a fresh process (time, peak RSS), then deleted",
    )
    ap.add_argument(
        "--parse",
        action="store_true",
        help="only this: the streaming parse (load_trace) of --ranks files of --mb, timed in fresh processes (beside --baseline)",
    )
    ap.add_argument("--tmp", type=Path, default=Path(tempfile.gettempdir()), help="where --large and --command write their files")
    ap.add_argument(
        "--command",
        action="store_true",
        help="only this: the `analyze` command as a user runs it (fresh process, console to a file, with and without --json) "
        "beside analyze_dir in process and the floor, on --ranks x --mb plain and gzipped, and on --many N files of --many-kb",
    )
    ap.add_argument("--many-kb", type=float, default=100, help="uncompressed size of each of the --many files in kB (default 100)")
    ap.add_argument(
        "--from-trace",
        type=Path,
        metavar="TRACE",
        help="instead of synthetic traces, tile this real trace (e.g. tests/data/hta_nccl_parser_config_1rank/"
        "nccl_data.json.gz) up to --mb per rank; no scaling table",
    )
    ap.add_argument(
        "--baseline",
        type=Path,
        metavar="TREE",
        help="another source tree of profile_overlap (e.g. `git archive main | tar -x -C /tmp/base`): its analyze_dir is "
        "timed beside ours, the two alternating run by run, and the ratio printed (with --large: run on each file after ours)",
    )
    args = ap.parse_args()
    if args.quick:
        args.mb, args.runs, args.scaling, args.scaling_mb = 5, 2, "2,8", 1

    if args.large:
        return large([float(x) for x in args.large.split(",")], args.tmp, args.baseline)
    if args.command:
        with tempfile.TemporaryDirectory(prefix="bench_command_", dir=args.tmp) as tmp_dir:
            tmp = Path(tmp_dir)
            cases = []
            for suffix, name in ((".json", "plain"), (".json.gz", "gzipped")):
                folder = tmp / name
                folder.mkdir()
                files = [folder / f"rank{r}.pt.trace{suffix}" for r in range(args.ranks)]
                mb = int(args.mb * 1e6)
                sizes = [write_large_trace(f, target_bytes=mb, rank=r, world_size=args.ranks).nbytes for r, f in enumerate(files)]
                cases.append((f"{args.ranks} x {sizes[0] / 1e6:.1f} MB, {name}", folder, files, sum(sizes) / 1e9))
            if args.many:
                folder = tmp / "many"
                folder.mkdir()
                files = [folder / f"rank{r}.pt.trace.json.gz" for r in range(args.many)]
                sizes = [
                    write_large_trace(f, target_bytes=int(args.many_kb * 1e3), rank=r, world_size=args.many, layers_per_step=20).nbytes
                    for r, f in enumerate(files)
                ]
                cases.append((f"{args.many:,} ranks x {sizes[0] / 1e3:.0f} kB, gzipped", folder, files, sum(sizes) / 1e9))
            command(cases, runs=args.runs, tmp=tmp, baseline=args.baseline)
        return 0
    kinds = ["floor", "ours_1proc", "ours"] + (["hta"] if hta_available() else [])
    with tempfile.TemporaryDirectory(prefix="bench_analyze_") as tmp:
        tmp = Path(tmp)
        from profile_overlap.analysis.folder import analyze_dir
        from profile_overlap.analysis.rank.per_rank import analyze_rank

        if args.parse:
            files, expected = make_traces(tmp / "main", ranks=args.ranks, mb=args.mb)
            return parse_only(files, expected[0].nbytes, runs=args.runs, baseline=args.baseline)
        if args.from_trace:
            files, nbytes, tiles = tile_real_trace(args.from_trace, tmp / "main", ranks=args.ranks, mb=args.mb)
            largest_mb = nbytes / 2**20
            print(
                f"{args.ranks} ranks x {nbytes / 1e6:.1f} MB uncompressed ({tiles} copies of {args.from_trace.name}'s steps, "
                f"{sum(f.stat().st_size for f in files) / 1e6:.1f} MB gzipped), {args.runs} runs each, medians"
            )
            # Our numbers are right before they are fast: k copies end to end hold k times the communication.
            source = analyze_rank([args.from_trace])
            for r in analyze_dir(tmp / "main").ranks:
                assert abs(r.comm_us - tiles * source.comm_us) <= 1e-6 * r.comm_us, (r.comm_us, tiles, source.comm_us)
        else:
            files, expected = make_traces(tmp / "main", ranks=args.ranks, mb=args.mb)
            largest_mb = max(e.nbytes for e in expected) / 2**20
            print(
                f"{args.ranks} ranks x {expected[0].nbytes / 1e6:.1f} MB uncompressed "
                f"({expected[0].num_events:,} events each, {sum(f.stat().st_size for f in files) / 1e6:.1f} MB gzipped), "
                f"{args.runs} runs each, medians"
            )
            # Our numbers are right before they are fast.
            result = analyze_dir(tmp / "main")
            for r, e in zip(result.ranks, expected):
                assert (r.comm_us, r.compute_us, r.overlap_us) == (e.comm_us, e.compute_us, e.overlap_us), (r, e)
        rows = {}
        for kind in kinds:
            if args.baseline and kind.startswith("ours"):
                # Alternate ours and the baseline run by run, so that a busy machine slows both alike.
                pairs = [(measure(kind, files), measure(kind, files, tree=args.baseline)) for _ in range(args.runs)]
                runs, base = [a for a, _ in pairs], [b for _, b in pairs]
                rows["base" + kind[4:]] = (statistics.median(r["seconds"] for r in base), max(r["peak_rss_mb"] for r in base))
            else:
                runs = [measure(kind, files) for _ in range(args.runs)]
            rows[kind] = (statistics.median(r["seconds"] for r in runs), max(r["peak_rss_mb"] for r in runs))
        floor_s = rows["floor"][0]
        print()
        print("| what | time (s) | x floor | peak RSS (MiB) | x largest file |")
        print("|---|---:|---:|---:|---:|")
        label = {
            "floor": "floor: gzip + orjson.loads, one file after the other",
            "ours_1proc": "profile_overlap analyze_dir, 1 process",
            "ours": f"profile_overlap analyze_dir, {args.ranks} processes",
            "hta": "HTA TraceAnalysis + get_comm_comp_overlap",
            "base_1proc": f"baseline ({args.baseline}) analyze_dir, 1 process",
            "base": f"baseline ({args.baseline}) analyze_dir, {args.ranks} processes",
        }
        for kind, (s, mb) in rows.items():
            print(f"| {label[kind]} | {s:.2f} | {s / floor_s:.2f} | {mb:.0f} | {mb / largest_mb:.2f} |")
        if args.baseline:
            print(
                f"\nours / baseline (medians, runs alternating): {rows['ours_1proc'][0] / rows['base_1proc'][0]:.3f}x (1 process), "
                f"{rows['ours'][0] / rows['base'][0]:.3f}x ({args.ranks} processes)"
            )
        if "hta" not in rows:
            print("\n(HTA is not installed: pip install HolisticTraceAnalysis to add it.)")
        else:
            print(
                f"\nHTA / ours: {rows['hta'][0] / rows['ours_1proc'][0]:.1f}x (1 process), "
                f"{rows['hta'][0] / rows['ours'][0]:.1f}x ({args.ranks} processes)"
            )
        if args.from_trace:
            return 0

        if args.many:
            many(tmp / "many", ranks=args.many, kb=args.many_kb, runs=args.runs)
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
