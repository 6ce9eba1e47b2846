"""What `analyze` may be asked to do differently, as one frozen value that travels from the command
line (cli/analyze.py) or the api (api/job.py) through folder.analyze_dir or cluster.analyze_dir_cluster
to each file (folder.read_file) and rank (per_rank.finish_rank)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AnalysisOptions:
    hta_compat: bool = False
    """Count as HTA does (analysis/file/hta_compat.py): `analyze --hta-compat`."""
    steps: tuple[int | None, int | None] | None = None
    """`--steps A:B`: the ProfilerSteps A <= step < B (an open end, None, keeps all that side); None: every step."""
    skip_bad: bool = False
    """A bad file is reported through `warn` and left out, instead of raising (`--skip-bad`)."""
    keep_spans: bool = False
    """Each rank keeps the intervals behind its totals (RankAnalysis.spans), for perfetto."""
    timeline: bool = True
    """Each rank draws its timeline spans (RankAnalysis.timeline), for timeline.json and the figures:
    `analyze` without --tensorboard draws none, and skips their 0.17 ms a file (4% of a small file's
    work)."""


DEFAULT = AnalysisOptions()
IN_STEPS = AnalysisOptions(steps=(None, None))
"""Measured inside the ProfilerStep ranges only: not the wait for the last step's collectives after
its range closes (run/profiler.py). What a run's own ranks, the api and whatif measure."""
