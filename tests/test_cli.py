"""The CLI without a process group: help, --version, unknown commands, explain, and flag errors as one line."""

from __future__ import annotations

import platform
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

import profile_overlap
from profile_overlap.cli.main import COMMANDS, main
from profile_overlap.run.config import MODES

from conftest import REPO, clean_env, cli

pytestmark = pytest.mark.slow  # every test runs `python -m profile_overlap` in a subprocess


def test_explain_prints_the_worked_example():
    proc = cli(["explain"])
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for row in ("[1, 2, 3, 4]", "[5, 6, 7, 8]", "[9, 10, 11, 12]", "[13, 14, 15, 16]"):
        assert row in out
    assert out.count("[28, 32, 36, 40]") >= 8  # all_reduce and all_gather columns, 4 ranks
    for shard in ("[28]", "[32]", "[36]", "[40]"):
        assert shard in out
    assert ": equal" in out
    assert "2(4-1)/4 = 1.5" in out


def test_explain_other_world_size():
    proc = cli(["explain", "--world-size", "2"])
    assert proc.returncode == 0
    assert "[4, 6]" in proc.stdout and "[1, 2]" in proc.stdout and "[3, 4]" in proc.stdout


def test_help_groups_every_flag():
    proc = cli(["run", "--help"])
    assert proc.returncode == 0
    for flag in (
        "--mode",
        "--layers",
        "--dim",
        "--batch",
        "--dtype",
        "--steps",
        "--warmup-steps",
        "--backend",
        "--out",
        "--name",
        "--seed",
        "--no-profile",
        "--gzip",
        "--nproc-per-node",
        "--timeout",
    ):
        assert flag in proc.stdout
    for group in ("pipeline and workload", "steps and profiling", "distributed", "output"):
        assert group in proc.stdout
    top = cli(["--help"])
    assert "analyze" in top.stdout and "explain" in top.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["--mode", "allreduce"], "invalid choice: 'allreduce'"),
        (["--dtype", "int8"], "invalid choice: 'int8'"),
        (["--layers", "0"], "--layers must be a positive integer, got 0"),
        (["--dim", "-4"], "--dim must be a positive integer, got -4"),
        (["--batch", "0"], "--batch must be a positive integer"),
        (["--steps", "0"], "--steps must be a positive integer"),
        (["--name", "a/b"], "--name 'a/b' must be a plain folder name"),
    ],
)
def test_bad_flags_get_one_line(args, message):
    proc = cli(args)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _top_level_rows(help_text: str) -> dict[str, str]:
    """The `commands:` block of the top-level help: command -> its text, continuation lines joined."""
    block = help_text.split("commands:\n", 1)[1].split("\n\n", 1)[0]
    rows: dict[str, str] = {}
    for line in block.splitlines():
        if line[2] != " ":
            name, text = line.split(maxsplit=1)
            rows[name] = text
        else:
            rows[name] += " " + line.strip()
    return {name: _one_line(text) for name, text in rows.items()}


def test_version_prints_the_package_torch_and_python_on_one_line_without_importing_torch(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now fails: --version must not need it
    assert main(["--version"]) == 0
    out = capsys.readouterr().out
    assert len(out.splitlines()) == 1
    pyproject = re.search(r'^version = "(.+)"$', (REPO / "pyproject.toml").read_text(), re.M).group(1)
    assert profile_overlap.__version__ == pyproject  # one source: pyproject's version, through the installed metadata
    assert out.startswith(f"profile_overlap {pyproject}, ")
    assert f"torch {metadata.version('torch')}" in out
    assert f"Python {platform.python_version()} ({sys.executable})" in out


@pytest.mark.slow
def test_the_installed_profile_overlap_script_answers_version():
    script = Path(sys.executable).parent / "profile-overlap"
    proc = subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=60, env=clean_env(), cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"profile_overlap {profile_overlap.__version__}, torch ")
    assert len(proc.stdout.splitlines()) == 1


@pytest.mark.parametrize(
    "word, suggestion",
    [
        ("analyse", "did you mean 'analyze'?"),
        ("whatf", "did you mean 'whatif'?"),
        ("bench", "did you mean 'bench-collectives'?"),  # a prefix, too short for difflib alone
        ("Report", "did you mean 'report'?"),
        ("r", "did you mean 'run' or 'report'?"),
    ],
)
def test_a_misspelt_command_gets_one_line_naming_the_closest_command(capsys, word, suggestion):
    assert main([word, "runs/x", "--json", "out.json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"profile_overlap: error: unknown command '{word}': {suggestion}")
    assert len(captured.err.splitlines()) == 1


def test_a_word_close_to_no_command_gets_the_list_of_commands(capsys):
    assert main(["frobnicate"]) == 2
    err = capsys.readouterr().err
    assert "unknown command 'frobnicate': the commands are " + ", ".join(COMMANDS) in err
    assert len(err.splitlines()) == 1


def test_an_existing_folder_as_first_word_is_told_to_put_a_command_before_it(capsys, tmp_path):
    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "`run` takes no file or folder" in err
    assert f"profile_overlap analyze {tmp_path}" in err and f"profile_overlap report {tmp_path}" in err
    assert len(err.splitlines()) == 1


def test_a_flag_first_still_means_run_even_when_a_command_name_follows(capsys, monkeypatch):
    monkeypatch.delenv("TORCHELASTIC_ERROR_FILE", raising=False)
    # `--name analyze` names a run folder; the bad --layers shows which parser read it.
    assert main(["--name", "analyze", "--layers", "0"]) == 2
    assert capsys.readouterr().err.startswith("profile_overlap run: error: ")


def test_top_level_help_lists_every_command_with_the_description_of_its_own_help(capsys):
    assert main(["--help"]) == 0
    rows = _top_level_rows(capsys.readouterr().out)
    assert list(rows) == list(COMMANDS)
    for command, row in rows.items():
        with pytest.raises(SystemExit) as exit_info:
            main([command, "--help"])
        assert exit_info.value.code == 0
        own_help = capsys.readouterr().out
        description = _one_line(own_help.split("\n\n")[1])  # argparse: usage, blank line, description
        assert description == row, command


def test_top_level_help_names_every_mode_run_can_train_and_the_default_rule(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    run_row = _top_level_rows(out)["run"]
    for mode in (*MODES, "compare"):
        assert mode in run_row
    assert "--version" in out
    assert "`run` is assumed" in _one_line(out)
