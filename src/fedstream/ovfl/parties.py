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
    if config.get("model.backend", "numba") == "torch":
        return torch_client(config, index, width, rng)
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
    if config.get("model.backend", "numba") == "torch":
        return torch_server(config, n_clients, n_classes, rng)
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


def _torch_optimizer(config: dict, model, lr: float):
    from fedstream.ovfl.torch_parties import WindowOptimizer

    dlr = config["optimizer.name"] == "dlr"
    return WindowOptimizer(model.params, lr=lr, window=config["optimizer.window"] if dlr else None,
                           alpha=config["optimizer.alpha"])


def _seeded(rng: np.random.Generator, build):
    """``build()`` with the global torch RNG seeded from ``rng`` (a user's factory draws from it) and
    put back after."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(rng.integers(2**63)))
        return build()


def torch_client(config: dict, index: int, width: int, rng: np.random.Generator):
    """``model.backend = "torch"``: client ``index`` on the factory of ``model.client``, else on a torch
    copy of the built-in MLP drawn from ``rng`` as the compiled one is
    (:mod:`fedstream.ovfl.torch_parties`)."""
    from fedstream.ovfl.torch_parties import TorchClient, TorchModel, torch_mlp
    from fedstream.own_models import build, check_output

    e, spec = config["model.embedding"], config.get("model.client")
    if spec is None:
        module = torch_mlp(build_client_model(config["data.name"], width, e, rng))
    else:
        party = f"client {index}"
        module = _seeded(rng, lambda: build(spec, "model.client", party, input_shape=(width,), embedding=e,
                                            client=index, clients=config["vfl.clients"]))
        check_output(module, spec, "model.client", party, (width,), (e,), "(rows, model.embedding)")
    model = TorchModel(module, width, e)
    return TorchClient(index, model, _torch_optimizer(config, model, config["optimizer.lr"]),
                       window=message_rows(config))


def torch_server(config: dict, n_clients: int, n_classes: int, rng: np.random.Generator):
    """``model.backend = "torch"``: the server on the factory of ``model.server``, else on a torch copy
    of the built-in MLP."""
    from fedstream.ovfl.torch_parties import TorchModel, TorchServer, torch_mlp
    from fedstream.own_models import build, check_output

    e, spec = config["model.embedding"], config.get("model.server")
    n_in = n_clients * e
    if spec is None:
        module = torch_mlp(build_server_model(config["data.name"], n_in, n_classes, rng))
    else:
        module = _seeded(rng, lambda: build(spec, "model.server", "server", input_size=n_in,
                                            n_classes=n_classes, clients=n_clients, embedding=e))
        check_output(module, spec, "model.server", "server", (n_in,), (n_classes,),
                     f"(rows, classes) with {n_classes} classes")
    model = TorchModel(module, n_in, n_classes)
    return TorchServer(model, _torch_optimizer(config, model, server_lr(config)), n_clients=n_clients,
                       embedding=e, window=message_rows(config))

