"""A record struct built from the analysis object that holds its numbers, in one place for every struct.

Each record field declares its decimals on its own type (`Annotated[float, Round(3)]`, or the
aliases below); `from_fields(Record, source, **given)` takes every field of `Record` from `given`,
else from the attribute of `source` of the same name, rounds it as declared and builds nested
record structs (a struct, or a tuple or dict of them) from their sources the same way, even a source
of the struct's own type (the analysis makes a phase's PhaseRecord with its numbers as measured).
The analysis keeps its numbers unrounded (a job's step times and the phases' sums are made from
them); the record's are rounded once, here. exact=True builds the same structs unrounded, for the
`analyze` console, which prints fewer decimals than the record keeps."""

from __future__ import annotations

import functools
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

import msgspec


@dataclass(frozen=True)
class Round:
    """A record field's decimals: from_fields rounds the number to them (None stays None)."""

    digits: int


Float3 = Annotated[float, Round(3)]
"""A number (µs, %) to 3 decimals."""
MaybeFloat3 = Annotated[float | None, Round(3)]
"""A number to 3 decimals; None where unknown."""
MaybeFloat4 = Annotated[float | None, Round(4)]
"""A number (GB/s) to 4 decimals; None where unknown."""

S = TypeVar("S", bound=msgspec.Struct)
_Convert = Callable[[Any], Any]


def from_fields(cls: type[S], source: object = None, /, *, exact: bool = False, **given: Any) -> S:
    """`cls` with each field from `given`, else from `source`'s attribute of that name, rounded as
    its type declares (exact: not rounded, for a console that prints fewer decimals: rounding twice
    would move some of its last digits); a field neither gives is an AttributeError (no field is left
    to its default unseen)."""
    built: S = _builder(cls, exact)(source, given)
    return built


def converter(cls: type[msgspec.Struct], name: str, *, exact: bool = False) -> _Convert:
    """How from_fields converts a value of `cls`'s field `name` (rounded as the field declares; the
    identity where it leaves it as it is): for a record built by the thousand from columns, where
    from_fields per struct costs more than the numbers (a replay step's calls)."""
    return _converters(cls, exact).get(name, _same)


def _same(x: Any) -> Any:
    return x


@functools.cache
def _converters(cls: type[msgspec.Struct], exact: bool) -> dict[str, _Convert]:
    hints = typing.get_type_hints(cls, include_extras=True)
    return {name: convert for name in cls.__struct_fields__ if (convert := _converter(hints[name], exact)) is not None}


@functools.cache
def _builder(cls: type[S], exact: bool) -> Callable[[object, dict[str, Any]], S]:
    """The function that builds `cls`: each field's conversion worked out once, from its type."""
    names = cls.__struct_fields__
    converted = tuple(_converters(cls, exact).items())

    def build(source: object, given: dict[str, Any]) -> S:
        values = given  # from_fields' own **given, a new dict each call
        for name in names:
            if name not in values:
                values[name] = getattr(source, name)
        for name, convert in converted:
            values[name] = convert(values[name])
        return cls(**values)

    return build


def _converter(hint: Any, exact: bool) -> _Convert | None:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Annotated:
        digits = next((m.digits for m in hint.__metadata__ if isinstance(m, Round)), None)
        if digits is None or exact:
            return _converter(args[0], exact)
        if type(None) in typing.get_args(args[0]):
            return lambda x: None if x is None else round(float(x), digits)
        return lambda x: round(float(x), digits)
    if isinstance(hint, type) and issubclass(hint, msgspec.Struct):
        # Built again even from its own type: the analysis makes some record structs (a phase) with
        # their numbers as measured, and the record rounds them here.
        struct = hint
        if exact:
            return lambda x: x if isinstance(x, struct) else from_fields(struct, x, exact=True)
        return lambda x: from_fields(struct, x)
    if origin in (typing.Union, types.UnionType):
        arms = [a for a in args if a is not type(None)]
        inner = _converter(arms[0], exact) if len(arms) == 1 else None
        return None if inner is None else lambda x: None if x is None else inner(x)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        item = _converter(args[0], exact)
        return None if item is None else lambda xs: tuple(item(x) for x in xs)
    if origin is dict and len(args) == 2:
        value = _converter(args[1], exact)
        return None if value is None else lambda d: {k: value(v) for k, v in d.items()}
    return None
