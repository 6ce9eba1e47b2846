"""The README is the user's manual: it must say what the code does."""

from __future__ import annotations

import re

from conftest import REPO


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start : end if end != -1 else None].strip()


def test_metrics_section_is_the_shipped_definitions():
    """Reports link to the packaged copy; the README's section must be that text exactly."""
    readme = (REPO / "README.md").read_text()
    shipped = (REPO / "profile_overlap" / "render" / "static" / "metric_defs.md").read_text().strip()
    assert _section(readme, "## Metrics") == shipped


def test_quickstart_has_the_two_commands_ci_runs():
    block = re.search(r"## Quickstart.*?```bash\n(.*?)```", (REPO / "README.md").read_text(), re.S).group(1)
    commands = block.strip().splitlines()
    assert len(commands) == 2
    assert "torchrun --standalone --nproc-per-node 4 -m profile_overlap --mode compare" in commands[0]
    assert "pytest" in commands[1]


def test_every_command_is_documented():
    from profile_overlap.cli.main import COMMANDS

    commands = _section((REPO / "README.md").read_text(), "## Commands")
    for name in COMMANDS:
        if name != "run":
            assert f"profile_overlap {name}" in commands, name
