"""The parties of an ``ovfl`` config, built the same way wherever they run.

The simulator (:class:`fedstream.ovfl.engine.OnlineVFL`), the River classifier
(:class:`fedstream.ovfl.river.OnlineVFL`) and each deployed party
(:mod:`fedstream.ovfl.deploy.parties`) build their models here: one generator seeded
``[seed, 0]`` draws client 0's bottom model, client 1's, ..., then the server's top model, so that
equal configs give equal initial weights everywhere.

A table with one file per party (``data.path = "server.csv;bank.csv;..."``) is the exception: no
party knows the others' column counts, so each draws its own model from its own generator (client
m from ``[seed, 0, 1 + m]``, the server from ``[seed, 0, 0]``), in the simulator as in a deployment
(:func:`build_client`, :func:`build_server`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedstream.data.table_party import per_party
from fedstream.models import build_client_model, build_server_model
from fedstream.optim import make_optimizer
from fedstream.ovfl.client import Client
from fedstream.ovfl.server import Server


def server_lr(config: dict) -> float:
    """The server's learning rate: ``optimizer.server_lr`` if set, else ``optimizer.lr``."""
    lr = config["optimizer.server_lr"]
    return config["optimizer.lr"] if lr is None else lr


def message_rows(config: dict) -> int:
    """Rows per message: the SLR window l, else 1."""
    return config["optimizer.window"] if config["optimizer.name"] == "slr" else 1


def own_draws(config: dict) -> bool:
    """Whether each party draws its initial weights from its own generator (module doc)."""
    return per_party(config)


def build_client(config: dict, index: int, width: int, rng: np.random.Generator | None = None) -> Client:
    """Client ``index`` (feature block ``width`` wide), its model drawn from ``rng`` (None: its own
    generator, :func:`own_draws`)."""
    if rng is None:
        rng = np.random.default_rng([config["seed"], 0, 1 + index])
    opt = dict(window=config["optimizer.window"], alpha=config["optimizer.alpha"])
    model = build_client_model(config["data.name"], width, config["model.embedding"], rng)
    optimizer = make_optimizer(config["optimizer.name"], model, lr=config["optimizer.lr"], **opt)
    return Client(index, model, optimizer, window=message_rows(config))


def build_server(
    config: dict, n_clients: int, n_classes: int, rng: np.random.Generator | None = None
) -> Server:
    """The server of ``n_clients`` clients, its model drawn from ``rng`` (None: its own generator)."""
    if rng is None:
        rng = np.random.default_rng([config["seed"], 0, 0])
    e = config["model.embedding"]
    opt = dict(window=config["optimizer.window"], alpha=config["optimizer.alpha"])
    model = build_server_model(config["data.name"], n_clients * e, n_classes, rng)
    optimizer = make_optimizer(config["optimizer.name"], model, lr=server_lr(config), **opt)
    return Server(model, optimizer, n_clients=n_clients, embedding=e, window=message_rows(config))


def build_parties(
    config: dict, sizes: Sequence[int], n_classes: int | None = None
) -> tuple[list[Client], Server | None]:
    """The clients (feature block widths ``sizes``) and, given ``n_classes``, the server of a config."""
    shared = None if own_draws(config) else np.random.default_rng([config["seed"], 0])
    clients = [build_client(config, m, width, shared) for m, width in enumerate(sizes)]
    if n_classes is None:
        return clients, None
    return clients, build_server(config, len(sizes), n_classes, shared)
