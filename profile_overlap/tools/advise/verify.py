"""`advise --verify`: run the top advice against the run's own configuration, in alternating blocks.

Each round runs one block of `--steps` timed steps of the item's mode as configured, then one with
the change (the next round starts with the change: the order alternates, as `run --repeats` rotates
its modes), each as its own run under RUN_DIR/verify/<n>-<kind>/. The blocks pair up by round, and the
measured gain's 95% interval is record/noise.py's paired bootstrap of the median difference, the
interval `--repeats` gives the overlap yield. The changed side's first block is profiled (PROFILE_STEPS
steps, after its timed ones), so the changed run's overlap is measured too.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import msgspec

from profile_overlap.core.errors import UserError
from profile_overlap.core.files import METRICS_JSON
from profile_overlap.record import noise
from profile_overlap.record.advice import Advice, AdviceItem, Verification
from profile_overlap.record.config import RunConfig
from profile_overlap.record.folder import Run, load_run
from profile_overlap.record.load import load_metrics
from profile_overlap.record.summary import summary_of

VERIFY_DIR = "verify"
WARMUP_STEPS = 10
"""Untimed steps before each verification block (at least; the run's own when more): every block is a
fresh process, and its first steps pay for start-up (gloo's threads, the allocator, lazy imports),
which in one run with --repeats only the first block does."""
NO_CHANGE_MS = 1e-9
"""A predicted gain under this (a replay that changes nothing leaves float residue, 1e-14 ms) predicts no
change and has no sign: its sign agrees only when the measured interval holds 0."""
PROFILE_STEPS = 6
"""Profiled steps of a profiled verification block or calibration run (at least; the run's own when more):
the figures rest on each operator's calls and each bucket's all_reduce seen over several steps, and with the
2 steps a run often profiles, a DDP backward has one or two calls each way, so one descheduled call on a
loaded machine decides it (a changed run's overlap measured 0.0 %). Profiled steps follow the timed ones:
they do not change the block's step times."""


def change_config(cfg: RunConfig, item: AdviceItem, *, changed: bool, profile: bool, out: Path, name: str):
    """The Config of one block of `item`'s mode, with its change or without (profiled: PROFILE_STEPS steps,
    or the run's own count when more)."""
    from profile_overlap.tools.advise.candidates import rerun_config

    change = _change(item) if changed else {}
    run = {"repeats": 1, "profile": profile, "out": str(out), "name": name, "warmup_steps": max(cfg.warmup_steps, WARMUP_STEPS)}
    if profile:
        run["profile_steps"] = max(cfg.profile_steps, PROFILE_STEPS)
    return rerun_config(cfg, item.mode, {**change, **run})


def block_timeout_s(cfg: RunConfig) -> float:
    """How long one block (change_config's) may take: start-up, then 30 s a step of any kind."""
    return 60 + 30 * (cfg.steps + max(cfg.warmup_steps, WARMUP_STEPS) + max(cfg.profile_steps, PROFILE_STEPS))


def _change(item: AdviceItem) -> dict:
    """The config fields the item's flag sets (`--bucket-cap-mb 3.2` -> {"bucket_cap_mb": 3.2})."""
    from profile_overlap.run import flags
    from profile_overlap.run.config import Config

    assert item.flag is not None  # verify() takes items with a flag only
    option, value = item.flag.split(" ", 1)
    f = next(f for f in flags.flags(Config) if f.option == option)
    return {f.name: f.kind(value)}


def run_block(config, *, nproc: int, timeout_s: float) -> None:
    from profile_overlap.run import flags

    argv = [sys.executable, "-m", "profile_overlap", "run", *flags.to_argv(config), "--nproc-per-node", str(nproc)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    run_dir = Path(config.job.out) / config.job.name
    if proc.returncode != 0 or not (run_dir / METRICS_JSON).is_file():
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(f"a verification run failed ({run_dir}): {tail}")


def _times(metrics) -> tuple[float, ...]:
    """The block's step times: a verification run trains one mode (the item's, or the one it changes to)."""
    (mode,) = metrics.modes.values()
    return tuple(mode.step_time.times_ms)


def verify_item(run: Run, item: AdviceItem, *, index: int, repeats: int) -> Verification:
    folder = run.dir / VERIFY_DIR / f"{index}-{item.kind}"
    n = 1
    while folder.exists():  # never overwrite an earlier verification
        n += 1
        folder = run.dir / VERIFY_DIR / f"{index}-{item.kind}-{n}"
    cfg = run.metrics.config
    for r in range(repeats):
        order = (False, True) if r % 2 == 0 else (True, False)
        for is_changed in order:
            name = f"{'changed' if is_changed else 'original'}-{r + 1}"
            config = change_config(cfg, item, changed=is_changed, profile=is_changed and r == 0, out=folder, name=name)
            run_block(config, nproc=run.metrics.env.world_size, timeout_s=block_timeout_s(cfg))
    mode = run.metrics.modes.get(item.mode)  # the step the item's gain is quoted on: the mode's timed median
    return measured(folder, item, repeats=repeats, timed_ms=mode.step_time.median_ms if mode is not None else None)


def quoted_here(predicted_ms: float, *, baseline_ms: float, timed_ms: float | None) -> float:
    """A predicted gain quoted on a verification's original blocks: × baseline / the run's timed median.
    The prediction is a share of the step (the replay's, quoted on the timed step); fresh processes on a
    shared machine run the same configuration 9 to 29 % faster or slower than the run did (bench_advise's
    series 10 and 11), and the gain they measure is a share of their own step."""
    return predicted_ms * baseline_ms / timed_ms if timed_ms and timed_ms > 0 else predicted_ms


def measured(folder: Path, item: AdviceItem, *, repeats: int, timed_ms: float | None) -> Verification:
    """The verification of `item` from the runs in `folder` (original-1.., changed-1..), as verify_item left
    them; `timed_ms`: the mode's timed median in the run."""
    base = [_times(load_metrics(folder / f"original-{r}" / METRICS_JSON)) for r in range(1, repeats + 1)]
    first = load_metrics(folder / "changed-1" / METRICS_JSON)
    changed = [_times(first)] + [_times(load_metrics(folder / f"changed-{r}" / METRICS_JSON)) for r in range(2, repeats + 1)]
    (summary,) = summary_of(first).modes.values()
    overlap = summary.overlap_pct
    interval = noise.paired_difference_interval(base, changed)
    assert interval is not None  # 2 or more rounds (--repeats is at least 2)
    b, c = noise.pooled_median(base), noise.pooled_median(changed)
    gain = b - c
    predicted = quoted_here(item.predicted_gain_ms or 0.0, baseline_ms=b, timed_ms=timed_ms)
    return Verification(
        run_dir=str(folder),
        repeats=repeats,
        baseline_ms=b,
        changed_ms=c,
        measured_gain_ms=gain,
        gain_low_ms=interval.low,
        gain_high_ms=interval.high,
        hit=interval.contains(predicted),
        sign_agrees=interval.contains(0.0) or (abs(predicted) >= NO_CHANGE_MS and (gain > 0) == (predicted > 0)),
        changed_overlap_pct=overlap,
        predicted_here_ms=predicted,
    )


def verify(advice: Advice, *, repeats: int, items: int = 1) -> Advice:
    """The advice with its first `items` verifiable items run and measured."""
    if advice.is_job:
        raise UserError(
            f"{advice.source} is a job: --verify runs our runs only; change the code line, rerun the job and "
            "compare the two with `profile_overlap report --compare`"
        )
    run = load_run(Path(advice.source))
    if (run.metrics.env.num_nodes or 1) > 1:
        raise UserError("--verify reruns on this machine: the run used several nodes; rerun its advice there by hand")
    todo = [k for k, i in enumerate(advice.items) if i.verifiable and i.flag][:items]
    if not todo:
        raise UserError(f"{advice.source}: no advice item has a flag to verify (the items are causes no run flag changes)")
    out = list(advice.items)
    for k in todo:
        v = verify_item(run, out[k], index=k + 1, repeats=repeats)
        out[k] = msgspec.structs.replace(out[k], verification=v)
    return msgspec.structs.replace(advice, items=tuple(out))
