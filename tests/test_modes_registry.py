"""The registry of modes (core/modes.py): adding a mode is one entry plus its pipeline, and the
command line, the summary, whatif and the Overlap tab take their mode facts from it."""

from __future__ import annotations

import shutil

import pytest

from profile_overlap.cli.main import build_parser
from profile_overlap.core import modes as registry
from profile_overlap.core.modes import MODES, PHASES
from profile_overlap.record.summary import HEADLINE_NAMES
from profile_overlap.run import engines, pipelines
from profile_overlap.run.config import Config
from profile_overlap.tools.whatif.model import BUILDERS

from conftest import REPO


@pytest.mark.parametrize("name", list(MODES))
def test_every_mode_has_a_pipeline_a_description_and_a_headline(name):
    spec = MODES[name]
    assert spec.name == name
    if spec.engine is None:
        assert name in pipelines.PIPELINES, f"{name}: no step function in run/pipelines.py PIPELINES"
    else:
        assert spec.engine in engines.ENGINES, f"{name}: run/engines.py cannot build {spec.engine}"
    assert spec.title.startswith(f"{name}: ") and "\n" not in spec.title
    assert spec.description.startswith(name) and spec.description.endswith(".")
    assert spec.step_headline in HEADLINE_NAMES
    assert all(phase in PHASES for phase, _ in spec.expected_bytes)
    assert set(spec.resharded_bytes) <= set(spec.expected_bytes)


def test_every_pipeline_engine_and_replay_mode_is_in_the_registry():
    assert set(pipelines.PIPELINES) <= set(MODES)
    assert set(BUILDERS) <= set(MODES)  # whatif leaves out a mode it has no replay for
    assert set(engines.ENGINES) == {spec.engine for spec in MODES.values() if spec.engine}


@pytest.mark.parametrize("name", list(MODES))
def test_a_modes_flags_are_run_flags_and_what_advise_changes_in_it_is_a_candidate_it_has(name):
    from profile_overlap.run import flags
    from profile_overlap.tools.advise.candidates import CANDIDATES

    spec = MODES[name]
    fields = {f.name: f.default for f in flags.flags(Config)}
    assert set(spec.flags) <= set(fields), f"{name}: flags that are no run flag"
    assert set(spec.exclusive_flags) <= set(spec.flags)
    # An exclusive flag at a non-default value is refused without its mode (what advise --verify resets).
    for flag in spec.exclusive_flags:
        value = 2 if isinstance(fields[flag], int) else 1.0
        with pytest.raises(ValueError):
            Config.of(mode=registry.SPEEDUP_BASELINE, **{flag: value})
    assert set(spec.advise) <= set(CANDIDATES) | {"bucket-view"}, f"{name}: advise names a change with no candidates"
    assert spec.unit_calls in (None, "all_reduce", "reduce_scatter")


def test_the_mode_flags_offer_the_registry_modes():
    parser = build_parser("run")
    (mode,) = [a for a in parser._actions if "--mode" in a.option_strings]
    assert tuple(mode.choices) == (*MODES, "compare")
    assert Config.of(mode="compare").workload.modes == registry.COMPARE_MODES
    with pytest.raises(ValueError, match=f"choose from {', '.join(MODES)}"):
        Config.of(mode="compare", compare_modes="sequential,zero3")


def test_the_overlap_tab_titles_each_mode_from_the_registry(tmp_path):
    from profile_overlap.tb_plugin.plugin import describe_run

    run_dir = shutil.copytree(REPO / "tests" / "golden" / "run", tmp_path / "golden", ignore=shutil.ignore_patterns("expected"))
    row = describe_run(tmp_path, run_dir)
    assert row.mode_titles == {"sequential": MODES["sequential"].title, "split": MODES["split"].title}
    assert registry.title(registry.TRACE_MODE).startswith("trace: ") and registry.title("zero3") == "zero3"


def test_every_headline_name_is_defined_in_the_metrics_section():
    """A new mode brings a new headline (`<mode>_step_ms`): the Metrics section must define it."""
    readme = (REPO / "docs" / "metrics.md").read_text()
    names = readme.split("\n## Headline names", 1)[1].split("\n## ", 1)[0]
    for name in HEADLINE_NAMES:
        assert f"`{name}`" in names, f"{name} is not in docs/metrics.md's Headline names"
