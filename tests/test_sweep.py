"""`sweep`: one job, a compare run per point, a record and a report that says where the split pays."""

from __future__ import annotations

import json

import pytest

from conftest import cli, only_run_dir, torchrun

SWEEP = ["--layers", "2", "--batch", "64", "--steps", "3", "--warmup-steps", "1", "--profile-steps", "1"]


def test_sweep_runs_every_point_in_one_job(tmp_path):
    proc = torchrun(["sweep", "--vary", "dim=32,64", "--vary", "layers=2,3", "--out", str(tmp_path), *SWEEP[2:]], nproc=2, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    sweep_dir = only_run_dir(tmp_path)
    assert sweep_dir.name.endswith("-sweep-gloo-w2")
    record = json.loads((sweep_dir / "sweep.json").read_text())
    assert record["vary"] == {"dim": [32, 64], "layers": [2, 3]}
    assert [p["knobs"] for p in record["points"]] == [
        {"dim": 32, "layers": 2},
        {"dim": 32, "layers": 3},
        {"dim": 64, "layers": 2},
        {"dim": 64, "layers": 3},
    ]
    for point in record["points"]:
        run_dir = sweep_dir / point["name"]
        metrics = json.loads((run_dir / "metrics.json").read_text())
        assert (metrics["config"]["dim"], metrics["config"]["layers"]) == (point["knobs"]["dim"], point["knobs"]["layers"])
        assert json.loads((run_dir / "status.json").read_text())["state"] == "succeeded"
        # The sweep's numbers are the point's own record, not recomputed.
        assert point["headline"]["speedup"] == pytest.approx(metrics["speedup"]["measured"])
        assert point["split"]["step_ms"] == pytest.approx(metrics["modes"]["split"]["step_time"]["median_ms"])
        assert set(p.name for p in run_dir.iterdir()) >= {"sequential", "split", "report.html"}
        # Each point is a TensorBoard run per mode with its hparams (the sweep's HParams entries).
        for mode in ("sequential", "split"):
            assert list((run_dir / mode).glob("events.out.tfevents.*.profile_overlap"))
    # One crossover statement per series (the other knob's values), each one of three kinds.
    assert sorted(c["series"]["layers"] for c in record["crossover"]) == [2, 3]
    assert all(c["kind"] in ("never", "always", "crossover") for c in record["crossover"])
    html = (sweep_dir / "sweep.html").read_text()
    assert "when does the split pay?" in html and "data:image/svg+xml" in html and "http://" not in html
    md = (sweep_dir / "sweep.md").read_text()
    assert "](sweep.png)" in md and (sweep_dir / "sweep.png").stat().st_size > 10_000
    assert json.loads((sweep_dir / "status.json").read_text())["state"] == "succeeded"
    assert "profile_overlap sweep" in proc.stdout and "sweep folder:" in proc.stdout


def test_crossover_ignores_wins_within_noise():
    from profile_overlap.tools.sweep import crossover

    def point(dim, speedup, noisy):
        return {"name": f"d{dim}", "knobs": {"dim": dim}, "headline": {"speedup": speedup}, "within_noise": noisy}

    vary = (("dim", (1, 2, 3)),)
    assert crossover([point(1, 0.8, False), point(2, 1.2, False), point(3, 1.5, False)], vary)[0]["at"] == {"dim": 2}
    assert crossover([point(1, 0.8, False), point(2, 1.05, True), point(3, 1.5, False)], vary)[0]["at"] == {"dim": 3}
    assert crossover([point(1, 1.2, False), point(2, 1.3, False), point(3, 1.5, False)], vary)[0]["kind"] == "always"
    assert crossover([point(1, 0.5, False), point(2, 1.1, True), point(3, 0.9, False)], vary)[0]["kind"] == "never"
    # A win that does not last to the end of the range is not a crossover.
    assert crossover([point(1, 0.5, False), point(2, 1.5, False), point(3, 0.7, False)], vary)[0]["kind"] == "never"


@pytest.mark.parametrize(
    "args, message",
    [
        (["sweep"], "give at least one --vary"),
        (["sweep", "--vary", "width=1,2"], "KNOB one of dim, layers, batch, dtype"),
        (["sweep", "--vary", "dim=a,b"], "dim takes whole numbers"),
        (["sweep", "--vary", "dim=64,64"], "repeats a value"),
        (["sweep", "--vary", "dim=0,64"], "--dim must be a positive integer, got 0"),
        (["sweep", "--vary", "dim=64", "--mode", "split"], "a sweep always compares both modes"),
    ],
)
def test_bad_sweep_flags(args, message):
    proc = cli(args)
    assert proc.returncode == 2
    assert message in proc.stderr and "Traceback" not in proc.stderr
