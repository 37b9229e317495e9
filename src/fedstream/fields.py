"""Config fields and flat keys: the bottom of the config layer.

:class:`Field` is how a task package declares its config keys (``ovfl/config.py``,
``vfl/config.py``, ``chfl/config.py``); :func:`nest`, :func:`flatten` and :func:`number_list`
work on resolved configs. This module imports nothing of fedstream, so that a task package (and
the run folder) can use it without loading :mod:`fedstream.config`, which gathers the tasks' keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


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
        kind = {float: "a number", int: "an integer"}.get(self.type, "a " + self.type.__name__)
        return kind + (" " + " and ".join(bounds) if bounds else "")


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
