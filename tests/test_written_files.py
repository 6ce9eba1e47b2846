"""The files we write, as other users and a machine that loses power see them: the mode a plain
`open()` gives (0666 less the umask), and records fsynced before they replace the old file."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

from profile_overlap.cli.main import main
from profile_overlap.core import io

GLOO = Path(__file__).parent / "data" / "gloo_2rank"


@pytest.fixture
def umask():
    """Set the process's umask for one test (restored after it)."""
    old = os.umask(0o022)
    os.umask(old)
    yield os.umask
    os.umask(old)


def _traces(tmp_path: Path) -> Path:
    """A copy of the 2-rank traces: `report` writes the folder's record (metrics.json, ...) into it."""
    return Path(shutil.copytree(GLOO, tmp_path / "traces", ignore=shutil.ignore_patterns("*.py", "NOTICE")))


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("mask", [0o022, 0o002, 0o077])
def test_report_and_analyze_files_get_the_mode_the_umask_gives(tmp_path, umask, mask, capsys):
    traces = _traces(tmp_path)
    umask(mask)
    assert main(["report", str(traces), "--out", str(tmp_path / "report")]) == 0
    assert main(["analyze", str(traces), "--json", str(tmp_path / "overlap.json")]) == 0
    written = sorted(p for p in tmp_path.rglob("*") if p.is_file() and not p.name.endswith(".gz"))
    names = {p.name for p in written}
    assert {"metrics.json", "status.json", "report.html", "report.md", "report.json", "timeline.png", "overlap.json"} <= names
    # What `touch` or a plain open() would give: a colleague in the group reads metrics under 022 or 002.
    assert {p.name: oct(_mode(p)) for p in written} == {p.name: oct(0o666 & ~mask) for p in written}


def test_an_existing_file_is_replaced_with_the_umask_mode(tmp_path, umask):
    umask(0o022)
    path = tmp_path / "metrics.json"
    io.write_json_atomic(path, {"a": 1})
    io.write_json_atomic(path, {"a": 2})
    assert _mode(path) == 0o644 and path.read_text() == '{\n  "a": 2\n}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.json"]  # no temporary file left


def test_records_are_fsynced_before_the_rename_and_figures_are_not(tmp_path, monkeypatch, capsys):
    synced: list[str] = []
    renamed: list[tuple[str, bool]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    def replace(src, dst) -> None:
        renamed.append((Path(dst).name, str(src) in synced))
        real_replace(src, dst)

    traces = _traces(tmp_path)
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    assert main(["report", str(traces), "--out", str(tmp_path / "report")]) == 0
    assert main(["analyze", str(traces), "--json", str(tmp_path / "overlap.json")]) == 0
    by_name = dict(renamed)
    # The records: synced, and synced before they took the final name.
    assert all(by_name[n] for n in ("metrics.json", "status.json", "timeline.json", "report.json", "overlap.json"))
    # Drawn from a record, `report` writes them again: no disk flush for each.
    assert not any(by_name[n] for n in ("report.html", "report.md", "timeline.png", "heatmap.png", "overlap.ranks.csv"))
