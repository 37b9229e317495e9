"""The parties of an ``ovfl`` config, built the same way wherever they run.

The simulator (:class:`fedstream.ovfl.engine.OnlineVFL`), the River classifier
(:class:`fedstream.ovfl.river.OnlineVFL`) and each deployed party
(:mod:`fedstream.ovfl.deploy.parties`) build their models here: one generator seeded
``[seed, 0]`` draws client 0's bottom model, client 1's, ..., then the server's top model, so that
equal configs give equal initial weights everywhere.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

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


def build_parties(
    config: dict, sizes: Sequence[int], n_classes: int | None = None
) -> tuple[list[Client], Server | None]:
    """The clients (feature block widths ``sizes``) and, given ``n_classes``, the server of a config."""
    name, e = config["data.name"], config["model.embedding"]
    opt = dict(window=config["optimizer.window"], alpha=config["optimizer.alpha"])
    rows = message_rows(config)
    rng = np.random.default_rng([config["seed"], 0])
    clients = []
    for m, width in enumerate(sizes):
        model = build_client_model(name, width, e, rng)
        optimizer = make_optimizer(config["optimizer.name"], model, lr=config["optimizer.lr"], **opt)
        clients.append(Client(m, model, optimizer, window=rows))
    if n_classes is None:
        return clients, None
    model = build_server_model(name, len(sizes) * e, n_classes, rng)
    optimizer = make_optimizer(config["optimizer.name"], model, lr=server_lr(config), **opt)
    return clients, Server(model, optimizer, n_clients=len(sizes), embedding=e, window=rows)
