"""The fuzz's second shard (tests/test_fuzz_traces.py, SHARDS): half of its cases, from a seed of
their own, in a file of its own so that pytest-xdist runs it beside the first."""

from __future__ import annotations

import pytest
from test_fuzz_traces import fuzz_shard

pytestmark = pytest.mark.slow  # hundreds of cases, each through four commands; and real processes at the end


def test_hostile_traces_never_crash_and_stay_within_memory_second_shard(monkeypatch):
    fuzz_shard(1, monkeypatch)
