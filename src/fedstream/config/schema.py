"""The config keys of fedstream: their types, defaults, allowed values and meaning.

Key names are a public contract (they appear in config files, ``--set`` and ``summary.json``).
Every key is validated before any work starts; see :func:`fedstream.config.load_config`.
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

    def describe(self) -> str:
        if self.choices:
            return "one of " + ", ".join(map(str, self.choices))
        bounds = []
        if self.min is not None:
            bounds.append(f"{'>' if self.exclusive_min else '>='} {self.min}")
        if self.max is not None:
            bounds.append(f"{'<' if self.exclusive_max else '<='} {self.max}")
        text = f"{'a number' if self.type is float else 'an integer' if self.type is int else 'a ' + self.type.__name__}"
        return text + (" " + " and ".join(bounds) if bounds else "")


DATASETS = ("imnist", "mnist", "fashion-mnist", "higgs", "susy")

SCHEMA: dict[str, Field] = {
    "task": Field(str, "ovfl", "what to run: ovfl = event-driven online vertical FL", choices=("ovfl",)),
    "seed": Field(int, 0, "seed of models, stream and activation draws", min=0),
    "rounds": Field(int, 20000, "number of rounds (one sample per round)", min=1),
    "data.name": Field(str, "imnist", "the stream's dataset", choices=DATASETS),
    "data.root": Field(str, None, "data folder (else $FEDSTREAM_DATA, ./data, ../shared/data)", optional=True),
    "data.stats_rows": Field(int, 10000, "rows used for the standardisation statistics (tabular data)", min=1),
    "stream.drift": Field(str, "none", "non-stationarity of the stream", choices=("none", "class-prior")),
    "stream.drift_every": Field(int, 50, "rounds between class-prior redraws", min=1),
    "vfl.clients": Field(int, 4, "number of clients M (equal contiguous feature blocks)", min=1),
    "model.embedding": Field(int, 64, "width of each client's embedding", min=1, max=65535),
    "optimizer.name": Field(str, "dlr", "update rule of every party", choices=("ogd", "slr", "dlr")),
    "optimizer.lr": Field(float, 0.01, "learning rate of the clients (and of the server unless server_lr)", min=0.0, exclusive_min=True),
    "optimizer.server_lr": Field(float, None, "learning rate of the server (default: optimizer.lr)", min=0.0, exclusive_min=True, optional=True),
    "optimizer.window": Field(int, 10, "window length l of SLR and DLR", min=1, max=65535),
    "optimizer.alpha": Field(float, 0.95, "DLR's attenuation coefficient alpha (paper: 0 < alpha < 1)", min=0.0, max=1.0, exclusive_min=True, exclusive_max=True),
    "activation.name": Field(str, "full", "which clients an event activates", choices=("full", "random", "event", "fixed")),
    "activation.p": Field(float, 0.5, "Random: activation probability of each client", min=0.0, max=1.0),
    "activation.threshold": Field(float, 0.2, "Event: threshold Γ on the mean standardised feature"),
    "activation.k": Field(int, 2, "Fixed: number of clients activated per round", min=0),
    "eval.interval": Field(int, 20000, "rounds per reported prequential error", min=1),
    "checkpoint.every": Field(int, 10000, "rounds between checkpoints when --out is given (0: only at the end)", min=0),
}
