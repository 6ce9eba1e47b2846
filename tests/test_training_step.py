"""The real training step: models, flat units, the three schedules and their verification, on real
gloo ranks (torchrun) where collectives are involved."""

from __future__ import annotations

import json

import pytest
import torch

from profile_overlap.run import models
from profile_overlap.run.config import Config
from profile_overlap.run.pipelines import FlatUnit

from conftest import FEW_STEPS, TINY_TRANSFORMER, cli, only_run_dir, torchrun

MODES = ("sequential", "split", "split-blocking")


def _phase(rank: dict, name: str) -> dict:
    return next(p for p in rank["phases"] if p["phase"] == name)


def _check_compare(run_dir, nproc: int) -> dict:
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert tuple(metrics["modes"]) == MODES
    checks = [c for m in metrics["modes"].values() for c in m["checks"]] + metrics["checks"]
    assert all(c["passed"] for c in checks), [c for c in checks if not c["passed"]]
    assert [c["name"] for c in metrics["checks"]] == [
        "sequential == split: final parameters",
        "sequential == split-blocking: final parameters",
    ]
    # gloo's reduce_scatter sums in all_reduce's order, and every mode runs the same ops on the same
    # data, so in float32 the three modes end bit-identical.
    assert all(c["max_abs_err"] == 0 for c in metrics["checks"])

    split = metrics["modes"]["split"]["analysis"]["ranks"]
    blocking = metrics["modes"]["split-blocking"]["analysis"]["ranks"]
    assert len(split) == nproc
    # The reduce_scatter hides behind the backward of the earlier units on every rank.
    assert all(_phase(r, "backward")["overlap_us"] > 0 for r in split)
    # split-blocking waits for every collective at once: (next to) nothing overlaps.
    for r in blocking:
        assert sum(p["overlap_us"] for p in r["phases"]) <= 0.05 * r["comm_us"]
    # sequential's all_reduce runs in its backward window, exposed.
    for r in metrics["modes"]["sequential"]["analysis"]["ranks"]:
        assert _phase(r, "backward")["exposed_comm_us"] > 0
        assert _phase(r, "forward")["comm_us"] == 0

    # Optimizer state: the split modes keep the moments of 1/N of the (padded) parameters.
    state = {m: {x["optimizer_state_bytes"] for x in metrics["modes"][m]["memory"]} for m in MODES}
    (seq,) = state["sequential"]
    assert state["split"] == state["split-blocking"] == {seq // nproc}
    return metrics


def _backward_reduce_scatter_starts_in_backward(run_dir) -> None:
    """In split, a unit's reduce_scatter starts while autograd is still running backward."""
    timeline = json.loads((run_dir / "timeline.json").read_text())
    for rank in timeline["modes"]["split"]["ranks"]:
        step = rank["steps"][0]["step"]
        backward = [(a, b) for s, phase, a, b in rank["phases"] if s == step and phase == "backward"]
        assert backward, rank["phases"]
        rs = [sp for sp in rank["spans"] if sp[0] == step and sp[3] == "comm" and "reduce_scatter" in sp[4]]
        assert rs and min(sp[1] for sp in rs) < backward[0][1]


@pytest.mark.slow
def test_transformer_compare_on_2_ranks(tmp_path):
    proc = torchrun(["--mode", "compare", "--out", str(tmp_path), *TINY_TRANSFORMER, *FEW_STEPS], nproc=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = only_run_dir(tmp_path)
    _check_compare(run_dir, 2)
    _backward_reduce_scatter_starts_in_backward(run_dir)


@pytest.mark.slow
def test_transformer_compare_on_4_ranks(tmp_path):
    proc = torchrun(["--mode", "compare", "--out", str(tmp_path), *TINY_TRANSFORMER, *FEW_STEPS], nproc=4)
    assert proc.returncode == 0, proc.stderr[-3000:]
    _check_compare(only_run_dir(tmp_path), 4)


def test_mlp_compare_on_2_and_4_ranks(compare_run_2, compare_run_4):
    for run_dir, nproc in ((compare_run_2, 2), (compare_run_4, 4)):
        _check_compare(run_dir, nproc)
    _backward_reduce_scatter_starts_in_backward(compare_run_2)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["bfloat16"])  # float16 on gloo: tests/test_reliability.py (mlp)
def test_transformer_in_low_precision_is_verified(tmp_path, dtype):
    proc = torchrun(["--mode", "compare", "--no-profile", "--dtype", dtype, "--out", str(tmp_path), *TINY_TRANSFORMER, *FEW_STEPS], nproc=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = json.loads((only_run_dir(tmp_path) / "metrics.json").read_text())
    checks = [c for m in metrics["modes"].values() for c in m["checks"]] + metrics["checks"]
    assert len(checks) == 3 * 2 + 2 and all(c["passed"] for c in checks)


@pytest.mark.slow
def test_a_corrupted_transformer_block_is_named(tmp_path):
    env = {"PROFILE_OVERLAP_FAULT": "corrupt:rank=1:step=0:layer=2"}
    proc = torchrun(["--mode", "split", "--no-profile", "--out", str(tmp_path), *TINY_TRANSFORMER, *FEW_STEPS], nproc=2, env=env)
    assert proc.returncode == 1
    assert "verification failed: AllReduce == AllGather(ReduceScatter): FAILED" in proc.stderr
    metrics = json.loads((only_run_dir(tmp_path) / "metrics.json").read_text())
    (check,) = metrics["modes"]["split"]["checks"]
    assert (check["worst_rank"], check["worst_step"], check["worst_layer"]) == (1, 0, 2)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "cnn"], "--model"),
        (["--model", "transformer", "--dim", "66", "--heads", "4"], "--dim 66 is not divisible by --heads 4"),
        (["--seq-len", "0"], "--seq-len must be a positive integer"),
    ],
)
def test_bad_model_flags_get_one_line(tmp_path, args, message):
    proc = cli(["--nproc-per-node", "2", "--out", str(tmp_path), *args])
    assert proc.returncode == 2
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_each_rank_gets_its_own_batch_the_same_in_every_mode():
    config = Config.of(model="transformer", dim=32, layers=1, heads=2, seq_len=8, batch=2)
    kw = dict(dtype=torch.float32, device=torch.device("cpu"))
    a0, b0 = models.batch(config, rank=0, step=3, **kw), models.batch(config, rank=0, step=3, **kw)
    assert torch.equal(a0[0], b0[0]) and torch.equal(a0[1], b0[1])
    assert not torch.equal(a0[0], models.batch(config, rank=1, step=3, **kw)[0])
    assert not torch.equal(a0[0], models.batch(config, rank=0, step=4, **kw)[0])
    # Targets are the next tokens.
    assert torch.equal(a0[0][:, 1:], a0[1][:, :-1])


@pytest.mark.parametrize("model", ["mlp", "transformer"])
def test_units_hold_every_parameter_once_as_views_of_one_flat_buffer(model):
    config = Config.of(model=model, dim=30, layers=2, heads=2, seq_len=8, batch=2)
    net = models.build_model(config, dtype=torch.float32, device=torch.device("cpu"))
    before = [p.detach().clone() for p in net.parameters()]
    units = [FlatUnit(i, m, world_size=4, rank=1) for i, m in enumerate(net.units())]
    assert sum(len(u.params) for u in units) == len(list(net.parameters()))
    assert all(torch.equal(a, b) for a, b in zip(before, net.parameters()))  # values kept
    for u in units:
        assert u.padded % 4 == 0 and u.padded - u.numel < 4
        assert all(p.untyped_storage().data_ptr() == u.flat.untyped_storage().data_ptr() for p in u.params)
    # A real backward, flattened: the bucket is the gradients in order, then zero padding.
    net.loss(models.batch(config, rank=0, step=0, dtype=torch.float32, device=torch.device("cpu"))).backward()
    unit = units[-1]
    grads = torch.cat([p.grad.reshape(-1) for p in unit.params])
    bucket = unit.flatten_grads()
    assert torch.equal(bucket[: unit.numel], grads) and not bucket[unit.numel :].any()
    assert all(p.grad is None for p in unit.params)
