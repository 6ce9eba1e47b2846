"""Instructions per trace file (callgrind), a per-file cost that a busy machine does not disturb:
`load_trace` + `extract` + `finish_rank` of the first N files of a folder, or the floor (gzip +
orjson.loads), as (Ir(N files) - Ir(0 files)) / N; three files are read first in both runs.

    python benchmarks/instructions.py FOLDER [--files 40] [--tree /tmp/base] [--floor]

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
from profile_overlap.analysis.file.events import extract
from profile_overlap.analysis.rank.per_rank import finish_rank
from profile_overlap.analysis.read.trace import load_trace
paths = sorted(Path(sys.argv[1]).glob("*.json*"))
for p in paths[:3] + paths[: int(sys.argv[2])]:
    finish_rank([extract(load_trace(p))])
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


def instructions(kind: str, folder: Path, files: int, tree: Path) -> int:
    """Instructions callgrind counts in one fresh interpreter reading `files` files (after three)."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, "-c", _CHILD[kind], str(folder), str(files)]
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
    args = ap.parse_args()
    kind = "floor" if args.floor else "ours"
    per_file = (instructions(kind, args.folder, args.files, args.tree) - instructions(kind, args.folder, 0, args.tree)) / args.files
    what = args.tree if kind == "ours" else "gzip + orjson.loads"
    print(f"{kind} ({what}): {per_file / 1e6:.2f}M instructions per file ({args.files} files)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
