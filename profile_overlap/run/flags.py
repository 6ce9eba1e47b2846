"""Command-line flags generated from a config dataclass: each flag is declared once, as a field.

A field gives the flag its name (`--warmup-steps` from `warmup_steps`, or `metadata["option"]`),
its type (int, float, str; a `Literal` gives the choices; bool gives `--x/--no-x`), its default
and its help text: the one-line docstring under the field, as torchtitan's JobConfig fields are
documented. A field whose type is itself a dataclass is a section (a run's `workload`, `schedule`,
`engines` and `job`): its fields are flags too, and the flat namespace of flags is what the command
line, config.json and the rerun command in env.json all spell out. `build` is the one place a
config is made from flat flags (argparse's namespace, a record's config, a test's keywords); a class
may give the flat order with a `FLAG_ORDER` tuple (else: field order, sections flattened).

Metadata keys (use `flag(...)`): option, metavar, group (the --help group title), local (the
value may differ between ranks: left out of the digest compared at start-up).

Nothing here imports torch, so `--help` stays instant.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import hashlib
import inspect
import json
import textwrap
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T", bound="DataclassInstance")

PROPER_NAMES = frozenset({"Adam", "Kineto", "TensorBoard"})
"""Words that start a help text and keep their capital."""


def flag(
    default: Any = None,
    *,
    option: str | None = None,
    metavar: str | None = None,
    group: str | None = None,
    local: bool = False,
    **kwargs: Any,
) -> Any:
    """A dataclass field that is a flag: `default`, plus how the flag is shown (see the module docstring)."""
    metadata = {"option": option, "metavar": metavar, "group": group, "local": local}
    return dataclasses.field(default=default, metadata=metadata, **kwargs)


@dataclass(frozen=True)
class Flag:
    """One flag, as generated from one field."""

    name: str
    """The field's name: argparse's dest and the key in config.json."""
    option: str
    """The flag, e.g. --timeout."""
    kind: type
    """int, float, str or bool."""
    choices: tuple[Any, ...] | None
    """The values of a Literal type."""
    default: Any
    """The field's default."""
    doc: str
    """The docstring under the field."""
    metavar: str | None
    """argparse's metavar."""
    group: str | None
    """Title of the --help group; None: the parser's own options."""
    local: bool
    """Left out of the digest: ranks may differ (say, in their output folder)."""

    @property
    def help(self) -> str:
        text = self.doc.rstrip(".").replace("%", "%%")
        first = text.split(" ", 1)[0].rstrip(":,;.")
        # A sentence: argparse's help reads lower case; names (Adam, AllReduce, K:) keep their case.
        if text[:1].isupper() and text[1:2].islower() and first not in PROPER_NAMES:
            text = text[0].lower() + text[1:]
        if isinstance(self.default, bool):
            return f"{text} (default: {'on' if self.default else 'off'})"
        return text if self.default is None else f"{text} (default: %(default)s)"


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """The docstring under each field of `cls`, read from its source (Python keeps no attribute docstrings)."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):  # no source (a zipped install): flags without help
        return {}
    body = next(node for node in ast.parse(source).body if isinstance(node, ast.ClassDef)).body
    docs = {}
    for node, after in zip(body, body[1:]):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(after, ast.Expr):
            if isinstance(after.value, ast.Constant) and isinstance(after.value.value, str):
                docs[node.target.id] = " ".join(after.value.value.split())
    return docs


def _scalar_type(hint: Any) -> tuple[type, tuple[Any, ...] | None]:
    """(type, choices) of a field's type: `int | None` is int, `Literal["a", "b"]` is str with choices."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        (hint,) = [arg for arg in typing.get_args(hint) if arg is not type(None)]
    if typing.get_origin(hint) is Literal:
        choices = typing.get_args(hint)
        return type(choices[0]), choices
    return hint, None


def _section_types(cls: type) -> dict[str, type]:
    """Field name -> section class, for the fields of `cls` that are sections."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls) if dataclasses.is_dataclass(hints[f.name])}


@functools.cache
def flags(cls: type) -> tuple[Flag, ...]:
    """Every flag of config class `cls`, sections flattened, in its FLAG_ORDER (else field order)."""
    hints = typing.get_type_hints(cls)
    sections = _section_types(cls)
    out: list[Flag] = []
    for field in dataclasses.fields(cls):
        if field.name in sections:  # a section: its fields are flags too
            out += flags(sections[field.name])
            continue
        if field.name not in hints or not _is_flag(hints[field.name]):
            continue  # not a flag (a sweep's `run` and `vary`)
        kind, choices = _scalar_type(hints[field.name])
        meta = field.metadata
        out.append(
            Flag(
                name=field.name,
                option=meta.get("option") or "--" + field.name.replace("_", "-"),
                kind=kind,
                choices=choices,
                default=field.default,
                doc=field_docs(cls).get(field.name, ""),
                metavar=meta.get("metavar"),
                group=meta.get("group"),
                local=meta.get("local", False),
            )
        )
    order: tuple[str, ...] | None = getattr(cls, "FLAG_ORDER", None)
    if order is not None:
        assert sorted(order) == sorted(f.name for f in out), f"{cls.__name__}.FLAG_ORDER must name every flag once"
        by_name = {f.name: f for f in out}
        out = [by_name[name] for name in order]
    return tuple(out)


def _is_flag(hint: Any) -> bool:
    kind, _ = _scalar_type(hint)
    return kind in (int, float, str, bool)


def add_arguments(parser: argparse.ArgumentParser, cls: type) -> dict[str, argparse._ArgumentGroup]:
    """Add every flag of `cls` to `parser`, in --help groups made in order of first use. Returns the groups by title."""
    groups: dict[str, argparse._ArgumentGroup] = {}
    for f in flags(cls):
        if f.group is not None and f.group not in groups:
            groups[f.group] = parser.add_argument_group(f.group)
        target = parser if f.group is None else groups[f.group]
        kwargs: dict[str, Any] = {"dest": f.name, "default": f.default, "help": f.help}
        if f.kind is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        else:
            kwargs.update(type=f.kind, choices=f.choices, metavar=f.metavar)
        target.add_argument(f.option, **kwargs)
    return groups


def build(cls: type[T], values: Mapping[str, Any]) -> T:
    """The config of `cls` from flat flags (and any of its other fields by name): each section made
    of its own flags (a section given whole, as `job=JobConfig(...)`, takes the flat ones given over
    it), then `cls` itself, so every check runs in the order the fields are declared. A name that is
    no field or flag is a TypeError; a bad value is the ValueError of the check that names the flag."""
    assert dataclasses.is_dataclass(cls)
    sections = _section_types(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    known = names | {f.name for section in sections.values() for f in dataclasses.fields(section)}
    unknown = [name for name in values if name not in known]
    if unknown:
        raise TypeError(f"{cls.__name__} has no flag {unknown[0]!r}")
    kwargs: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        if field.name in sections:
            own = {f.name: values[f.name] for f in dataclasses.fields(sections[field.name]) if f.name in values}
            given = values.get(field.name)
            kwargs[field.name] = sections[field.name](**own) if given is None else dataclasses.replace(given, **own)
        elif field.name in values:
            kwargs[field.name] = values[field.name]
    return cls(**kwargs)


def replace(config: T, values: Mapping[str, Any]) -> T:
    """`config` with the flat flags in `values` changed (each in its section), checked as a new config."""
    assert dataclasses.is_dataclass(config) and not isinstance(config, type)
    kept = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
    return build(type(config), {**kept, **values})


def from_namespace(cls: type[T], args: argparse.Namespace) -> T:
    """The config of `cls` from parsed flags."""
    return build(cls, {f.name: getattr(args, f.name) for f in flags(cls) if hasattr(args, f.name)})


def flat_dict(config: DataclassInstance) -> dict[str, Any]:
    """Flag name -> value, sections flattened, in the flags' order: the keys of config.json."""
    values: dict[str, Any] = {}
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        values.update(flat_dict(value) if dataclasses.is_dataclass(value) and not isinstance(value, type) else {field.name: value})
    ordered = {f.name: values.pop(f.name) for f in flags(type(config))}
    return {**ordered, **values}


def to_argv(config: DataclassInstance, *, leave_out: tuple[str, ...] = ()) -> list[str]:
    """The flags that recreate `config`, every one spelled out (defaults included); None values and `leave_out` are left out."""
    values = flat_dict(config)
    argv: list[str] = []
    for f in flags(type(config)):
        value = values[f.name]
        if f.name in leave_out or value is None:
            continue
        if f.kind is bool:
            argv.append(f.option if value else "--no-" + f.option.removeprefix("--"))
        else:
            argv += [f.option, str(value)]
    return argv


def digest(config: DataclassInstance) -> str:
    """Hash of the flags every rank must agree on (compared across ranks at start-up)."""
    local = {f.name for f in flags(type(config)) if f.local}
    agreed = {k: v for k, v in flat_dict(config).items() if k not in local}
    return hashlib.sha256(json.dumps(agreed, sort_keys=True).encode()).hexdigest()[:16]


def check_choices(config: DataclassInstance) -> None:
    """ValueError naming the flag when a Literal-typed field holds a value outside its choices."""
    values = flat_dict(config)
    for f in flags(type(config)):
        if f.choices and values[f.name] not in f.choices:
            raise ValueError(f"{f.option} {values[f.name]!r} is not one of {', '.join(map(str, f.choices))}")
