"""Field rules and flat config keys: the bottom of the config layer.

One set of rules says what a value may be, wherever it comes from:

* :func:`fits` / :func:`checker` / :func:`type_name`: the type rules — an int is never a bool, a
  float is an int or a float and finite (no NaN, no infinity), a str, a bool, ``list[...]`` of one
  of them, ``X | None``. A network record's fields are read through them
  (:class:`fedstream.deploy.records.Record`).
* :class:`Field`: one config key — its type (by the rules above), default, range or choices.
  :meth:`Field.check` applies it; the config loader (``config/loader.py``) and the River estimator's
  keywords (``ovfl/river.py``) both use it, each wording the error for its user.

A task package declares its config keys as :class:`Field` objects (``ovfl/config.py``,
``vfl/config.py``, ``chfl/config.py``); :func:`nest`, :func:`flatten` and :func:`number_list` work on
resolved configs. This module imports nothing of fedstream, so that a task package (and the run
folder, and the deployment's records) can use it without loading :mod:`fedstream.config`, which
gathers the tasks' keys.
"""

from __future__ import annotations

import math
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

TYPE_NAMES = {int: "an integer", bool: "true or false", str: "a string", float: "a finite number"}
_PLURALS = {int: "integers", bool: "booleans", str: "strings", float: "finite numbers"}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    """A finite number: an int (never a bool) or a float that is neither NaN nor infinite."""
    return _is_int(value) or (isinstance(value, float) and math.isfinite(value))


_SCALAR: dict[type, Callable[[Any], bool]] = {
    int: _is_int,
    float: _is_number,
    bool: lambda v: isinstance(v, bool),
    str: lambda v: isinstance(v, str),
}


def fits(value: Any, kind: Any) -> bool:
    """Whether ``value`` (from a config file, keyword, JSON or a received record) is of type ``kind``:
    int, bool, str, float (an int is a float too; NaN and infinities are not), ``list[...]`` of one
    of them, or ``X | None``. The plain statement of the rules; :func:`checker` is the same, prepared."""
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        return any(fits(value, k) for k in typing.get_args(kind))
    if kind is type(None):
        return value is None
    if origin is list:
        (item,) = typing.get_args(kind)
        return isinstance(value, list) and all(fits(v, item) for v in value)
    if kind in _SCALAR:
        return _SCALAR[kind](value)
    return isinstance(value, kind)


def checker(kind: Any) -> Callable[[Any], bool]:
    """A function telling whether a value that is not None fits ``kind``: :func:`fits` with the
    type's structure worked out once (a network record is read for every request and reply)."""
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        subs = [checker(k) for k in typing.get_args(kind) if k is not type(None)]  # None never reaches it
        return subs[0] if len(subs) == 1 else (lambda v: any(ok(v) for ok in subs))
    if origin is list:
        (item,) = typing.get_args(kind)
        if item is int:  # inlined: a batch VFL request's rows are checked every step
            return lambda v: isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool)
                                                         for x in v)
        ok = checker(item)
        return lambda v: isinstance(v, list) and all(ok(x) for x in v)
    if kind in _SCALAR:
        return _SCALAR[kind]
    return lambda v: isinstance(v, kind)


def type_name(kind: Any) -> str:
    """``kind`` in words, for errors: "an integer", "a list of numbers", "a string or an integer"."""
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(type_name(k) for k in typing.get_args(kind) if k is not type(None))
    if origin is list:
        return f"a list of {_PLURALS[typing.get_args(kind)[0]]}"
    return TYPE_NAMES.get(kind, getattr(kind, "__name__", str(kind)))


class FieldValueError(ValueError):
    """A value a :class:`Field` refuses. ``reason``: ``"missing"`` (None where a value is needed),
    ``"type"`` (not of the field's type) or ``"range"`` (outside its range or choices, or not
    finite); ``value``: the value refused (as the field's type, when it had it); ``expected``: the
    field's rule in words. Callers word the message for their user."""

    def __init__(self, reason: str, value: Any, expected: str):
        super().__init__(f"{value!r}: expected {expected}")
        self.reason, self.value, self.expected = reason, value, expected


@dataclass(frozen=True)
class Field:
    """One config key: a type, a default and the values it may take."""

    type: type  # int, float, str or bool
    default: Any
    doc: str
    choices: tuple | None = None
    min: float | None = None
    max: float | None = None
    optional: bool = False  # None is allowed
    exclusive_min: bool = False  # the value must be > min, not >= min
    exclusive_max: bool = False
    tasks: tuple[str, ...] | None = None  # the tasks that read this key (None: every task)
    task_defaults: tuple[tuple[str, Any], ...] = ()  # (task, default) where a task's default differs

    def default_for(self, task: str) -> Any:
        return dict(self.task_defaults).get(task, self.default)

    def allows_none(self, task: str) -> bool:
        return self.optional or self.default_for(task) is None

    def describe(self) -> str:
        if self.choices:
            return "one of " + ", ".join(map(str, self.choices))
        bounds = []
        if self.min is not None:
            bounds.append(f"{'>' if self.exclusive_min else '>='} {self.min}")
        if self.max is not None:
            bounds.append(f"{'<' if self.exclusive_max else '<='} {self.max}")
        if self.type is float and not bounds:
            return "a finite number"
        kind = {float: "a number", int: "an integer"}.get(self.type, "a " + self.type.__name__)
        return kind + (" " + " and ".join(bounds) if bounds else "")

    def check(self, value: Any, task: str | None = None) -> Any:
        """``value`` as the field's type (an int given for a float becomes a float); raises
        :class:`FieldValueError` when it is None and the field needs a value (for ``task``), is not
        of the field's type, or is outside its choices or range (a float must be finite)."""
        if value is None:
            if self.allows_none(task):
                return None
            raise FieldValueError("missing", value, self.describe())
        # a float field takes any int or float here; NaN and infinities are refused as out of range
        if not (_SCALAR[self.type](value) or (self.type is float and isinstance(value, float))):
            raise FieldValueError("type", value, self.describe())
        try:
            value = self.type(value)
        except OverflowError:  # an int too large for a float
            raise FieldValueError("range", value, self.describe()) from None
        if (
            (self.choices is not None and value not in self.choices)
            or (self.type is float and not math.isfinite(value))
            or (self.min is not None and (value <= self.min if self.exclusive_min else value < self.min))
            or (self.max is not None and (value >= self.max if self.exclusive_max else value > self.max))
        ):
            raise FieldValueError("range", value, self.describe())
        return value

    def accepts(self, value: Any, task: str | None = None) -> bool:
        """Whether :meth:`check` takes ``value``."""
        try:
            self.check(value, task)
        except FieldValueError:
            return False
        return True


def flatten(data: dict, prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1}."""
    flat: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat |= flatten(value, name + ".")
        else:
            flat[name] = value
    return flat


def nest(flat: dict[str, Any]) -> dict:
    """{"a.b": 1} -> {"a": {"b": 1}}."""
    out: dict = {}
    for key, value in flat.items():
        node = out
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return out


def number_list(text: str, kind: type = float) -> tuple:
    """``"0.003,0.001"`` -> ``(0.003, 0.001)`` (values already checked by the config's checks)."""
    return tuple(kind(v) for v in text.split(","))


@dataclass(frozen=True)
class Shared:
    """In a task's ``FIELDS``: a key declared once in :mod:`fedstream.config.schema` for several
    tasks, read by this one (``default``: this task's default where it differs)."""

    INHERIT = object()
    default: Any = INHERIT
