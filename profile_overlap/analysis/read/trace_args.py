"""Collective arguments kept from a trace (analysis/read/trace.py), shared and looked up by row."""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Iterator, Mapping
from typing import Any

import msgspec
import numpy as np


class CollectiveArgs(msgspec.Struct, frozen=True):
    """The arguments that describe a collective, from a kernel or a CPU op (None if absent).
    A msgspec Struct rather than a dataclass: one is built per collective event, and this is
    several times cheaper to construct."""

    collective_name: str | None = None
    in_nelems: int | None = None
    out_nelems: int | None = None
    dtype: str | None = None
    group_size: int | None = None
    pg_name: str | None = None
    pg_desc: str | None = None
    src_rank: int | None = None
    dst_rank: int | None = None
    """A point-to-point call's global source and destination rank (record_param_comms' `Src Rank`, `Dst Rank`)."""
    pg_ranks: str | list[int] | None = None
    input_dims: list[Any] | None = None
    input_type: list[Any] | None = None
    concrete_inputs: list[Any] | None = None
    """Scalar arguments as text (c10d::send / recv_: [..., peer, tag])."""


class RowArgs(Mapping[int, CollectiveArgs]):
    """Row -> CollectiveArgs, read-only, for the few rows that have them: two compact columns
    (rows ascending, index into `values`) rather than a dict, and identical arguments shared by
    one object. A 4 GB trace has millions of collective events but a handful of distinct ones."""

    def __init__(self, rows: array[int], codes: array[int], values: tuple[CollectiveArgs, ...], external_ids: np.ndarray) -> None:
        self._rows, self._codes, self._values = rows, codes, values
        self.external_ids = external_ids
        """int32 (int64 when an id needs it), per row with args (ascending): its External id, -1 if absent."""

    def rows(self) -> np.ndarray:
        """The rows that have args, ascending."""
        return np.frombuffer(self._rows, dtype=np.int32) if len(self._rows) else np.zeros(0, dtype=np.int32)

    def with_input_dims(self) -> np.ndarray:
        """Per row that has args (rows() order): whether its args have Input Dims."""
        if not len(self._rows):
            return np.zeros(0, dtype=bool)
        per_value = np.array([bool(v.input_dims) for v in self._values] or [False])
        return per_value[np.frombuffer(self._codes, dtype=np.int32)]

    def values_at(self, rows: np.ndarray) -> list[CollectiveArgs | None]:
        """`get(row)` of each of `rows` at once (a lookup per row cost a bisection in Python)."""
        have = self.rows()
        if not have.size or not rows.size:
            return [None] * int(rows.size)
        i = np.minimum(have.searchsorted(rows), have.size - 1)
        codes = np.frombuffer(self._codes, dtype=np.int32)[i]
        values = self._values
        return [values[c] if found else None for c, found in zip(codes.tolist(), (have[i] == rows).tolist())]

    def _find(self, row: int) -> int:
        i = bisect_left(self._rows, row)
        return i if i < len(self._rows) and self._rows[i] == row else -1

    def __getitem__(self, row: int) -> CollectiveArgs:
        i = self._find(row)
        if i < 0:
            raise KeyError(row)
        value: CollectiveArgs = self._values[self._codes[i]]
        return value

    def get(self, row: int | None, default: CollectiveArgs | None = None) -> CollectiveArgs | None:  # type: ignore[override]
        i = self._find(row) if row is not None else -1
        return self._values[self._codes[i]] if i >= 0 else default

    def __contains__(self, row: object) -> bool:
        return isinstance(row, int) and self._find(row) >= 0

    def __iter__(self) -> Iterator[int]:
        return iter(self._rows)

    def __len__(self) -> int:
        return len(self._rows)
