"""Each mode is measured without the previous mode's state (issue 39, finding 5).

Peak memory is CUDA-only (`torch.cuda.max_memory_allocated`; empty on CPU), so what a CPU run can
show is the freeing it rests on: in a real 2-rank gloo compare run, the previous mode's model and
optimizer state are gone when the next mode starts to build. Before the fix the harness kept the
last mode's ModeRun alive while the next was built, and every mode's final parameters (views into
its model's flat buffers), and the states are reference cycles (the split hooks hold the state), so
mode k's GPU peak held mode k-1's state: about 6 GiB at the GPU check's sizes.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import pytest

from conftest import REPO, SMALL, clean_env, free_port, only_run_dir

pytestmark = pytest.mark.slow  # torchrun jobs

SPY = textwrap.dedent(
    """
    import sys, weakref
    from profile_overlap.cli.main import main
    from profile_overlap.run import harness

    built = []
    real = harness.prepare_mode

    def prepare_mode(mode, **kwargs):
        alive = [name for name, ref in built if ref() is not None]
        print(f"before {mode}: alive {alive}", flush=True)
        run = real(mode, **kwargs)
        state = run.state
        built.append((f"{mode} model", weakref.ref(state.model)))
        held = state.optimizer if hasattr(state, "optimizer") else state.exp_avg[0]
        built.append((f"{mode} optimizer", weakref.ref(held)))
        return run

    harness.prepare_mode = prepare_mode
    sys.exit(main(sys.argv[1:]))
    """
)


def test_the_previous_modes_model_and_optimizer_are_freed_before_the_next_mode_is_built(tmp_path):
    spy = tmp_path / "spy.py"
    spy.write_text(SPY)
    modes = ["sequential", "split", "split-blocking", "ddp", "fsdp2"]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", f"--master-port={free_port()}"]
    args = ["run", "--mode", "compare", "--modes", ",".join(modes), "--no-profile", "--out", str(tmp_path / "runs"), *SMALL]
    proc = subprocess.run([*cmd, str(spy), *args], capture_output=True, text=True, timeout=240, env=clean_env(PYTHONPATH=str(REPO)))
    assert proc.returncode == 0, proc.stderr[-3000:]
    # Each rank's output goes to its log in the run folder.
    for rank in (0, 1):
        log = only_run_dir(tmp_path / "runs") / "logs" / f"rank{rank}.log"
        lines = re.findall(r"before (\S+): alive (.*)", log.read_text())
        assert [mode for mode, _ in lines] == modes, log.read_text()[-2000:]
        assert {alive for _, alive in lines} == {"[]"}, "\n".join(f"rank {rank} before {m}: {a}" for m, a in lines if a != "[]")
