"""Instructions per trace file (callgrind), a per-file cost that a busy machine does not disturb:
what an `analyze DIR` worker does with each of the first N files of a folder (`read_file`: load,
extract, finish_rank, without the timeline spans that only --tensorboard draws; --timeline: with
them, the path of the figures before the thirteenth look in benchmarks/README.md), or the floor
(gzip + orjson.loads), as (Ir(N files) - Ir(0 files)) / N; three files are read first in both runs.

    python benchmarks/instructions.py FOLDER [--files 40] [--tree /tmp/base] [--floor] [--timeline]

Needs valgrind. Each run takes about a minute (callgrind is ~50x slower than the program).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

_CHILD = {
    "ours": """
import sys
from pathlib import Path
from profile_overlap.analysis.folder import read_file
from profile_overlap.analysis.options import AnalysisOptions
options = AnalysisOptions(timeline=sys.argv[3] == "timeline")
paths = sorted(Path(sys.argv[1]).glob("*.json*"))
for p in paths[:3] + paths[: int(sys.argv[2])]:
    read_file(str(p), options)
""",
    "floor": """
import gzip, sys
from pathlib import Path
import orjson
paths = sorted(Path(sys.argv[1]).glob("*.json*"))
for p in paths[:3] + paths[: int(sys.argv[2])]:
    with (gzip.open(p) if p.name.endswith(".gz") else open(p, "rb")) as f:
        orjson.loads(f.read())
""",
}


def instructions(kind: str, folder: Path, files: int, tree: Path, *, timeline: bool = False) -> int:
    """Instructions callgrind counts in one fresh interpreter reading `files` files (after three)."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    child = [sys.executable, "-c", _CHILD[kind], str(folder), str(files), "timeline" if timeline else "-"]
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *child]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=tree, env=env)
    m = re.search(r"Collected : (\d+)", p.stderr)
    if p.returncode != 0 or m is None:
        raise RuntimeError(p.stderr[-2000:])
    return int(m.group(1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--files", type=int, default=40)
    ap.add_argument("--tree", type=Path, default=REPO, help="the source tree of profile_overlap to measure (default this one)")
    ap.add_argument("--floor", action="store_true", help="the floor (gzip + orjson.loads) instead of the analysis")
    ap.add_argument("--timeline", action="store_true", help="the analysis with the timeline spans (analyze --tensorboard, a run's end)")
    args = ap.parse_args()
    kind = "floor" if args.floor else "ours"
    count = (instructions(kind, args.folder, n, args.tree, timeline=args.timeline) for n in (args.files, 0))
    per_file = (next(count) - next(count)) / args.files
    what = f"{args.tree}{', with the timeline' if args.timeline else ''}" if kind == "ours" else "gzip + orjson.loads"
    print(f"{kind} ({what}): {per_file / 1e6:.2f}M instructions per file ({args.files} files)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
