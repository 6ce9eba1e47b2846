"""GPU traces: each kernel counts in the step and the phase whose CPU range launched it (issue 39,
findings 2 and 4), on a synthetic trace whose answer is known by construction
(tests/gpu_steps_traces.py) and on the real A100 traces in tests/data, read here straight from
their JSON."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from gpu_steps_traces import write

from profile_overlap.analysis.folder import analyze_dir
from profile_overlap.analysis.read.classify import MEMORY_KERNEL_RE, SYNC_KERNEL_RE

from conftest import DATA

REAL = [DATA / "hta_nccl_parser_config_1rank" / "nccl_data.json.gz", *sorted((DATA / "hta_trace_filter_2rank").glob("*.json.gz"))]
PHASE_LABELS = {"## forward ##": "forward", "## backward ##": "backward", "## optimizer ##": "optimizer"}


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    folder = write(tmp_path_factory.mktemp("gpu_steps")).parent
    return analyze_dir(folder, max_workers=1).ranks[0]


def test_a_step_runs_on_the_device_from_its_first_launched_kernel_to_its_last(synthetic):
    # Step 3's window starts where step 2's ends (3700), not at its first kernel (3620): the 80 µs
    # they share count once, in step 2 (with step 3's forward kernel running then).
    got = [(s.step, s.start_us, s.step_us, s.comm_us, s.compute_us, s.overlap_us, s.exposed_comm_us) for s in synthetic.steps]
    assert got == [(1, 1620, 750, 200, 565, 130, 70), (2, 2620, 1080, 500, 645, 210, 290), (3, 3700, 670, 200, 485, 130, 70)]


def test_the_last_step_keeps_the_work_it_launched_and_the_warmup_s_tail_counts_in_no_step(synthetic):
    # The warmup's two kernels (200 µs) run inside ProfilerStep#1's CPU range; the last step's
    # backward and optimizer run after its range has closed at 4000.
    assert sum(s.compute_us for s in synthetic.steps) == 3 * 565
    assert sum(s.comm_us for s in synthetic.steps) == synthetic.comm_us == 900
    assert synthetic.compute_us == 3 * 565 + 200  # the whole trace: every kernel, none dropped
    assert sum(s.step_us for s in synthetic.steps) == 750 + (3700 - 2620) + (4370 - 3700)  # the union of the windows


def test_phases_hold_the_kernels_their_ranges_launched_from_any_thread(synthetic):
    # Backward's kernels come from autograd's thread, while the main thread waits inside `## backward ##`;
    # Kineto's device copy of that range holds only the main thread's 5 µs fill.
    phases = {s.step: {p.phase: (p.window_us, p.compute_us, p.comm_us, p.overlap_us) for p in s.phases} for s in synthetic.steps}
    assert phases[1] == {"forward": (230, 200, 0, 0), "backward": (395, 305, 200, 130), "optimizer": (60, 60, 0, 0)}
    # Step 2 holds [3620, 3700): step 3's forward kernel beside step 2's last all_reduce.
    assert phases[2] == {"forward": (310, 280, 80, 80), "backward": (395, 305, 200, 130), "optimizer": (390, 140, 300, 80)}
    assert phases[3] == {"forward": (150, 120, 0, 0), "backward": (395, 305, 200, 130), "optimizer": (60, 60, 0, 0)}
    windows = [w for w in synthetic.phase_windows if w[0] == 1]
    assert windows == [(1, "forward", 1620, 1850), (1, "backward", 1905, 2300), (1, "optimizer", 2310, 2370)]


# ---------------------------------------------------------------- the real traces


def _kernels_by_launch(path: Path) -> tuple[list[tuple[str, float, float]], list[tuple[float, float, float]]]:
    """(name, start, end) of the main thread's annotations (ProfilerStep and phase ranges) and
    (launch, start, end) of every kernel that counts, read from the JSON with nothing of ours."""
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    steps = [e for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")]
    main = steps[0]["tid"]
    ranges = [(e["name"], e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") == "user_annotation" and e["tid"] == main]
    launch = {e["args"]["correlation"]: e["ts"] for e in events if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    kernels = [
        (launch.get(e["args"].get("correlation")), e["ts"], e["ts"] + e["dur"])
        for e in events
        if e.get("cat") == "kernel" and not MEMORY_KERNEL_RE.search(e["name"]) and not SYNC_KERNEL_RE.search(e["name"])
    ]
    return ranges, kernels


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name)
def test_on_real_gpu_traces_every_kernel_lands_in_exactly_one_step(path):
    ranges, kernels = _kernels_by_launch(path)
    (rank,) = [r for r in analyze_dir(path.parent, max_workers=1).ranks if str(path) in r.files]
    cpu = [(int(n.split("#")[1]), a, b) for n, a, b in ranges if n.startswith("ProfilerStep#")]
    windows = {s.step: (s.start_us, s.start_us + s.step_us) for s in rank.steps}
    assert sorted(windows) == sorted(n for n, _, _ in cpu)
    for launch, start, end in kernels:
        (n,) = [n for n, a, b in cpu if a <= launch < b]  # launched inside exactly one ProfilerStep range
        assert windows[n][0] <= start and end <= windows[n][1], (n, start, end, windows[n])
        assert [m for m, (a, b) in windows.items() if a < end and start < b] == [n]  # and in no other step's window
    for n, (a, b) in windows.items():  # each window is the span of its own kernels
        mine = [(s, e) for launch, s, e in kernels if next(m for m, lo, hi in cpu if lo <= launch < hi) == n]
        assert (a, b) == (min(s for s, _ in mine), max(e for _, e in mine))


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name)
def test_on_real_gpu_traces_the_phase_windows_hold_the_kernels_their_ranges_launched(path):
    ranges, kernels = _kernels_by_launch(path)
    (rank,) = [r for r in analyze_dir(path.parent, max_workers=1).ranks if str(path) in r.files]
    cpu = [(int(n.split("#")[1]), a, b) for n, a, b in ranges if n.startswith("ProfilerStep#")]
    got: dict[tuple[int, str], tuple[float, float]] = {}
    for n, p, a, b in rank.phase_windows:  # a phase's windows in a step (Optimizer.step inside `## optimizer ##`)
        lo, hi = got.get((n, p), (a, b))
        got[(n, p)] = (min(a, lo), max(b, hi))
    want: dict[tuple[int, str], tuple[float, float]] = {}
    for name, a, b in ranges:
        if name not in PHASE_LABELS:
            continue
        (n,) = [n for n, lo, hi in cpu if lo <= a < hi]
        mine = [(s, e) for launch, s, e in kernels if a <= launch < b]
        assert mine, f"{name} of step {n} launched no kernel"
        key = (n, PHASE_LABELS[name])
        lo, hi = min(s for s, _ in mine), max(e for _, e in mine)
        want[key] = (min(lo, want.get(key, (lo, hi))[0]), max(hi, want.get(key, (lo, hi))[1]))
    assert got == want
    if path.name == "nccl_data.json.gz":
        # Kineto's device copy of `## backward ##` is 630-648 µs (6 kernels); the kernels the range
        # launched, most of them from autograd's thread, run for 85-92 ms.
        backward = [b - a for (n, p), (a, b) in got.items() if p == "backward"]
        assert len(backward) == 3 and min(backward) > 85_000


def test_device_windows_do_not_depend_on_the_kernels_order():
    """Kernels in launch order (how `extract` passes them) take the per-step slices; any other
    order, the per-kernel assignment. Both give each step the same window, for disjoint, touching,
    overlapping and empty steps, steps that share a start, and launches on their boundaries."""
    import numpy as np

    from profile_overlap.analysis.file.steps import device_windows

    rng = np.random.default_rng(0)
    for _ in range(3000):
        n, m = int(rng.integers(1, 8)), int(rng.integers(1, 40))
        cpu_start = rng.integers(0, 50, n).astype(float)
        cpu_end = cpu_start + rng.integers(-3, 15, n)
        launch = np.sort(rng.integers(-5, 70, m).astype(float))
        start = rng.integers(0, 100, m).astype(float)
        end = start + rng.integers(0, 10, m)
        shuffled = rng.permutation(m)
        if (launch[shuffled][1:] >= launch[shuffled][:-1]).all():
            continue  # still in order: nothing to compare
        in_order = device_windows(cpu_start, cpu_end, (launch, start, end))
        any_order = device_windows(cpu_start, cpu_end, (launch[shuffled], start[shuffled], end[shuffled]))
        assert np.array_equal(in_order[0], any_order[0]) and np.array_equal(in_order[1], any_order[1])
