"""The config keys of task ``ovfl`` (event-driven online vertical FL) and their checks.

Keys shared with batch VFL (``vfl.clients``, ``model.embedding``, ``optimizer.lr``,
``compression.*``) are declared once in :mod:`fedstream.config.schema`; here they are
:class:`~fedstream.fields.Shared` entries, which also place them in this task's key order.
"""

from __future__ import annotations

from typing import Any

from fedstream.config.schema import shared
from fedstream.errors import ConfigError
from fedstream.fields import Field, Shared
from fedstream.own_models import check_keys

NAME = "ovfl"
DATASETS = ("imnist", "mnist", "fashion-mnist", "higgs", "susy", "table")  # the first is the default

FIELDS: dict[str, Field | Shared] = {
    "rounds": Field(
        int, 20000, "number of rounds (one sample per round; table: default rows x stream.passes)", min=1,
        optional=True,
    ),
    "data.stats_rows": Field(
        int, 10000, "rows used for the standardisation statistics (tabular data)", min=1
    ),
    "data.path": Shared(),
    "data.label": Shared(),
    "data.id": Shared(),
    "data.categorical": Shared(),
    "vfl.partition": Shared(),
    "stream.passes": Field(
        int, 1, "table: passes over the rows (the stream is the rows in file order, repeated)", min=1
    ),
    "stream.drift": Field(
        str, "none", "non-stationarity of the stream", choices=("none", "class-prior")
    ),
    "stream.drift_every": Field(int, 50, "rounds between class-prior redraws", min=1),
    "vfl.clients": Shared(),
    "model.embedding": Shared(),
    "model.backend": Field(
        str, "numba", "the parties' engine: numba (fedstream's compiled MLPs, fused kernels) or torch "
        "(PyTorch modules with autograd: the built-in MLPs, or model.client / model.server)",
        choices=("numba", "torch"),
    ),
    "model.client": Shared(),
    "model.server": Shared(),
    "optimizer.name": Field(
        str, "dlr", "update rule of every party", choices=("ogd", "slr", "dlr")
    ),
    "optimizer.lr": Shared(),
    "optimizer.server_lr": Field(
        float,
        None,
        "learning rate of the server (default: optimizer.lr)",
        min=0.0,
        exclusive_min=True,
        optional=True,
    ),
    "optimizer.window": Field(int, 10, "window length l of SLR and DLR", min=1, max=65535),
    "optimizer.alpha": Field(
        float,
        0.95,
        "DLR's attenuation coefficient alpha (paper: 0 < alpha < 1)",
        min=0.0,
        max=1.0,
        exclusive_min=True,
        exclusive_max=True,
    ),
    "activation.name": Field(
        str,
        "full",
        "which clients an event activates (topl: the l best by an online KNN-MI estimate)",
        choices=("full", "random", "event", "fixed", "topl"),
    ),
    "activation.p": Field(
        float, 0.5, "Random: activation probability of each client", min=0.0, max=1.0
    ),
    "activation.threshold": Field(
        float, 0.2, "Event: threshold Γ on the mean standardised feature"
    ),
    "activation.k": Field(int, 2, "Fixed: number of clients activated per round", min=0),
    "activation.l": Field(int, 2, "topl: number of clients activated per round", min=1),
    "activation.window": Field(
        int,
        500,
        "topl: latest exploration rounds (every client sent) scored by group testing",
        min=20,
        max=4096,
    ),
    "activation.explore": Field(
        int,
        10,
        "topl: every this many rounds all clients are activated, which keeps the "
        "estimate alive (1: every round)",
        min=1,
    ),
    "activation.padding": Field(
        str,
        "mean",
        "topl: what the server uses for clients it does not query",
        choices=("zero", "mean", "latest", "ema"),
    ),
    "simulator.path": Field(
        str,
        "auto",
        "in-process simulator: auto (the fused compiled loop where it applies: no compression, "
        "not topl) or messages (every message encoded, counted and decoded); deployed parties: auto "
        "(a batch's events in compiled calls where they apply: no compression, not topl) or messages "
        "(event by event)",
        choices=("auto", "messages"),
    ),
    "eval.interval": Field(int, 20000, "rounds per reported prequential error", min=1),
    "checkpoint.every": Field(
        int, 10000, "rounds between checkpoints when --out is given (0: only at the end)", min=0
    ),
    "network.batch": Field(
        int,
        1,
        "deploy: events per message to a client node (1: the exact per-event algorithm; "
        "B > 1: embeddings of B events computed with the weights of the batch's start)",
        min=1,
        max=4096,
    ),
    "network.padding": Field(
        str,
        "zero",
        "deploy: the embedding the server uses for a client node that is down "
        "(crashed, hung, disconnected, or sent an invalid reply)",
        choices=("zero", "mean", "latest", "ema"),
    ),
    "network.max_missed": Field(
        float,
        0.05,
        "deploy: the share of the events a client node may miss (down, padded); a run where one "
        "missed more ends as failed (exit 2)",
        min=0.0,
        max=1.0,
    ),
    **shared("compression."),
}


def check(cfg: dict[str, Any]) -> dict[str, Any]:
    """The keys of an ``ovfl`` config against each other (the per-key checks are in the fields)."""
    if cfg["rounds"] is None and cfg["data.name"] != "table":
        raise ConfigError("rounds = none: only data.name = \"table\" has a default number of rounds "
                          "(its rows x stream.passes)")
    if cfg["data.name"] == "table" and not cfg["data.path"]:
        raise ConfigError('data.name = "table" needs data.path (the table file, or one file per party '
                          "separated by ';')")
    if cfg["activation.k"] > cfg["vfl.clients"]:
        raise ConfigError(f"activation.k = {cfg['activation.k']} exceeds vfl.clients = {cfg['vfl.clients']}")
    if cfg["activation.name"] == "topl" and cfg["activation.l"] > cfg["vfl.clients"]:
        raise ConfigError(f"activation.l = {cfg['activation.l']} exceeds vfl.clients = {cfg['vfl.clients']}: "
                          f"topl activates l of the {cfg['vfl.clients']} clients")
    if cfg.get("model.backend", "numba") == "numba" and (cfg.get("model.client") or cfg.get("model.server")):
        key = "model.client" if cfg.get("model.client") else "model.server"
        raise ConfigError(f'{key} = "{cfg[key]}" needs model.backend = "torch" (the numba backend runs '
                          "fedstream's own MLPs only)")
    check_keys(cfg)
    if cfg["data.name"] in ("imnist", "mnist", "fashion-mnist") and cfg["vfl.clients"] > 784:
        raise ConfigError(f"vfl.clients = {cfg['vfl.clients']}: images have only 784 features")
    return cfg
