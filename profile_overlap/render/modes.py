"""What the console and the report say about the modes of a run, whichever they are: each mode in a
few words, its communication by phase (plain words and a table), its collective bytes against the
model's parameter bytes, and every mode against the first. Everything is read from the record's
summary (record/summary.py); nothing is recomputed here.
"""

from __future__ import annotations

from profile_overlap.core.modes import MODES
from profile_overlap.record.metrics import BytesCheck, ModeSummary, PhaseCollective, RunMetrics
from profile_overlap.record.summary import BYTES_PADDING, MIB, OTHER_PHASE, summary_of
from profile_overlap.render.document import Inline, Paragraph, Ref, Table
from profile_overlap.render.numbers import mib, ms, pct, times

VERBS = {"all_reduce": "all-reduced", "reduce_scatter": "reduce-scattered", "all_gather": "all-gathered"}


def modes_text(m: RunMetrics) -> str:
    """What was compared, mode by mode, in the run's order."""
    names = list(m.modes)
    what = "What was compared" if len(names) > 1 else "What was run"
    ways = f", {len(names)} ways, in this order" if len(names) > 1 else ""
    text = f"{what}: one real training step (forward, loss, autograd backward, Adam){ways}. "
    text += " ".join(MODES[name].description if name in MODES else f"{name}." for name in names)
    if len(names) > 1:
        text += " AllReduce(X) == AllGather(ReduceScatter(X)), so every mode must end with the first mode's parameters; the run checks it."
    return text


# ---------------------------------------------------------------- every mode against the first


def versus_first(m: RunMetrics) -> Inline | None:
    """'Against sequential, the first mode (median step 12.4 ms): split took 22.0 ms (0.57×), ...'; None for one mode."""
    rows = summary_of(m).speedup_vs_first
    if len(rows) < 2:
        return None
    first = rows[0].mode
    median = Ref(f"{ms(m.modes[first].step_time.median_ms)} ms", "step_time_ms")
    text: list = [f"Against {first}, the first mode (median step ", median, "): "]
    for i, x in enumerate(rows[1:]):
        if i:
            text.append(", and " if i == len(rows) - 2 else ", ")
        if x.speedup is None:
            text.append(f"{x.mode} was not timed")
            continue
        text += [f"{x.mode} took " if i == 0 else f"{x.mode} ", Ref(f"{ms(m.modes[x.mode].step_time.median_ms)} ms", "step_time_ms")]
        text += [" (speedup ", Ref(times(x.speedup), "speedup_vs_first"), ", within noise)" if x.within_noise else ")"]
    return (*text, ".")


def noise_reason(m: RunMetrics, interval, *, within: bool, unit: str = "×") -> Inline:
    """The rule behind a within_noise verdict between two modes of the run (definitions: `within_noise`): with
    --repeats, the paired 95% interval over the blocks (of a speedup, unit ×, or of a difference in ms, which
    contains 0 when within noise); else each median against the other's p10–p90 range."""
    if interval is None:
        return (", each inside the other's p10–p90 range" if within else ", outside each other's p10–p90 range",)
    show = (lambda x: f"{x:.3f}×") if unit == "×" else (lambda x: f"{ms(x)} ms")
    noise = summary_of(m).noise
    assert noise is not None  # the interval is the noise summary's
    blocks = f" over {noise.num_blocks} paired blocks {'contains' if within else 'excludes'} {'1' if unit == '×' else '0'}"
    return (", whose ", Ref(f"95% interval {show(interval.low)} – {show(interval.high)}", "speedup_ci"), blocks)


def speedup_cell(m: RunMetrics, mode: str) -> str:
    """'1.09×', '0.98×*' (within run-to-run noise of the first mode) or '–'."""
    x = next((r for r in summary_of(m).speedup_vs_first if r.mode == mode), None)
    if x is None or x.speedup is None:
        return "–"
    return times(x.speedup) + ("*" if x.within_noise else "")


# ---------------------------------------------------------------- communication by phase


def _calls(x: float) -> str:
    n = f"{x:.0f}" if abs(x - round(x)) < 0.05 else f"{x:.1f}"
    return f"{n} call{'' if n == '1' else 's'}/step"


def _mib(nbytes: float | None) -> str:
    if nbytes is None:
        return "size unknown"
    x = nbytes / MIB
    return f"{x:,.2f} MiB/step" if x >= 0.1 else f"{x:.2g} MiB/step"


def _phase_name(phase: str) -> str:
    return "outside every phase" if phase == OTHER_PHASE else phase


def describe(x: ModeSummary) -> str:
    """'fsdp2: all_gather issued in forward and backward (8 calls/step, 1.02 MiB/step), reduce_scatter in backward (...)'."""
    if not x.phase_collectives:
        if not x.collectives:
            return f"{x.mode}: no collective in its profiled steps" if x.comm_ms is not None else f"{x.mode}: not profiled"
        return f"{x.mode}: its traces carry no phase labels, so its collectives are not attributed to phases"
    kinds: dict[str, list[PhaseCollective]] = {}
    for row in x.phase_collectives:
        kinds.setdefault(row.kind, []).append(row)
    parts = []
    for i, (kind, rows) in enumerate(kinds.items()):
        phases = [_phase_name(r.phase) for r in rows]
        where = phases[0] if len(phases) == 1 else ", ".join(phases[:-1]) + " and " + phases[-1]
        sizes = [r.bytes_per_step for r in rows if r.bytes_per_step is not None]
        nbytes = sum(sizes) if len(sizes) == len(rows) else None
        calls = sum(r.calls_per_step for r in rows)
        parts.append(f"{kind} {'issued ' if i == 0 else ''}in {where} ({_calls(calls)}, {_mib(nbytes)})")
    return f"{x.mode}: " + ", ".join(parts)


def attribution_blocks(m: RunMetrics, s: dict[str, ModeSummary]) -> tuple:
    """The report's "Communication by phase": per mode, its plain-words line and its table; then the bytes checks."""
    if not any(x.phase_collectives for x in s.values()):
        why = "was not profiled (--no-profile)" if not any(x.analysis for x in m.modes.values()) else "has no phase labels in its traces"
        return (Paragraph((f"This run {why}, so its collectives cannot be attributed to the phases that issued them.",)),)
    blocks: list = [
        Paragraph(
            (
                "Each collective is attributed to the ",
                Ref("phase", "phase"),
                " that issued it (forward, backward, optimizer; other: outside every phase): ",
                Ref("calls", "calls_per_step"),
                ", ",
                Ref("bytes", "bytes_per_step"),
                " (the full array S, as nccl-tests counts it) and ",
                Ref("time", "ms_per_step"),
                " per profiled step, mean over ranks.",
            )
        )
    ]
    for x in s.values():
        blocks.append(Paragraph((describe(x) + ".",)))
        if not x.phase_collectives:
            continue
        blocks.append(
            Table(
                header=(
                    ("phase",),
                    ("collective",),
                    (Ref("calls", "calls_per_step"), " per step"),
                    (Ref("MiB", "bytes_per_step"), " per step"),
                    (Ref("ms", "ms_per_step"), " per step"),
                ),
                rows=tuple(
                    ((r.phase,), (r.kind,), (f"{r.calls_per_step:.3g}",), (mib(r.bytes_per_step),), (ms(r.ms_per_step),))
                    for r in x.phase_collectives
                ),
                numeric=(False, False, True, True, True),
                caption=(f"{x.mode}: collectives by the phase that issued them, per profiled step, mean over ranks.",),
            )
        )
    return (*blocks, *bytes_blocks(m, s))


# ---------------------------------------------------------------- bytes against the model's parameters


def expectation(m: RunMetrics, mode: str, c: BytesCheck) -> str:
    """Why this row should move what it expects, in a few words."""
    if mode in MODES and (c.phase, c.kind) in MODES[mode].resharded_bytes:
        return "none: not resharded after forward" if c.expected == 0 else "again: resharded after forward"
    return "every parameter byte once"


def result(c: BytesCheck) -> str:
    return {True: "OK", False: "MISMATCH", None: "size unknown"}[c.matches]


def bytes_blocks(m: RunMetrics, s: dict[str, ModeSummary]) -> tuple:
    rows: list[tuple[tuple[str], ...]] = []
    bad: set[int] = set()
    for x in s.values():
        for c in x.bytes_checks:
            found = next((r for r in x.phase_collectives if (r.phase, r.kind) == (c.phase, c.kind)), None)
            if c.matches is False:
                bad.add(len(rows))
            rows.append(
                (
                    (x.mode,),
                    (c.phase,),
                    (c.kind,),
                    (mib(found.bytes_per_step) if found else "0",),
                    ("–" if c.ratio is None else f"{c.ratio:.3f}",),
                    (f"{c.expected:.0f}× ({expectation(m, x.mode, c)})",),
                    (result(c),),
                )
            )
    if not rows:
        return ()
    param_bytes = next(m.modes[name].model_param_bytes for name, x in s.items() if x.bytes_checks)
    return (
        Paragraph(
            (
                "Collective bytes against the model's parameter bytes P = ",
                Ref(f"{mib(param_bytes)} MiB", "model_param_bytes"),
                f" ({param_bytes:,} B): each mode should move every parameter byte once per step in the collectives below "
                "(fsdp2 gathers them again in backward when it reshards after forward). The ",
                Ref("ratio", "bytes_ratio"),
                f" may exceed the expected value by {BYTES_PADDING:.0%} for padding to a multiple of the world size.",
            )
        ),
        Table(
            header=(
                ("mode",),
                ("phase",),
                ("collective",),
                (Ref("MiB", "bytes_per_step"), " per step"),
                (Ref("× P", "bytes_ratio"),),
                ("expected",),
                ("result",),
            ),
            rows=tuple(rows),
            numeric=(False, False, False, True, True, False, False),
            highlight=frozenset(bad),
            caption=(
                "Per profiled step, mean over ranks. split's all_gathers are not checked: "
                "those of the last profiled step run after its window (split-blocking waits for each inside it).",
            ),
        ),
    )


def hidden_inline(x: ModeSummary, between: str) -> Inline:
    """'4.2 ms of its 6.0 ms{between}70.0%': how much of a mode's communication per step hid behind
    compute, each figure linked to its definition."""
    return (
        Ref(f"{ms(x.overlap_ms)} ms", "overlap_ms"),
        " of its ",
        Ref(f"{ms(x.comm_ms)} ms", "comm_ms"),
        between,
        Ref(f"{pct(x.overlap_pct)}%", "mode_overlap_pct"),
    )


def bytes_inline(mode: str, checks: list[BytesCheck]) -> Inline:
    """'fsdp2 all-gathered 1.00× P in forward and 1.00× in backward, and reduce-scattered 1.00× P in backward' (ratios known)."""
    kinds: dict[str, list[BytesCheck]] = {}
    for c in checks:
        kinds.setdefault(c.kind, []).append(c)
    text: list = [f"{mode} "]
    for i, (kind, rows) in enumerate(kinds.items()):
        text.append("" if i == 0 else ", and " if i == len(kinds) - 1 else ", ")
        text.append(f"{VERBS.get(kind, kind)} ")
        for j, c in enumerate(rows):
            text += [" and " if j else "", Ref(f"{c.ratio:.2f}×", "bytes_ratio"), f"{' P' if j == 0 else ''} in {_phase_name(c.phase)}"]
    return tuple(text)


def bytes_console_line(m: RunMetrics) -> str | None:
    """'collective bytes per step / parameter bytes (...): sequential bwd all_reduce 1.00x; ...: all match'; None without checks."""
    short = {"forward": "fwd", "backward": "bwd", "optimizer": "opt"}
    per_mode, bad = [], 0
    for x in summary_of(m).modes.values():
        if not x.bytes_checks:
            continue
        rows = []
        for c in x.bytes_checks:
            ratio = "?" if c.ratio is None else f"{c.ratio:.2f}x"
            expected = "" if c.expected == 1 else f" (expected {c.expected:.0f}x)"
            rows.append(f"{short.get(c.phase, c.phase)} {c.kind} {ratio}{expected}{' MISMATCH' if c.matches is False else ''}")
            bad += c.matches is False
        per_mode.append(f"{x.mode} " + ", ".join(rows))
    if not per_mode:
        return None
    param_bytes = next(m.modes[name].model_param_bytes for name, x in summary_of(m).modes.items() if x.bytes_checks)
    verdict = f"{bad} MISMATCH" if bad else "all match"
    return f"collective bytes per step / parameter bytes (P = {mib(param_bytes)} MiB, expected 1x): " + "; ".join(per_mode) + f": {verdict}"
