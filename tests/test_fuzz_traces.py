"""Fuzz (issue 34): generated broken and hostile traces through `analyze`, `perfetto`, `report` and
the TensorBoard plugin's routes. Each must end in exit 0 or 2 (with 2, one line naming the problem),
never a traceback, within bounded memory.

The commands run in this process (cli.main(argv), SystemExit caught, stdout and stderr captured),
which is what makes hundreds of cases affordable. Memory per case is tracemalloc's peak of Python
allocations (numpy's and msgspec's included); the cases with the highest peaks then run again as
real processes, whose peak RSS (ru_maxrss, workers included) is the honest figure. The cases run in
SHARDS tests, this file's and tests/test_fuzz_traces_2.py's, each from a seed of its own.

    pytest tests/test_fuzz_traces.py tests/test_fuzz_traces_2.py -s   # prints the counts and worst peaks (benchmarks/README.md)
"""

from __future__ import annotations

import contextlib
import copy
import gzip
import io
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import tracemalloc
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from synthetic import gpu_trace

from conftest import DATA, REPO, clean_env

pytestmark = pytest.mark.slow  # hundreds of cases, each through four commands; and real processes at the end

CASES = int(os.environ.get("PROFILE_OVERLAP_FUZZ_CASES", 500))
PEAK_LIMIT_MB = 300
MB = 1 << 20

# ---------------------------------------------------------------- the traces

STEPS = [(1, 0, 1000), (2, 1000, 2000), (3, 2000, 3000)]
COMM = [(20, 100, 300), (20, 1100, 1300), (20, 2100, 2300)]
COMPUTE = [(7, 0, 200), (7, 1000, 1200), (7, 2000, 2200)]


def _gloo(rank: int) -> dict:
    path = sorted((DATA / "gloo_2rank").glob(f"host_{rank}*"))[0]
    return json.loads(gzip.decompress(path.read_bytes()))


TEMPLATES = {
    "gpu": [gpu_trace(COMM, COMPUTE, steps=STEPS, rank=r, world_size=2) for r in (0, 1)],
    "gloo": [_gloo(0), _gloo(1)],
}

NUMBERS = [10**30, -(10**30), 2**63, 2**64, -(2**63) - 1, 1e308, -1e308, 5e-324, 0, -1, float("nan"), float("inf"), -float("inf")]
HOSTILE_TEXT = [
    "\x1b[31mred\x1b[0m",
    "<script>alert(1)</script>",
    "a\x00b\x07c\rd",
    "| pipe | row |",
    "},{",
    "\ud800",
    "ProfilerStep#99999999999999999999",
    "ProfilerStep#-1",
    "nccl:all_reduce",
    "forward",
]
FIELDS = ["ph", "cat", "name", "pid", "tid", "ts", "dur", "args", "id"]
ARG_FIELDS = [
    "External id",
    "correlation",
    "stream",
    "Collective name",
    "In msg nelems",
    "Group size",
    "dtype",
    "Process Group Name",
    "name",
]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.sampled_from(NUMBERS) | st.text(max_size=20) | st.sampled_from(HOSTILE_TEXT),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


@dataclass
class Case:
    """One generated folder of traces: what was done to it, for the failure message."""

    what: list[str] = field(default_factory=list)
    files: dict[str, bytes] = field(default_factory=dict)


def _events(doc: dict) -> list:
    events = doc.get("traceEvents")
    return events if isinstance(events, list) else []


def _mutate(draw, doc: dict, what: list[str]) -> dict | bytes:
    """One mutation of a trace document (or its bytes)."""
    kind = draw(
        st.sampled_from(
            [
                "wrong_type",
                "huge_number",
                "negative_time",
                "nan_time",
                "deep",
                "giant_string",
                "duplicate_ids",
                "outside_steps",
                "distributed",
                "structure",
                "hostile_text",
                "drop_events",
            ]
        )
    )
    events = _events(doc)
    pick = st.integers(0, max(0, len(events) - 1))
    what.append(kind)
    if kind == "wrong_type" and events:
        for _ in range(draw(st.integers(1, 3))):
            e = events[draw(pick)]
            if isinstance(e, dict):
                if draw(st.booleans()) and isinstance(e.get("args"), dict):
                    e["args"][draw(st.sampled_from(ARG_FIELDS))] = draw(json_values)
                else:
                    e[draw(st.sampled_from(FIELDS))] = draw(json_values)
    elif kind == "huge_number" and events:
        for _ in range(draw(st.integers(1, 4))):
            e = events[draw(pick)]
            if isinstance(e, dict):
                key = draw(st.sampled_from(["ts", "dur", "pid", "tid", "External id", "correlation", "In msg nelems", "Group size"]))
                target = e.setdefault("args", {}) if key[0].isupper() or key == "correlation" else e
                if isinstance(target, dict):
                    target[key] = draw(st.sampled_from(NUMBERS))
    elif kind == "negative_time":
        for e in events:
            if isinstance(e, dict) and draw(st.booleans()):
                e[draw(st.sampled_from(["ts", "dur"]))] = -abs(float(e.get("ts", 1) or 1)) * draw(st.sampled_from([1, 1e6, 1e12]))
    elif kind == "nan_time" and events:
        for _ in range(draw(st.integers(1, 4))):
            e = events[draw(pick)]
            if isinstance(e, dict):
                e[draw(st.sampled_from(["ts", "dur"]))] = draw(st.sampled_from([float("nan"), float("inf"), "NaN", "Infinity", None]))
    elif kind == "deep":
        depth = draw(st.sampled_from([10, 300, 999, 1001, 5000, 200_000]))
        nested: object = []
        for _ in range(min(depth, 2000)):  # json.dumps recurses too: deeper ones are spliced in as bytes below
            nested = [nested]
        where = draw(st.sampled_from(["args", "event", "distributedInfo"]))
        if depth > 2000:
            marker = "@@DEEP@@"
            nested = marker
            what.append(f"depth {depth}")
        if where == "args" and events and isinstance(events[0], dict):
            events[0]["args"] = {"x": nested}
        elif where == "event":
            events.insert(0, nested)
        else:
            doc["distributedInfo"] = {"rank": 0, "pg_config": nested}
        if depth > 2000:
            text = json.dumps(doc, allow_nan=True).encode()
            return text.replace(b'"@@DEEP@@"', b"[" * depth + b"]" * depth, 1)
    elif kind == "giant_string" and events:
        size = draw(st.sampled_from([1 * MB, 4 * MB, 12 * MB]))
        filler = draw(st.sampled_from(["a", "},", '\\"', "\u00e9"]))
        e = events[draw(pick)]
        if isinstance(e, dict):
            e[draw(st.sampled_from(["name", "cat", "unknown"]))] = filler * (size // len(filler))
        what.append(f"{size // MB} MiB of {filler!r}")
    elif kind == "duplicate_ids" and events:
        ids = draw(st.sampled_from(["correlation", "External id", "event", "step"]))
        for e in list(events):
            if not isinstance(e, dict):
                continue
            if ids == "event":
                events.append(copy.deepcopy(e))
            elif ids == "step" and str(e.get("name", "")).startswith("ProfilerStep#"):
                e["name"] = "ProfilerStep#1"
            elif isinstance(e.get("args"), dict):
                e["args"][ids] = 7
    elif kind == "outside_steps":
        shift = draw(st.sampled_from([1e6, 1e12, -1e9, 1e17]))
        for e in events:
            ts = e.get("ts", 0) if isinstance(e, dict) else None
            if not isinstance(ts, (int, float)) or isinstance(ts, bool):
                continue  # an earlier mutation gave it a time of another type: a case of its own
            if draw(st.booleans()) and not str(e.get("name", "")).startswith("ProfilerStep#"):
                e["ts"] = float(ts or 0) + shift
        if draw(st.booleans()):
            doc["traceEvents"] = [e for e in events if not (isinstance(e, dict) and str(e.get("name", "")).startswith("ProfilerStep#"))]
    elif kind == "distributed":
        info = doc.setdefault("distributedInfo", {})
        if isinstance(info, dict):
            info[draw(st.sampled_from(["rank", "world_size", "backend", "pg_config"]))] = draw(
                st.sampled_from([0, -1, 10**9, 10**7, 2**31, 10**30, "3", None, [], {"a": 1}, 1.5])
            )
    elif kind == "structure":
        choice = draw(st.sampled_from(["no_events", "events_dict", "events_number", "list_doc", "string_doc", "events_of_numbers"]))
        what.append(choice)
        if choice == "no_events":
            doc.pop("traceEvents", None)
        elif choice == "events_dict":
            doc["traceEvents"] = {"0": events[:1]}
        elif choice == "events_number":
            doc["traceEvents"] = 12
        elif choice == "list_doc":
            return json.dumps(events).encode()
        elif choice == "string_doc":
            return b'"traceEvents"'
        else:
            doc["traceEvents"] = list(range(1000))
    elif kind == "hostile_text" and events:
        for _ in range(draw(st.integers(1, 5))):
            e = events[draw(pick)]
            if isinstance(e, dict):
                e[draw(st.sampled_from(["name", "cat", "tid", "pid"]))] = draw(st.sampled_from(HOSTILE_TEXT))
        if isinstance(doc.get("distributedInfo"), dict):
            doc["distributedInfo"]["backend"] = draw(st.sampled_from(HOSTILE_TEXT))
    elif kind == "drop_events" and events:
        keep = draw(st.floats(0, 1))
        doc["traceEvents"] = [e for e in events if draw(st.floats(0, 1)) < keep] if len(events) < 200 else events[: int(keep * len(events))]
    return doc


@st.composite
def cases(draw) -> Case:
    case = Case()
    template = draw(st.sampled_from(sorted(TEMPLATES)))
    ranks = draw(st.sampled_from([1, 2]))
    case.what.append(f"{template} x{ranks}")
    for rank in range(ranks):
        doc: dict | bytes = copy.deepcopy(TEMPLATES[template][rank])
        hostile = rank == 0 or draw(st.booleans())
        what: list[str] = []
        if hostile:
            for _ in range(draw(st.integers(1, 3))):
                if isinstance(doc, dict):
                    doc = _mutate(draw, doc, what)
        data = (
            doc
            if isinstance(doc, bytes)
            else json.dumps(doc, allow_nan=True, ensure_ascii=draw(st.booleans())).encode("utf-8", "surrogatepass")
        )
        if hostile:
            damage = draw(
                st.sampled_from(["none", "none", "none", "truncate", "binary", "bad_utf8", "gzip_garbage", "empty", "whitespace"])
            )
            if damage == "truncate":
                data = data[: draw(st.integers(0, max(0, len(data) - 1)))]
            elif damage == "binary":
                data = random.Random(draw(st.integers(0, 2**32))).randbytes(draw(st.sampled_from([1, 100, 10_000])))
            elif damage == "bad_utf8":
                data = data.replace(b'"name"', b'"n\xff\xfeame"', 1).replace(b"ProfilerStep", b"Profiler\xc3Step", 1)
            elif damage == "gzip_garbage":
                data = b"\x1f\x8b" + data[:1000]
            elif damage == "empty":
                data = b""
            elif damage == "whitespace":
                data = b" " * draw(st.sampled_from([10, 40 * MB])) + data
            if damage != "none":
                what.append(damage)
        gz = draw(st.booleans())
        if gz:
            data = gzip.compress(data, compresslevel=1)
            if hostile and draw(st.integers(0, 9)) == 0:
                data = data[: len(data) // 2]
                what.append("cut gzip")
        name = f"rank{rank}.pt.trace.json" + (".gz" if gz else "")
        case.files[name] = data
        case.what.append(f"{name}: {', '.join(what) or 'clean'}")
    return case


# ---------------------------------------------------------------- the commands, in this process


@dataclass
class Outcome:
    argv: list[str]
    code: int
    out: str
    err: str


EXITS: dict[tuple[str, int], int] = {}
"""(command, exit status) -> cases, for the summary line."""


def run_cli(argv: list[str]) -> Outcome:
    from profile_overlap.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 2
    key = (argv[0] + (" --skip-bad" if "--skip-bad" in argv else ""), code)
    EXITS[key] = EXITS.get(key, 0) + 1
    return Outcome(argv, code, out.getvalue(), err.getvalue())


def check_outcome(o: Outcome, case: Case, *, warnings: bool) -> None:
    where = f"{' '.join(o.argv[:1])} on {case.what}"
    text = o.out + o.err
    assert "Traceback" not in text, f"{where}: a traceback\n{text[-3000:]}"
    assert o.code in (0, 2), f"{where}: exit {o.code}\n{text[-3000:]}"
    if o.code == 2:
        lines = o.err.strip().splitlines()
        assert lines, f"{where}: exit 2 and nothing said"
        errors = [line for line in lines if not (warnings and line.startswith("warning: "))]
        assert len(errors) == 1, f"{where}: exit 2 with {len(errors)} lines that are not warnings:\n{o.err[-3000:]}"


def plugin_routes(logdir: Path, case: Case) -> int:
    """Every route of the Overlap tab over the logdir; returns how many were asked. A 500 (an
    exception in the plugin) fails the case."""
    from tensorboard.plugins import base_plugin
    from werkzeug.test import Client

    from profile_overlap.tb_plugin.plugin import OverlapPlugin

    apps = OverlapPlugin(base_plugin.TBContext(logdir=str(logdir))).get_plugin_apps()
    asked = 0

    def get(route: str, query: str = "") -> object:
        nonlocal asked
        asked += 1
        try:
            reply = Client(apps[route]).get(route + query)
        except Exception as err:  # the plugin raised: TensorBoard would answer 500 with a traceback in its log
            raise AssertionError(f"{route}{query} on {case.what}: {type(err).__name__}: {err}") from err
        assert reply.status_code in (200, 400, 403, 404), f"{route}{query} on {case.what}: {reply.status_code} {reply.data[:500]!r}"
        return json.loads(reply.data) if reply.status_code == 200 and reply.mimetype == "application/json" else None

    runs = get("/runs")
    assert isinstance(runs, dict)
    for run in runs["runs"]:
        name = run["run"]
        get("/metrics", f"?run={name}")
        get("/perfetto", f"?run={name}")
        for mode in run.get("modes", []) or [None]:
            query = f"?run={name}" + (f"&mode={mode}" if mode else "")
            get("/timeline", query)
            get("/heatmap", query)
    return asked


@dataclass
class Measured:
    peak_mb: float
    what: list[str]
    folder_bytes: dict[str, bytes]
    size: int = 0

    def __post_init__(self) -> None:
        self.size = sum(len(d) for d in self.folder_bytes.values())


class Drawings:
    """The report's figures (the timeline as PNG and SVG, the heatmap as PNG), drawn once per distinct
    input: a figure is a function of what it is drawn from (the record's numbers and names, the case's
    folder name aside), and most cases differ from another only where no figure looks (a wrong type in
    an argument, a damaged second file, a gzip cut). Drawing was most of `report`'s time, itself a
    third of the test's; a case whose figure input is new (a hostile name in a legend, huge or odd
    times) is still drawn in full.

    Installed over the render modules' figure and bytes functions: the figure records its input's
    key, and the bytes function returns what the same key gave before, if any."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import msgspec

        from profile_overlap.record.analysis import builtin
        from profile_overlap.render import heatmap, timeline

        self.root = b""
        self.made: dict[tuple[str, bytes], object] = {}
        self.asked = 0

        def keyed(figure, name: str):
            def wrapped(*args, **kwargs):
                fig = figure(*args, **kwargs)
                key = msgspec.msgpack.encode((name, args, sorted(kwargs.items())), enc_hook=builtin)  # NaN stays NaN
                fig.fuzz_key = key.replace(self.root, b"#" * len(self.root)) if self.root else key
                return fig

            return wrapped

        def memo(draw, name: str):
            def wrapped(fig):
                self.asked += 1
                key = (name, getattr(fig, "fuzz_key", b""))
                if not key[1]:  # a figure made elsewhere: drawn
                    return draw(fig)
                if key not in self.made:
                    self.made[key] = draw(fig)
                return self.made[key]

            return wrapped

        monkeypatch.setattr(timeline, "figure", keyed(timeline.figure, "timeline"))
        monkeypatch.setattr(heatmap, "figure", keyed(heatmap.figure, "heatmap"))
        monkeypatch.setattr(timeline, "png_bytes", memo(timeline.png_bytes, "timeline png"))
        monkeypatch.setattr(timeline, "to_svg", memo(timeline.to_svg, "timeline svg"))
        monkeypatch.setattr(heatmap, "png_bytes", memo(heatmap.png_bytes, "heatmap png"))


DRAWINGS: Drawings | None = None


def run_case(case: Case, root: Path) -> float:
    """All four commands on the case's folder; returns the peak of Python allocations (MiB)."""
    if DRAWINGS is not None:
        DRAWINGS.root = str(root).encode()
    logdir = root / "logdir"
    traces = logdir / "job"
    traces.mkdir(parents=True)
    for name, data in case.files.items():
        (traces / name).write_bytes(data)
    tracemalloc.start()
    try:
        check_outcome(run_cli(["analyze", str(traces)]), case, warnings=False)
        check_outcome(
            run_cli(["analyze", str(traces), "--skip-bad", "--json", str(root / "o.json"), "--tensorboard", str(logdir / "analyzed")]),
            case,
            warnings=True,
        )
        check_outcome(run_cli(["perfetto", str(traces), "--out", str(root / "p.perfetto.json.gz")]), case, warnings=True)
        peak = tracemalloc.get_traced_memory()[1] / MB
    finally:
        tracemalloc.stop()
    # Outside tracemalloc, which makes matplotlib's drawing 5x slower: its memory is measured in the real processes.
    check_outcome(run_cli(["report", str(traces), "--out", str(root / "report")]), case, warnings=True)
    plugin_routes(logdir, case)
    return peak


# ---------------------------------------------------------------- the test


_CHILD = """
import contextlib, io, json, resource, sys
from profile_overlap.cli.main import main
codes = []
for argv in json.loads(sys.argv[1]):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        codes.append(main(argv))
# VmHWM: this process's own high-water mark (ru_maxrss would carry over the parent's across exec);
# ru_maxrss of the children: the analysis's worker processes.
hwm_kb = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
peak_kb = max(hwm_kb, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
print(json.dumps({"codes": codes, "peak_rss_mb": peak_kb / 1024}))
"""


def rss_of(folder_bytes: dict[str, bytes], root: Path) -> dict:
    """The commands in a fresh process with the default workers: its peak RSS (workers included)."""
    traces = root / "job"
    traces.mkdir(parents=True)
    for name, data in folder_bytes.items():
        (traces / name).write_bytes(data)
    argv = [
        ["analyze", str(traces), "--skip-bad"],
        ["perfetto", str(traces), "--out", str(root / "p.perfetto.json.gz")],
        ["report", str(traces), "--out", str(root / "report")],
    ]
    p = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(argv)], capture_output=True, text=True, env=clean_env(), cwd=REPO)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


KEPT = 2
"""The cases run again as real processes, per shard: the KEPT highest by peak and the KEPT largest."""
SHARDS = 2
"""The cases run as SHARDS tests of CASES / SHARDS cases each, each drawn from a seed of its own, in
files of their own (this one and test_fuzz_traces_2.py), so that pytest-xdist (`--dist loadfile`)
runs them on two workers."""
SEED = 34


class Measurements(list):
    """The measured cases, of which only those that may run again keep their files (all 500 cases'
    files held about 3 GB)."""

    def append(self, m: Measured) -> None:
        super().append(m)
        keep = {id(x) for x in [*sorted(self, key=_peak, reverse=True)[:KEPT], *sorted(self, key=_size, reverse=True)[:KEPT]]}
        for x in self:
            if id(x) not in keep:
                x.folder_bytes.clear()


def _peak(m: Measured) -> float:
    return m.peak_mb


def _size(m: Measured) -> int:
    return m.size


def test_hostile_traces_never_crash_and_stay_within_memory(monkeypatch):
    fuzz_shard(0, monkeypatch)


def fuzz_shard(shard: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """One shard's cases through every command, then its worst cases as real processes."""
    from profile_overlap.analysis import folder

    cases_here = CASES // SHARDS + (shard < CASES % SHARDS)
    EXITS.clear()
    # One process: tracemalloc sees every allocation (the real processes below use the workers).
    monkeypatch.setattr(folder, "PARALLEL_MIN_BYTES", 1 << 62)
    monkeypatch.setenv("COLUMNS", "160")
    global DRAWINGS
    DRAWINGS = Drawings(monkeypatch)
    measured = Measurements()

    @seed(SEED + shard)
    @settings(
        max_examples=cases_here,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
    )
    @given(cases())
    def one(case: Case) -> None:
        root = Path(tempfile.mkdtemp(prefix="fuzz_"))
        try:
            peak = run_case(case, root)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        assert peak < PEAK_LIMIT_MB, f"{case.what}: {peak:.0f} MiB of Python allocations"
        measured.append(Measured(peak, case.what, case.files))

    one()
    assert len(measured) >= cases_here
    # Real processes: the cases with the highest peaks of Python allocations, and those with the largest files.
    by_peak = sorted(measured, key=_peak, reverse=True)
    by_size = sorted(measured, key=_size, reverse=True)
    sample = list({id(m): m for m in [*by_peak[:KEPT], *by_size[:KEPT]]}.values())
    rss = []
    for m in sample:
        root = Path(tempfile.mkdtemp(prefix="fuzz_rss_"))
        got = rss_of(m.folder_bytes, root)
        assert set(got["codes"]) <= {0, 2} and got["peak_rss_mb"] < PEAK_LIMIT_MB, (m.what, got, f"kept in {root}")
        shutil.rmtree(root, ignore_errors=True)
        rss.append((got["peak_rss_mb"], m.peak_mb, m.what))
    worst = by_peak[0]
    print(f"\nfuzz shard {shard + 1} of {SHARDS}: {len(measured)} cases, 0 tracebacks;", end=" ")
    print(f"worst tracemalloc peak {worst.peak_mb:.0f} MiB ({worst.what})")
    print(f"  figures: {len(DRAWINGS.made)} drawn for {DRAWINGS.asked} asked (the others' input was drawn before)")
    print("  exits: " + ", ".join(f"{cmd} {code}: {n}" for (cmd, code), n in sorted(EXITS.items())))
    for peak_rss, peak_py, what in sorted(rss, key=lambda x: x[0], reverse=True):
        print(f"  real process: peak RSS {peak_rss:.0f} MiB (tracemalloc {peak_py:.0f} MiB): {what}")
