"""`sweep`: one job, a compare run per point, a record and a report that says where the split pays."""

from __future__ import annotations

import json

import msgspec
import pytest

from profile_overlap.tools.sweep.record import SweepRecord

from conftest import cli, only_run_dir, torchrun

MODES = ("sequential", "split", "split-blocking")
# Tiny: each point is dominated by start-up, the profiler and the point's report. No --dim:
# each point takes its own model's default width.
TINY = ["--layers", "2", "--batch", "4", "--seq-len", "8", "--steps", "2", "--warmup-steps", "1", "--profile-steps", "1"]


@pytest.mark.slow
def test_sweep_over_models_runs_every_point_in_one_job(tmp_path):
    args = ["sweep", "--vary", "model=mlp,transformer", "--vary", "heads=2", "--out", str(tmp_path), *TINY]
    proc = torchrun(args, nproc=2, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    sweep_dir = only_run_dir(tmp_path)
    assert sweep_dir.name.endswith("-sweep-gloo-w2")
    record = json.loads((sweep_dir / "sweep.json").read_text())
    assert record["vary"] == {"model": ["mlp", "transformer"], "heads": [2]}
    # Read typed (each point's modes gathered from beside its fixed keys) and written back, the same file.
    assert json.dumps(SweepRecord.from_json(record).to_json(), indent=1) == json.dumps(record, indent=1)
    assert [p["knobs"] for p in record["points"]] == [{"model": "mlp", "heads": 2}, {"model": "transformer", "heads": 2}]
    assert [p["name"] for p in record["points"]] == ["00-mlp-heads2", "01-transformer-heads2"]
    # --dim was not given: each point has its own model's default width (run/config.py MODEL_DEFAULTS).
    widths = {"mlp": 512, "transformer": 256}
    for point in record["points"]:
        run_dir = sweep_dir / point["name"]
        metrics = json.loads((run_dir / "metrics.json").read_text())
        model = point["knobs"]["model"]
        assert (metrics["config"]["model"], metrics["config"]["dim"], metrics["config"]["heads"]) == (model, widths[model], 2)
        assert (metrics["config"]["layers"], metrics["config"]["batch"], metrics["config"]["seq_len"]) == (2, 4, 8)
        assert point["workload"]["dim"] == widths[model]
        assert json.loads((run_dir / "status.json").read_text())["state"] == "succeeded"
        # The sweep's numbers are the point's own record, not recomputed; all three modes are in it.
        assert point["headline"] == metrics["summary"]["headline"]
        versus = {x["mode"]: x for x in metrics["summary"]["speedup_vs_first"]}
        for mode in MODES:
            assert point[mode]["step_ms"] == pytest.approx(metrics["modes"][mode]["step_time"]["median_ms"])
            assert point[mode]["speedup_vs_first"] == versus[mode]["speedup"]
            # Each point is a TensorBoard run per mode with its hparams (the sweep's HParams entries).
            assert list((run_dir / mode).glob("events.out.tfevents.*.profile_overlap"))
        # By default, split's speedup over the first mode is the headline speedup (sequential / split).
        assert point["split"]["speedup_vs_first"] == pytest.approx(point["headline"]["speedup"])
        assert (run_dir / "report.html").exists()
    # The other knob's single value makes one series; its crossover is one of three kinds.
    assert record["modes"] == list(MODES)
    assert [c["series"] for c in record["crossover"]] == [{"heads": 2}]
    assert (record["crossover"][0]["mode"], record["crossover"][0]["baseline"]) == ("split", "sequential")
    assert record["crossover"][0]["kind"] in ("never", "always", "crossover")
    html = (sweep_dir / "sweep.html").read_text()
    assert "when does split beat sequential?" in html and "data:image/svg+xml" in html and "http://" not in html
    assert "K2 d256 B4 T8" in html and "K2 d512 B4" in html
    md = (sweep_dir / "sweep.md").read_text()
    assert "](sweep.png)" in md and (sweep_dir / "sweep.png").stat().st_size > 10_000
    assert json.loads((sweep_dir / "status.json").read_text())["state"] == "succeeded"
    assert json.loads((sweep_dir / "config.json").read_text())["base"]["dim"] is None  # each point's model decides
    assert "profile_overlap sweep" in proc.stdout and "sweep folder:" in proc.stdout and "transformer" in proc.stdout


def _sweep_config(argv: list[str]):
    from profile_overlap.cli.main import build_parser
    from profile_overlap.cli.sweep import from_args

    return from_args(build_parser("sweep").parse_args(argv))


def test_points_take_their_own_model_defaults_unless_given():
    configs = _sweep_config(["--vary", "model=mlp,transformer"]).point_configs()
    workloads = [c.workload for c in configs]
    assert [(w.model, w.layers, w.dim, w.batch) for w in workloads] == [("mlp", 8, 512, 64), ("transformer", 4, 256, 8)]
    configs = _sweep_config(["--vary", "model=mlp,transformer", "--dim", "64", "--layers", "2"]).point_configs()
    assert [(c.workload.layers, c.workload.dim, c.workload.batch) for c in configs] == [(2, 64, 64), (2, 64, 8)]
    # The hyphenated spelling of a flag is the same knob.
    sweep = _sweep_config(["--vary", "seq-len=16,32", "--vary", "dim=128,256", "--model", "transformer"])
    assert sweep.vary == (("seq_len", (16, 32)), ("dim", (128, 256)))
    assert [(c.workload.seq_len, c.workload.dim) for c in sweep.point_configs()] == [(16, 128), (16, 256), (32, 128), (32, 256)]


def test_every_point_must_fit_the_world_size():
    sweep = _sweep_config(["--vary", "model=mlp,transformer", "--dim", "96"])
    sweep.check_world_size(4)
    with pytest.raises(ValueError, match="sweep point model=mlp: --dim 96 is not divisible by the world size 5"):
        sweep.check_world_size(5)


def _point(x, speedup, noisy, knob="dim", mode="split"):
    """A point whose `mode` ran `speedup` times faster than the first mode."""
    return {"name": f"p{x}", "knobs": {knob: x}, mode: {"speedup_vs_first": speedup, "within_noise_vs_first": noisy}}


def _full(p: dict) -> dict:
    """A point as sweep.json holds it, with its fixed keys filled in around its knobs and mode entries."""
    return {"workload": {}, "passed": True, "headline": {}, "within_noise": None, **p}


def test_crossover_ignores_wins_within_noise():
    from profile_overlap.tools.sweep import crossover

    point, vary = _point, (("dim", (1, 2, 3)),)

    def at(points, vary=vary, modes=("sequential", "split")):
        raw = {"vary": dict(vary), "modes": list(modes), "points": [_full(p) for p in points], "crossover": []}
        return msgspec.to_builtins(crossover(SweepRecord.from_json(raw).points, vary, list(modes))[0])

    assert at([point(1, 0.8, False), point(2, 1.2, False), point(3, 1.5, False)])["at"] == {"dim": 2}
    assert at([point(1, 0.8, False), point(2, 1.05, True), point(3, 1.5, False)])["at"] == {"dim": 3}
    assert at([point(1, 1.2, False), point(2, 1.3, False), point(3, 1.5, False)])["kind"] == "always"
    assert at([point(1, 0.5, False), point(2, 1.1, True), point(3, 0.9, False)])["kind"] == "never"
    # A win that does not last to the end of the range is not a crossover.
    assert at([point(1, 0.5, False), point(2, 1.5, False), point(3, 0.7, False)])["kind"] == "never"
    # Numbers are sorted whatever order they were given in; names keep the order given.
    assert at([point(3, 1.5, False), point(1, 0.8, False)], (("dim", (3, 1)),))["at"] == {"dim": 3}
    names = [_point("transformer", 0.8, False, "model"), _point("mlp", 1.5, False, "model")]
    assert at(names, (("model", ("transformer", "mlp")),))["at"] == {"model": "mlp"}
    assert at(names, (("model", ("mlp", "transformer")),))["kind"] == "never"
    # With --modes, the second mode given against the first: here fsdp2 against ddp.
    engines = [point(1, 0.5, False, mode="fsdp2"), point(2, 1.4, False, mode="fsdp2"), point(3, 2.0, False, mode="fsdp2")]
    found = at(engines, modes=("ddp", "fsdp2", "sequential"))
    assert (found["mode"], found["baseline"], found["kind"], found["at"]) == ("fsdp2", "ddp", "crossover", {"dim": 2})


def test_renderers_take_names_and_missing_numbers():
    """A model sweep's x axis is categorical; a point without a speedup is drawn as a gap and shown as –."""
    from profile_overlap.tools.sweep.report import explain_crossover, figure, table_columns, table_rows

    def point(model, speedup, modes=MODES):
        numbers = {"step_ms": 2.0, "comm_ms": 1.0, "compute_ms": 1.5, "exposed_comm_ms": 0.5, "overlap_pct": 50.0}
        per_mode = {m: {**numbers, "speedup_vs_first": speedup, "within_noise_vs_first": False} for m in modes}
        per_mode[modes[0]]["speedup_vs_first"] = None if speedup is None else 1.0
        workload = {"model": model, "layers": 2, "dim": 64, "batch": 4, "heads": 4, "seq_len": 8, "dtype": "float32"}
        headline = {"speedup": speedup, "predicted_speedup": None}
        return {"name": model, "knobs": {"model": model}, "workload": workload, "passed": True, "headline": headline,
                "within_noise": False, **per_mode}  # fmt: skip

    points = [point("transformer", None), point("mlp", 1.4)]
    record = {"vary": {"model": ["transformer", "mlp"]}, "modes": list(MODES), "points": points, "crossover": [{"series": {},
              "kind": "crossover", "at": {"model": "mlp"}, "point": "mlp"}]}  # fmt: skip
    fig = figure(SweepRecord.from_json(record))
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["transformer", "mlp"]
    assert (
        table_rows(SweepRecord.from_json(record))[0][:2] == ("transformer", "K2 d64 B4 T8")
        and "–" in table_rows(SweepRecord.from_json(record))[0]
    )
    assert explain_crossover(SweepRecord.from_json(record))[0].startswith("split starts to beat sequential at model=mlp: 1.40×")
    record["points"] = [point("transformer", None), point("mlp", None)]
    record["crossover"] = [{"series": {}, "kind": "never", "at": None, "point": None}]
    assert "cannot say where split wins" in explain_crossover(SweepRecord.from_json(record))[0]

    # Any modes, in the order given: a column per mode, every other mode against the first, a line per mode.
    five = ("ddp", "sequential", "split", "split-blocking", "fsdp2")
    crossed = [{"series": {}, "kind": "crossover", "at": {"model": "mlp"}, "point": "mlp"}]
    points = [point("transformer", 0.9, five), point("mlp", 1.2, five)]
    record = {"vary": {"model": ["transformer", "mlp"]}, "modes": list(five), "points": points, "crossover": crossed}
    assert table_columns(SweepRecord.from_json(record))[:9] == [*(f"{m} step ms" for m in five), *(f"{m} vs ddp" for m in five[1:])]
    assert table_rows(SweepRecord.from_json(record))[1][2 + 5 : 2 + 9] == ("1.20×",) * 4
    fig = figure(SweepRecord.from_json(record))
    assert fig.axes[0].get_title() == "speedup vs ddp (x)"
    assert len([ln for ln in fig.axes[1].get_lines() if ln.get_linestyle() == ":"]) == 5 * 1  # a line per mode (one series)
    assert explain_crossover(SweepRecord.from_json(record))[0].startswith("sequential starts to beat ddp at model=mlp: 1.20×")


@pytest.mark.slow
@pytest.mark.parametrize(
    "args, message",
    [
        (["sweep"], "give at least one --vary"),
        (["sweep", "--vary", "width=1,2"], "KNOB one of dim, layers, batch, dtype, model, heads, seq_len"),
        (["sweep", "--vary", "dim=a,b"], "dim takes whole numbers"),
        (["sweep", "--vary", "model=cnn"], "--vary 'model=cnn': model takes one of mlp, transformer, not 'cnn'"),
        (["sweep", "--vary", "dim=64,64"], "repeats a value"),
        (["sweep", "--vary", "dim=0,64"], "sweep point dim=0: --dim must be a positive integer, got 0"),
        (
            ["sweep", "--vary", "model=mlp,transformer", "--dim", "30"],
            "sweep point model=transformer: --dim 30 is not divisible by --heads 4",
        ),
        (["sweep", "--vary", "dim=64", "--mode", "split"], "a sweep always runs --mode compare (every mode): drop --mode split"),
    ],
)
def test_bad_sweep_flags(args, message):
    proc = cli(args)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("profile_overlap sweep: error: ") and message in lines[0], proc.stderr
