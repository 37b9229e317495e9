"""Settings of a CHFL experiment (one cell of the paper's tables), validated on construction.

Defaults are the paper's (section V-A): 5 clients, 30 % common features, hidden layers
512-256-128, Adam, 5 local epochs, batch 64. The paper does not give the number of rounds T nor
its search grids; the defaults here (``rounds`` = 3, ``lrs``, ``mus``) keep Table II on the data
at hand (covertype, the Sensorless subset, the partial jannis; 3 feature splits x 5 runs, with
Common and Concat scored inside the chfl runs) near 30 minutes on 2 cores: a covertype chfl run
(2 learning rates x 3 μ heads + Common + Concat, 5 clients) measured 64 CPU-seconds, Local 11,
FedProx 13; jannis twice that, the Sensorless subset a seventh (docs/chfl.md, "Speed").
Errors name the fields; :func:`named_by_config` renames them to the config keys (``chfl.*``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields

from fedstream.chfl.splits import SPLIT_KINDS, SettingError
from fedstream.data.chfl_datasets import DATASETS
from fedstream.errors import ConfigError

METHODS = ("chfl", "common", "local", "concat", "fedprox")
SHARED_BASELINES = ("common", "concat")

# settings field -> the config key a user writes (task = "chfl"); batch and stream fields together
CONFIG_KEYS: dict[str, str] = {
    "dataset": "data.name",
    "clients": "chfl.clients",
    "common_ratio": "chfl.common_ratio",
    "split": "chfl.split",
    "split_index": "chfl.split_index",
    "hidden": "chfl.hidden",
    "rounds": "chfl.rounds",
    "local_epochs": "chfl.local_epochs",
    "batch_size": "chfl.batch_size",
    "lrs": "chfl.lrs",
    "mus": "chfl.mus",
    "prox_mu": "chfl.prox_mu",
    "max_rows": "chfl.max_rows",
    "method": "chfl.method",
    "shared_baselines": "chfl.baselines",
    "batch": "chfl.stream_batch",
    "sync_every": "chfl.stream_sync_every",
    "lr": "chfl.stream_lr",
    "mu": "chfl.stream_mu",
    "late_join": "chfl.stream_late_join",
    "eval_every": "chfl.stream_eval_every",
    "device": "device",
    "client_model": "model.client",
    "server_model": "model.server",
}


def config_error(field: str, expected: str, value: object) -> SettingError:
    return SettingError(field, f"expected {expected}, found {value!r}")


@contextmanager
def named_by_config(keys: Mapping[str, str] = CONFIG_KEYS) -> Iterator[None]:
    """Re-raise a :class:`SettingError` from inside with the config key instead of the field name.

    The settings classes and the trainers name their dataclass fields (``lrs``); a run started
    from a config (``fedstream run``, the experiment runner) wraps them in this so that the user
    reads the key they wrote (``chfl.lrs``).
    """
    try:
        yield
    except SettingError as exc:
        raise exc.named(keys) from None


def check_int(field: str, v: object, lo: int) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise config_error(field, f"an integer >= {lo}", v)


def check_num(field: str, v: object, lo: float, hi: float, *, open_lo: bool = False,
              open_hi: bool = False) -> None:
    ok = isinstance(v, (int, float)) and not isinstance(v, bool)
    ok = ok and (v > lo if open_lo else v >= lo) and (v < hi if open_hi else v <= hi)
    if not ok:
        left, right = "(" if open_lo else "[", ")" if open_hi else "]"
        raise config_error(field, f"a number in {left}{lo}, {hi}{right}", v)


def check_choice(field: str, v: object, choices: tuple[str, ...]) -> None:
    if v not in choices:
        raise config_error(field, f"one of {', '.join(choices)}", v)


def check_list(field: str, v: object) -> tuple:
    if not isinstance(v, (tuple, list)) or len(v) == 0:
        raise config_error(field, "a non-empty list", v)
    return tuple(v)


@dataclass(frozen=True)
class CHFLSettings:
    """One CHFL experiment; every field is checked, ConfigError names the field and allowed values."""

    dataset: str = "covertype"
    clients: int = 5  # K
    common_ratio: float = 0.3  # r
    split: str = "random"  # random, max-corr, median-corr, min-corr (Table IV)
    split_index: int = 0  # which feature split (the paper averages 3)
    hidden: tuple[int, ...] = (512, 256, 128)
    rounds: int = 3  # T (not given by the paper)
    local_epochs: int = 5  # E
    batch_size: int = 64
    lrs: tuple[float, ...] = (3e-3, 1e-3)  # Adam learning rates tried (one federation each)
    mus: tuple[float, ...] = (0.0, 0.5, 1.0)  # lateral strengths tried (CHFL)
    prox_mu: float = 0.01  # FedProx ρ
    # baselines a chfl run also reports from its own federation (they share its common column,
    # whose training the heads never touch; see chfl/client.py): "common", "concat"
    shared_baselines: tuple[str, ...] = ("common",)
    select_round: bool = True  # also choose the round by validation accuracy, per client
    max_rows: int | None = None  # use a random subset of the rows (quick runs)
    device: str = "auto"  # where the clients compute: auto | cpu | cuda (fedstream.runs.device)
    # your own models (fedstream.own_models): model.client, the local heads over the unique features;
    # model.server, the common column FedAvg averages (a "module:function" path or a callable)
    client_model: object = None
    server_model: object = None

    def __post_init__(self) -> None:
        if self.dataset != "table":  # table: the user's file, fedstream.chfl.table_data
            check_choice("dataset", self.dataset, DATASETS)
        check_int("clients", self.clients, 1)
        check_num("common_ratio", self.common_ratio, 0.0, 1.0, open_lo=True, open_hi=True)
        check_choice("split", self.split, SPLIT_KINDS)
        check_int("split_index", self.split_index, 0)
        for name in ("rounds", "local_epochs", "batch_size"):
            check_int(name, getattr(self, name), 1)
        object.__setattr__(self, "hidden", check_list("hidden", self.hidden))
        for h in self.hidden:
            check_int("hidden", h, 1)
        object.__setattr__(self, "lrs", check_list("lrs", self.lrs))
        for lr in self.lrs:
            check_num("lrs", lr, 0.0, 1.0, open_lo=True)
        object.__setattr__(self, "mus", check_list("mus", self.mus))
        for mu in self.mus:
            check_num("mus", mu, 0.0, 1.0)
        check_num("prox_mu", self.prox_mu, 0.0, 1e6, open_lo=True)
        if not isinstance(self.shared_baselines, (tuple, list)):
            raise config_error("shared_baselines", "a list", self.shared_baselines)
        object.__setattr__(self, "shared_baselines", tuple(self.shared_baselines))
        for b in self.shared_baselines:
            check_choice("shared_baselines", b, SHARED_BASELINES)
        if not isinstance(self.select_round, bool):
            raise config_error("select_round", "true or false", self.select_round)
        if self.max_rows is not None:
            check_int("max_rows", self.max_rows, 1)
        check_choice("device", self.device, ("auto", "cpu", "cuda"))

    def to_dict(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, d: dict) -> CHFLSettings:
        """Build from a plain dict (e.g. a config table); unknown keys are rejected by name."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ConfigError(f"unknown CHFL setting(s) {unknown}: expected some of {sorted(known)}")
        return cls(**d)


def check_method(method: str) -> None:
    check_choice("method", method, METHODS)
