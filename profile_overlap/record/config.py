"""The run's config in the record (metrics.json's "config"), typed.

A run writes every flag of run/config.Config (Config.to_dict(): its sections flattened, in
Config.FLAG_ORDER; run/config.from_record builds the Config again from this, for advise); a job's record
holds the job's few facts as they stood before RunMetrics.job (kept for other tools); a bare folder's
holds where its traces came from. Older runs wrote fewer flags, in an older order. So every field has
a default (what a run that did not write it used), and `keys` remembers which keys the JSON had, in
its order: the record is written back with exactly those (metrics.json stays byte for byte the same)
and the report's config table lists those. tests/test_record_config.py checks that the run fields
here are Config's, in Config's order."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

RUN_FIELDS_END = "nproc_per_node"
"""The last of run/config.Config's flags here; the job's and folder's own fields follow it."""


class RunConfig(msgspec.Struct, frozen=True, kw_only=True):
    # run/config.Config's flags, in Config.FLAG_ORDER (docs/commands.md defines them)
    mode: str = ""
    compare_modes: str | None = None
    model: str = "mlp"
    layers: int | None = None
    dim: int | None = None
    batch: int | None = None
    heads: int = 4
    seq_len: int = 64
    dtype: str = "float32"
    steps: int = 10
    repeats: int = 1
    warmup_steps: int = 2
    profile_steps: int = 2
    seed: int = 0
    profile: bool = True
    gzip: bool = True
    lr: float = 1e-3
    bucket_cap_mb: float = 25.0
    first_bucket_mb: float | None = None
    reshard_after_forward: str = "true"
    fsdp_prefetch: int = 0
    split_prefetch: int = 0
    fsdp_group: int = 1
    backend: str = "auto"
    out: str = "runs"
    name: str | None = None
    timeout_s: float = 300.0
    nproc_per_node: int | None = None
    # a job's record (api/job.py): its facts as records before RunMetrics.job had them
    job: str | None = None
    log_dir: str | None = None
    trace_files: int | None = None
    profiled_steps: int | None = None
    profiled_ranks: tuple[int, ...] = ()
    missing_ranks: tuple[int, ...] = ()
    dropped_traces: int | None = None
    cycles: str | None = None
    # a bare folder's record (tb_plugin/export.py)
    source: str | None = None
    hta_compat: bool | None = None
    keys: tuple[str, ...] | None = None
    """The keys metrics.json holds, in its order (not itself a key there); None: every field."""

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> RunConfig:
        """The config of a JSON object or Config.to_dict(), remembering its keys; unknown keys are refused."""
        unknown = [k for k in values if k not in cls.__struct_fields__ or k == "keys"]
        if unknown:
            raise ValueError(f"the record's config has no field {unknown[0]!r}: add it to record/config.RunConfig")
        return msgspec.convert({**values, "keys": list(values)}, cls)

    def with_keys(self, raw: object) -> RunConfig:
        """This config remembering the keys of `raw`, the JSON object msgspec decoded it from (None: as it is)."""
        return msgspec.structs.replace(self, keys=tuple(raw)) if isinstance(raw, dict) else self

    def present(self) -> tuple[str, ...]:
        """The keys this config has in metrics.json, in order (a key this version does not know is not kept)."""
        fields = tuple(f for f in self.__struct_fields__ if f != "keys")
        return fields if self.keys is None else tuple(k for k in self.keys if k in fields)

    def items(self) -> list[tuple[str, Any]]:
        """(key, value) of every key metrics.json holds, in its order (the config table, hparams)."""
        return [(k, getattr(self, k)) for k in self.present()]

    def to_json(self) -> dict[str, Any]:
        """The JSON object metrics.json holds."""
        plain: dict[str, Any] = msgspec.to_builtins(msgspec.structs.replace(self, keys=None))
        return {k: plain[k] for k in self.present()}
