"""Where the test suite's CPU time goes: the whole suite as the README runs it, with every Python process
it starts logging, as it exits, its own CPU time, whether it imported torch and its command line.

    python benchmarks/suite_census.py            # about 13 minutes on 2 cores; prints the census
    python benchmarks/suite_census.py tests/test_run.py    # one file's (pytest's arguments)

The processes find the logger through PYTHONPATH (a sitecustomize.py in a temporary folder), so the
ones started with a PYTHONPATH of their own (the examples' ranks and launchers) and the ones that end
without running atexit (a rank killed, a forked analysis worker: its time is its parent's children's)
are not in the per-process lines; the suite's total CPU (pytest and every descendant) is.
"""

from __future__ import annotations

import collections
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

_HOOK = """
import atexit, os, sys
def _log():
    import resource
    u = resource.getrusage(resource.RUSAGE_SELF)
    argv = " ".join(sys.argv)[:300].replace("\\t", " ")
    line = "\\t".join([f"{u.ru_utime + u.ru_stime:.3f}", "torch" if "torch" in sys.modules else "-", argv])
    with open(os.environ["SUITE_CENSUS_LOG"], "a") as f:
        f.write(line + "\\n")
atexit.register(_log)
"""


def kind(argv: str) -> str:
    """What a process was, from its command line."""
    for marker, name in (
        ("torch/distributed/run.py", "torchrun launcher"),
        ("tensorboard/main.py", "tensorboard"),
        ("api/worker.py", "trace_handler worker"),
        ("tests/helpers/", "test helper job"),
    ):
        if marker in argv:
            return name
    if "__main__.py" in argv:
        rest = argv.split("__main__.py", 1)[1].split()
        return "profile_overlap rank" if rest and rest[0] == "--mode" else f"profile_overlap {rest[0] if rest else ''}".strip()
    return "pytest and other python"


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "sitecustomize.py").write_text(_HOOK)
        log = Path(tmp) / "census.tsv"
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([tmp, *filter(None, [os.environ.get("PYTHONPATH")])]), SUITE_CENSUS_LOG=str(log))
        t = time.perf_counter()
        pytest = [sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadfile", "-p", "no:cacheprovider", *sys.argv[1:]]
        proc = subprocess.run(pytest, cwd=REPO, env=env)
        wall = time.perf_counter() - t
        u = resource.getrusage(resource.RUSAGE_CHILDREN)
        rows = [line.rstrip("\n").split("\t") for line in log.read_text().splitlines()] if log.is_file() else []
    cpu = u.ru_utime + u.ru_stime
    print(f"suite: exit {proc.returncode}, {wall:.0f} s wall, {cpu:.0f} s CPU ({u.ru_utime:.0f} user + {u.ru_stime:.0f} system)")
    print(f"  on {os.cpu_count()} cores at least {cpu / (os.cpu_count() or 1):.0f} s wall, however the tests are spread")
    by: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0, 0])
    for own, torch, argv in rows:
        k = by[kind(argv)]
        k[0] += 1
        k[1] += float(own)
        k[2] += torch == "torch"
    logged, with_torch = sum(float(r[0]) for r in rows), sum(r[1] == "torch" for r in rows)
    print(f"{len(rows)} processes logged, {logged:.0f} s of CPU; {with_torch} imported torch:")
    for name, (n, seconds, torch) in sorted(by.items(), key=lambda kv: -kv[1][1]):
        print(f"  {seconds:7.1f} s  {n:4d} processes  {torch:4d} with torch  {name}")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
