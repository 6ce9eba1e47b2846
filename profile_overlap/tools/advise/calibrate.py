"""`advise --calibrate`: measure the interference a change would pay where the run itself cannot.

A mode that overlaps nothing (DDP with one bucket, launched at the end of the backward) has no
operator seen both beside communication and alone, so its own trace measures no interference and the
replay would charge none: a change that puts communication under compute (smaller buckets) would be
predicted to hide it for free. Per such mode, `calibrate` runs one profiled run (verify.PROFILE_STEPS profiled steps) of the mode's best
replayed change that adds overlap (the item with the highest predicted gain that is not
`less_overlap`), as `advise --verify` runs its changed side (RUN_DIR/calibrate/<mode>-<kind>), and
takes that run's per-operator interference (record/interference_used.py), per phase, as what the
replay charges the mode (source CALIBRATION, `calibrated_with` its flag). Phases the calibration run
measured no figure for keep the run's own source.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import msgspec

from profile_overlap.core.errors import UserError
from profile_overlap.record.advice import AdviceItem
from profile_overlap.record.folder import Run, load_run
from profile_overlap.record.interference_used import CALIBRATION, NONE, OPERATORS, UsedInterference, overall, used_interference
from profile_overlap.tools.advise.verify import block_timeout_s, change_config, run_block

CALIBRATE_DIR = "calibrate"


@dataclass(frozen=True)
class Calibration:
    """One mode's interference as a calibration run measured it."""

    used: dict[str, UsedInterference]
    """Per phase (and "other"), what the replay charges the mode."""
    note: str
    """What was run and what it measured, in words (advice's notes)."""


def calibrate(run: Run, items: Sequence[AdviceItem]) -> dict[str, Calibration]:
    """Per mode whose replayed items all charge no interference, its calibration (modes with no
    change that adds overlap are left out)."""
    out = {}
    for mode in dict.fromkeys(i.mode for i in items if i.interference is not None):
        own = next(i.interference for i in items if i.mode == mode and i.interference is not None)
        if any(u.source != NONE for u in own):
            continue
        adds = [i for i in items if i.mode == mode and i.flag and i.verifiable and not i.less_overlap and i.interference is not None]
        if not adds:
            continue
        item = max(adds, key=lambda i: i.predicted_gain_ms or 0.0)
        out[mode] = _measure(run, mode, item, own)
    return out


def _measure(run: Run, mode: str, item: AdviceItem, own: Sequence[UsedInterference]) -> Calibration:
    assert item.flag is not None
    cfg, env = run.metrics.config, run.metrics.env
    folder = _fresh(run.dir / CALIBRATE_DIR / f"{mode}-{item.kind}")
    config = change_config(cfg, item, changed=True, profile=True, out=folder.parent, name=folder.name)
    run_block(config, nproc=env.world_size, timeout_s=block_timeout_s(cfg))
    measured = load_run(folder).metrics.modes.get(mode)
    if measured is None or measured.analysis is None:
        raise UserError(f"the calibration run {folder} has no analysed traces of {mode}: rerun advise with --calibrate")
    found = used_interference(measured.analysis)
    used = {
        u.phase: msgspec.structs.replace(found[u.phase], source=CALIBRATION, calibrated_with=item.flag)
        if found[u.phase].source == OPERATORS
        else u
        for u in own
    }
    return Calibration(used=used, note=f"interference measured in a calibration run of {item.flag} ({folder}): {overall(used)}")


def _fresh(folder: Path) -> Path:
    """`folder`, or folder-2, -3 ... when it exists (an earlier calibration is never overwritten)."""
    out, n = folder, 1
    while out.exists():
        n += 1
        out = folder.with_name(f"{folder.name}-{n}")
    return out
