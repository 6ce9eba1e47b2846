"""Equality for frozen dataclasses whose fields hold numpy arrays (pickled copies compare equal)."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np


def same(a: object, b: object) -> bool:
    """Field equality where fields hold numpy arrays (NaN equals NaN)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        x, y = np.asarray(a), np.asarray(b)
        return x.shape == y.shape and bool(np.array_equal(x, y, equal_nan=x.dtype.kind == "f"))
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return bool(a == b)


class ArrayEq:
    """Dataclasses with array fields: equal when every field is."""

    __dataclass_fields__: ClassVar[dict[str, Any]]  # every subclass is a dataclass

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(same(getattr(self, f), getattr(other, f)) for f in self.__dataclass_fields__)

    def __hash__(self) -> int:
        raise TypeError(f"unhashable type: {type(self).__name__!r}")  # equal by value, arrays inside: no hash
