"""Phases in steps without labels, found from what torch records (README, Metrics, "Phases"): a
hand-made trace that mixes labelled and unlabelled steps, worked by hand; HTA's real traces keep
their labels; and our own four modes run with their labels hidden give the labelled phases."""

from __future__ import annotations

import gzip
import json
import statistics
from pathlib import Path

import pytest

from profile_overlap.analysis.folder import analyze_dir
from profile_overlap.analysis.rank.per_rank import analyze_rank
from profile_overlap.record.load import load_metrics

from conftest import DATA, ENGINE_MODES, clean_env, only_run_dir, torchrun

MAIN, WORKER = 1, 2


def _event(name: str, start: float, end: float, *, cat: str = "cpu_op", tid: int = MAIN) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": start, "dur": end - start}


def _label(name: str, start: float, end: float) -> dict:
    return _event(name, start, end, cat="user_annotation")


FRAME = "autograd::engine::evaluate_function: MmBackward0"
STEP_OPT, ZERO_GRAD = "Optimizer.step#Adam.step", "Optimizer.zero_grad#Adam.zero_grad"


def mixed_trace() -> dict:
    """One rank, four steps of 1000 µs. #1 is labelled; #2 and #4 carry only what torch records
    (autograd's frames, the seed of loss.backward(), torch.optim's ranges; #4 zeroes the gradients
    first); #3 has nothing to find a phase by. One all_reduce, issued inside a backward frame of
    #2 and running on gloo's worker from 1610 to 1800 µs: 90 µs in backward, 100 in the optimizer."""
    events = [_label(f"ProfilerStep#{n}", 1000 * (n - 1), 1000 * n) for n in (1, 2, 3, 4)]
    events += [  # step 1: labels win over the autograd frames and torch.optim inside them
        _label("forward", 100, 300),
        _event("aten::mm", 120, 280),
        _label("backward", 300, 700),
        _event(FRAME, 320, 680),
        _label("optimizer", 700, 900),
        _label(STEP_OPT, 710, 880),
    ]
    events += [  # step 2
        _event("aten::randint", 1010, 1020),
        _event("aten::mm", 1100, 1300),
        _event("aten::ones_like", 1320, 1325),
        _event(FRAME, 1400, 1500),
        _event(FRAME, 1500, 1650),
        _event("c10d::allreduce_", 1600, 1610),
        _event("gloo:all_reduce", 1610, 1800, cat="user_annotation", tid=WORKER),
        _label(STEP_OPT, 1700, 1850),
        _label(ZERO_GRAD, 1860, 1870),
    ]
    events += [_event("aten::mm", 2100, 2300)]  # step 3
    events += [  # step 4
        _label(ZERO_GRAD, 3010, 3020),
        _event("aten::mm", 3100, 3300),
        _event(FRAME, 3400, 3600),
        _label(STEP_OPT, 3700, 3800),
    ]
    return {"schemaVersion": 1, "traceEvents": events, "distributedInfo": {"backend": "gloo", "rank": 0, "world_size": 1}}


def test_a_mix_of_labelled_and_unlabelled_steps_is_handled_step_by_step(tmp_path):
    path = tmp_path / "rank0.pt.trace.json.gz"
    path.write_bytes(gzip.compress(json.dumps(mixed_trace()).encode()))
    rank = analyze_rank([path])
    windows = {(s, p): (a, b) for s, p, a, b in rank.phase_windows}
    # Step 1: the labels, exactly; autograd's frames and Optimizer.step inside them change nothing.
    assert [(p.phase, p.window_us, p.sources) for p in rank.steps[0].phases] == [
        ("forward", 200, ("labels",)),
        ("backward", 400, ("labels",)),
        ("optimizer", 200, ("labels",)),
    ]
    # Step 2: forward from the step's start to the seed of loss.backward() (ones_like at 1320), backward
    # from there to Optimizer.step, optimizer from Optimizer.step to the end of zero_grad.
    assert (windows[(2, "forward")], windows[(2, "backward")], windows[(2, "optimizer")]) == ((1000, 1320), (1320, 1700), (1700, 1870))
    step2 = {p.phase: p for p in rank.steps[1].phases}
    assert {k: p.sources for k, p in step2.items()} == {"forward": ("step",), "backward": ("autograd",), "optimizer": ("torch.optim",)}
    assert (step2["forward"].comm_us, step2["backward"].comm_us, step2["optimizer"].comm_us) == (0, 1700 - 1610, 1800 - 1700)
    assert step2["forward"].compute_us == (1020 - 1010) + (1300 - 1100)  # randint and mm; ones_like is backward's
    assert [(c.phase, c.kind, c.count) for c in rank.phase_collectives] == [("backward", "all_reduce", 1)]
    # Step 3: nothing to find a phase by.
    assert rank.steps[2].phases == ()
    # Step 4: a zero_grad before the backward is an optimizer window of its own; forward starts after it.
    assert [(p, a, b) for s, p, a, b in rank.phase_windows if s == 4] == [
        ("optimizer", 3010, 3020),
        ("forward", 3020, 3400),
        ("backward", 3400, 3700),
        ("optimizer", 3700, 3800),
    ]
    # Over the steps, each phase keeps every source it came from.
    assert {p.phase: p.sources for p in rank.phases} == {
        "forward": ("labels", "step"),
        "backward": ("labels", "autograd"),
        "optimizer": ("labels", "torch.optim"),
    }


def test_a_step_without_phases_is_an_integrity_warning(tmp_path):
    (tmp_path / "rank0.pt.trace.json.gz").write_bytes(gzip.compress(json.dumps(mixed_trace()).encode()))
    (check,) = [c for c in analyze_dir(tmp_path, max_workers=1).integrity.checks if c.name == "steps.phases"]
    assert check.status == "warning"
    assert check.detail.startswith("1 of the ranks' 4 steps have no phase (rank 0: #3)")
    assert check.figures["steps_without_phases"] == {"0": [3]}


def test_on_gpu_a_found_window_spans_the_kernels_launched_inside_it(tmp_path):
    """A GPU trace without labels: backward runs on autograd's own thread (tid 99), the kernels are
    launched when they start. The CPU windows (forward 0-380, backward 380-780, optimizer 780-900 µs)
    move to the device: from the first to the last kernel launched inside each."""
    from synthetic import gpu_trace

    doc = gpu_trace(comm=[(20, 450, 600)], compute=[(7, 100, 200), (7, 400, 500), (7, 800, 850)], steps=[(1, 0, 1000)], world_size=1)
    pid = doc["traceEvents"][0]["pid"]
    doc["traceEvents"] += [
        {"ph": "X", "cat": "cpu_op", "name": FRAME, "pid": pid, "tid": 99, "ts": 380, "dur": 320},
        {"ph": "X", "cat": "user_annotation", "name": STEP_OPT, "pid": pid, "tid": pid, "ts": 780, "dur": 120},
    ]
    path = tmp_path / "rank0.pt.trace.json.gz"
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    rank = analyze_rank([path])
    assert [(p, a, b) for _, p, a, b in rank.phase_windows] == [("forward", 100, 200), ("backward", 400, 600), ("optimizer", 800, 850)]
    phases = {p.phase: p for p in rank.steps[0].phases}
    assert (phases["backward"].comm_us, phases["backward"].compute_us, phases["backward"].overlap_us) == (150, 100, 50)
    assert {k: p.sources for k, p in phases.items()} == {"forward": ("step",), "backward": ("autograd",), "optimizer": ("torch.optim",)}


@pytest.mark.parametrize("folder", ["hta_trace_filter_2rank", "hta_nccl_parser_config_1rank"])
def test_htas_real_traces_keep_their_labelled_phases(folder):
    """Every step of HTA's traces has `## forward ##` style labels (and autograd frames, DDP's and
    torch.optim's ranges besides): the labels decide, as before."""
    result = analyze_dir(DATA / folder, max_workers=1)
    for rank in result.ranks:
        assert rank.steps and all(s.phases for s in rank.steps)
        assert {src for s in rank.steps for p in s.phases for src in p.sources} == {"labels"}
    (check,) = [c for c in result.integrity.checks if c.name == "steps.phases"]
    assert check.status == "ok" and check.detail == "every step's phases found (from labels)"


# ---------------------------------------------------------------- our modes, labels hidden

NUMBERS = ("window_us", "comm_us", "compute_us", "overlap_us", "exposed_comm_us")
MEDIUM = ["--model", "transformer", "--dim", "128", "--layers", "2", "--heads", "4", "--seq-len", "64", "--batch", "8"]
STEPS = ["--steps", "2", "--warmup-steps", "1", "--profile-steps", "3"]


def _with_labels_restored(src: Path, dst: Path) -> Path:
    """The same traces with the hidden labels (`hidden:forward` ...) named as labels again."""
    dst.mkdir(parents=True)
    for path in src.glob("*.pt.trace.json.gz"):
        doc = json.loads(gzip.open(path).read())
        for e in doc["traceEvents"]:
            if str(e.get("name", "")).startswith("hidden:"):
                e["name"] = e["name"].removeprefix("hidden:")
        (dst / path.name).write_bytes(gzip.compress(json.dumps(doc).encode()))
    return dst


@pytest.mark.slow
def test_our_modes_without_labels_give_the_labelled_phases(tmp_path):
    """sequential, split, ddp and fsdp2 run with PROFILE_OVERLAP_PHASE_LABELS=hidden: each trace is
    analysed as it is (no labels: phases found) and with its labels restored (the truth), so both
    describe the same steps. Each phase's window, comm, compute, hidden and exposed comm agree
    within 2% of the step, a forward found from the step's start its window within 4% (the median
    over a rank's profiled steps: a rank descheduled for milliseconds leaves an idle gap where a
    labelled phase has ended and the next not begun, which nothing can place), and every collective
    lands in the same phase."""
    proc = torchrun(
        ["--mode", "compare", "--modes", ",".join(ENGINE_MODES), "--out", str(tmp_path / "run"), *MEDIUM, *STEPS],
        nproc=2,
        env=clean_env(PROFILE_OVERLAP_PHASE_LABELS="hidden"),
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run = only_run_dir(tmp_path / "run")
    expected_sources = {
        "sequential": {"forward": ("step",), "backward": ("autograd",), "optimizer": ("profile_overlap",)},
        "split": {"forward": ("step",), "backward": ("autograd",), "optimizer": ("profile_overlap",)},
        "ddp": {"forward": ("DDP",), "backward": ("autograd",), "optimizer": ("torch.optim",)},
        "fsdp2": {"forward": ("FSDP2",), "backward": ("autograd",), "optimizer": ("torch.optim",)},
    }
    for mode in ENGINE_MODES:
        found = analyze_dir(run / mode, max_workers=1)
        truth = analyze_dir(_with_labels_restored(run / mode, tmp_path / "labelled" / mode), max_workers=1)
        for f, t in zip(found.ranks, truth.ranks):
            assert {p.phase: p.sources for p in f.phases} == expected_sources[mode], mode
            assert {p.sources for p in t.phases} == {("labels",)}
            worst = {}
            for number in NUMBERS:
                for phase in ("forward", "backward", "optimizer"):
                    errors = []
                    for fs, ts in zip(f.steps, t.steps):
                        a, b = ({p.phase: getattr(p, number) for p in s.phases}.get(phase, 0.0) for s in (fs, ts))
                        errors.append(100 * abs(a - b) / ts.step_us)
                    worst[(phase, number)] = statistics.median(errors)
            # A forward found from the step starts at the step's start, so its window also holds the work
            # before the labelled forward (the batch): 0.6 to 1.1 % of the step in quiet runs, 2.8 % once
            # in a CI run under load. It gets 4 %; every other number 2 %.
            if expected_sources[mode]["forward"] == ("step",):
                assert worst.pop(("forward", "window_us")) <= 4.0, (mode, f.rank)
            assert max(worst.values()) <= 2.0, (mode, f.rank, {k: round(v, 2) for k, v in worst.items() if v > 1})
            assert {(c.phase, c.kind): c.count for c in f.phase_collectives} == {(c.phase, c.kind): c.count for c in t.phase_collectives}
    # The run's own record and report say where the phases came from.
    metrics = load_metrics(run / "metrics.json")
    report = (run / "report.md").read_text()
    for mode in ENGINE_MODES:
        assert {p.phase: p.sources for p in metrics.summary.modes[mode].phases} == expected_sources[mode]
        assert (
            f"{mode}'s phases were [found from what torch records](#phases) (its steps have no forward/backward/optimizer labels)" in report
        )
    assert "ddp's phases were [found from what torch records](#phases) (its steps have no forward/backward/optimizer labels): " in report
    assert "forward from DDP's ranges; backward from autograd's frames; optimizer from torch.optim's ranges." in report
