"""Run `python -m profile_overlap ARGS` as this rank, then record which native threads are still
alive once our code has returned: a gloo thread still running then means the process group
outlived destroy_process_group and will be destroyed during interpreter finalization (the
teardown abort of issue 11). Writes $THREADS_OUT/rank<r>.json; used by tests/test_teardown.py."""

import json
import os
import sys
from pathlib import Path

from profile_overlap.cli.main import main

code = main(sys.argv[1:])
names = []
for tid in sorted(os.listdir("/proc/self/task")):
    try:
        names.append(Path(f"/proc/self/task/{tid}/comm").read_text().strip())
    except OSError:  # the thread ended meanwhile
        pass
out = Path(os.environ["THREADS_OUT"]) / f"rank{os.environ['RANK']}.json"
out.write_text(json.dumps({"exit_code": code, "threads": names}))
sys.exit(code)
