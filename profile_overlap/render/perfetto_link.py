"""The report's pointer to the run's merged Perfetto trace (`profile_overlap perfetto`), when it has one.

A link cannot open it: Perfetto reads local files only when they are dropped onto it or served, so
the report names the file and the two ways to open it."""

from __future__ import annotations

from pathlib import Path

from profile_overlap.core.files import PERFETTO_TRACE
from profile_overlap.render.document import Paragraph


def perfetto_blocks(run_dir: Path) -> tuple:
    """One paragraph when `run_dir` holds the merged trace; nothing otherwise."""
    if not (Path(run_dir) / PERFETTO_TRACE).is_file():
        return ()
    return (
        Paragraph(
            (
                f"Open in Perfetto: {PERFETTO_TRACE}, beside this report, holds every event of every rank on one clock, with the "
                "steps, phases, collective calls and the hidden and exposed communication drawn as tracks. Open it with "
                f"python -m profile_overlap perfetto {run_dir} --open (a local Perfetto UI, offline), or drop it onto "
                "https://ui.perfetto.dev (the file stays in the browser).",
            )
        ),
    )
