"""The ``selection.*`` keys of a batch VFL run (:class:`SelectionSpec`), checked when built.

Each field is ``selection.<field>``; a wrong value raises :class:`~fedstream.errors.ConfigError`
naming the key and what was expected. :mod:`fedstream.vfl.selection` turns a spec into the rows and
clients of each epoch (:class:`~fedstream.vfl.selection.Participation`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

import numpy as np

from fedstream.errors import ConfigError

METHODS = ("all", "vfps", "random", "fixed")
AGGREGATES = ("marginal", "mean", "sum")  # as selection.group_testing.AGGREGATES
PADDINGS = ("zero", "mean", "latest", "ema")
DYNAMICS = ("none", "discrete", "relaxed")


def parse_clients(text) -> tuple[int, ...] | None:
    """``"0,2"`` (or a sequence of ints) -> (0, 2); None stays None. ConfigError naming selection.clients."""
    if text is None:
        return None
    items = text.split(",") if isinstance(text, str) else list(text)
    try:
        clients = tuple(int(str(c).strip()) for c in items if str(c).strip() != "")
    except ValueError:
        clients = ()
    if not clients or any(c < 0 for c in clients) or len(set(clients)) != len(clients):
        raise ConfigError(
            f"selection.clients = {text!r}: expected distinct client indices >= 0, comma-separated "
            '(e.g. "0,2")'
        )
    return tuple(sorted(clients))


@dataclass(frozen=True)
class SelectionSpec:
    """The ``selection.*`` keys of a batch VFL run (each field is ``selection.<field>``)."""

    method: str = "all"
    l: int = 3
    clients: tuple[int, ...] | None = None
    k: int = 10
    groups: int = 10
    aggregate: str = "marginal"
    queries: int | None = None
    padding: str = "zero"
    ema_alpha: float = 0.1
    dynamic: str = "none"
    update_prob: float = 0.2
    keep: float = 0.5
    arrival: float = 0.05
    lifespan_min: int = 1
    lifespan_max: int = 50
    every: int = 0

    def __post_init__(self) -> None:
        for name, choices in (("method", METHODS), ("aggregate", AGGREGATES), ("padding", PADDINGS),
                              ("dynamic", DYNAMICS)):
            if getattr(self, name) not in choices:
                raise ConfigError(
                    f"selection.{name} = {getattr(self, name)!r}: expected one of {', '.join(choices)}"
                )
        object.__setattr__(self, "clients", parse_clients(self.clients))
        for name, lo in (
            ("l", 1),
            ("k", 1),
            ("groups", 1),
            ("lifespan_min", 1),
            ("lifespan_max", 1),
            ("every", 0),
        ):
            _integer(name, getattr(self, name), lo)
        _integer("queries", self.queries, 1, optional=True)
        for name, zero_ok in (
            ("ema_alpha", False),
            ("update_prob", True),
            ("keep", False),
            ("arrival", True),
        ):
            _probability(name, getattr(self, name), zero_ok)
        if self.lifespan_min > self.lifespan_max:
            raise ConfigError(
                f"selection.lifespan_min = {self.lifespan_min} exceeds selection.lifespan_max = "
                f"{self.lifespan_max}"
            )
        if self.method == "fixed" and self.clients is None:
            raise ConfigError("selection.method = 'fixed' needs selection.clients, e.g. \"0,2\"")
        if self.method != "fixed" and self.clients is not None:
            raise ConfigError(
                f"selection.clients = {','.join(map(str, self.clients))!r} is read only with "
                f"selection.method = 'fixed' (got {self.method!r}); remove it or set the method"
            )

    def check_clients(self, m: int) -> None:
        """ConfigError naming the key when the selection does not fit m clients."""
        if self.method in ("vfps", "random") and self.l > m:
            raise ConfigError(
                f"selection.l = {self.l} exceeds vfl.clients = {m}: cannot select {self.l} of {m} "
                f"clients; expected 1 <= selection.l <= {m}"
            )
        if self.clients is not None and max(self.clients) >= m:
            raise ConfigError(f"selection.clients = {','.join(map(str, self.clients))!r} names client "
                              f"{max(self.clients)}, but vfl.clients = {m} (indices 0..{m - 1})")

    @property
    def active(self) -> bool:
        """False for the default (every client, every row): nothing to select, pad or record."""
        return self.method != "all" or self.dynamic != "none"

    @classmethod
    def from_config(cls, config: Mapping) -> SelectionSpec:
        """The spec of a flat config; absent or None keys take the defaults (``queries`` and
        ``clients`` stay None)."""
        return cls(**{f.name: config[f"selection.{f.name}"] for f in fields(cls)
                      if config.get(f"selection.{f.name}") is not None})

    def to_config(self) -> dict:
        out = {f"selection.{f.name}": getattr(self, f.name) for f in fields(self)}
        out["selection.clients"] = None if self.clients is None else ",".join(map(str, self.clients))
        return out


def _integer(name: str, value, lo: int, *, optional: bool = False) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < lo:
        raise ConfigError(
            f"selection.{name} = {value!r}: expected an integer >= {lo}{' or none' if optional else ''}"
        )


def _probability(name: str, value, zero_ok: bool) -> None:
    ok = (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and (0 <= value if zero_ok else 0 < value)
        and value <= 1
    )
    if not ok:
        raise ConfigError(
            f"selection.{name} = {value!r}: expected a number in {'[' if zero_ok else '('}0, 1]"
        )
