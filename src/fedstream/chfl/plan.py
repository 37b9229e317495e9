"""A CHFL run's plan and data: what each party needs before the first round.

:class:`Plan` is what the server side knows (settings, method, seed, two sizes); :class:`Experiment`
adds the clients' data views. :func:`prepare` splits a table's features (common/unique) and rows
(60/20/20) for every client, :func:`prepare_client` for one (a deployed node), and
:func:`build_clients` draws the clients' initial weights in a fixed order from the run's seed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from fedstream.chfl.client import Client, ClientData, make_client_data, make_heads
from fedstream.chfl.models import common_column
from fedstream.chfl.settings import CHFLSettings, check_method
from fedstream.chfl.splits import (
    FRACTIONS,
    FeatureSplit,
    RowSplit,
    SettingError,
    feature_split,
    split_rows,
)
from fedstream.runs.device import resolve_device

Progress = Callable[[dict], None]


@dataclass(frozen=True)
class Plan:
    """What the server side of a run needs to know: settings, method, seed and two sizes.

    The server of a deployed run holds no data; the width of the common column (``n_common``
    features in, ``n_classes`` out) is all it needs to draw the initial global model.
    """

    settings: CHFLSettings
    method: str
    seed: int
    n_common: int
    n_classes: int

    @property
    def federated(self) -> bool:
        return self.method != "local"


@dataclass
class Experiment:
    """What every federation of one run shares: settings, data views, feature split."""

    settings: CHFLSettings
    method: str
    seed: int
    features: FeatureSplit
    data: list[ClientData]
    n_classes: int
    n_rows: int

    @property
    def plan(self) -> Plan:
        return Plan(self.settings, self.method, self.seed, len(self.features.common), self.n_classes)


def _split(X: np.ndarray, y: np.ndarray, settings: CHFLSettings, *, seed: int, n_classes: int | None,
           fractions: tuple[float, float, float] = FRACTIONS
           ) -> tuple[np.ndarray, np.ndarray, FeatureSplit, RowSplit, int]:
    """The run's rows (a random ``max_rows`` subset if set), feature split and row split
    (``fractions``: train / validation / test shares of the rows)."""
    if X.ndim != 2 or y.shape != (X.shape[0],):
        raise ValueError(f"expected X (n, d) and y (n,), found {X.shape} and {y.shape}")
    n_classes = int(y.max()) + 1 if n_classes is None else n_classes
    if y.min() < 0 or y.max() >= n_classes:
        raise ValueError(f"expected labels 0..{n_classes - 1}, found {y.min()}..{y.max()}")
    if settings.max_rows is not None and settings.max_rows < len(y):
        rows = np.sort(np.random.default_rng([seed, 4]).choice(len(y), settings.max_rows, replace=False))
        X, y = X[rows], y[rows]
    fs = feature_split(settings.split, X, settings.clients, ratio=settings.common_ratio,
                       seed=settings.split_index)
    rs = split_rows(len(y), settings.clients, seed=seed, fractions=fractions)
    return X, y, fs, rs, n_classes


def prepare(X: np.ndarray, y: np.ndarray, settings: CHFLSettings, *, method: str, seed: int,
            n_classes: int | None = None, fractions: tuple[float, float, float] = FRACTIONS) -> Experiment:
    """Split ``(X, y)`` into per-client views for one run (optionally a random ``max_rows`` subset;
    ``fractions``: the train / validation / test shares of the rows, the paper's 60 / 20 / 20 unless
    given)."""
    check_method(method)
    X, y, fs, rs, n_classes = _split(X, y, settings, seed=seed, n_classes=n_classes, fractions=fractions)
    data = [make_client_data(X, y, fs.common, fs.unique[k], rs.train[k], rs.val[k], rs.test)
            for k in range(settings.clients)]
    return Experiment(settings, method, seed, fs, data, n_classes, len(y))


def prepare_client(X: np.ndarray, y: np.ndarray, settings: CHFLSettings, *, seed: int, client: int,
                   n_classes: int | None = None) -> tuple[FeatureSplit, ClientData, int, int]:
    """Client ``client``'s part of :func:`prepare`: (feature split, its view, rows, classes).

    The same splits as the simulator's, then only this client's rows and columns are kept: what
    a deployed node holds (``fedstream.chfl.deploy.data``).
    """
    if isinstance(client, bool) or not isinstance(client, int) or not 0 <= client < settings.clients:
        raise SettingError("clients", f"client index {client!r}: expected 0..{settings.clients - 1}")
    X, y, fs, rs, n_classes = _split(X, y, settings, seed=seed, n_classes=n_classes)
    data = make_client_data(X, y, fs.common, fs.unique[client], rs.train[client], rs.val[client], rs.test)
    return fs, data, len(y), n_classes


def initial_column(plan: Plan) -> nn.Module | None:
    """The server's initial global common column: the first draw of the run's generator."""
    if not plan.federated:
        return None
    s = plan.settings
    return common_column(s.server_model, plan.n_common, plan.n_classes, s.hidden,
                         generator=torch.Generator().manual_seed(plan.seed))


def build_clients(plan: Plan, unique_sizes: Sequence[int], lr: float,
                  data: Mapping[int, ClientData]) -> dict[int, Client]:
    """Fresh clients (those in ``data``), identically seeded for every lr.

    Weights come from a generator seeded by the run's seed, never from the global torch RNG, drawn
    in a fixed order: the server's initial column, then client 0's common column and heads,
    client 1's, ... A node holding only its own data replays the draws of the clients before it
    (``unique_sizes``: every client's number of unique features) and keeps only its own.
    """
    s = plan.settings
    device = resolve_device(s.device)
    g = torch.Generator().manual_seed(plan.seed)
    dc = plan.n_common
    shared = s.shared_baselines if plan.method == "chfl" else ()
    if plan.federated:
        common_column(s.server_model, dc, plan.n_classes, s.hidden, generator=g)  # the server's initial one
    clients = {}
    for k in range(max(data, default=-1) + 1):
        common = (common_column(s.server_model, dc, plan.n_classes, s.hidden, generator=g,
                                party=f"client {k}") if plan.federated else None)
        heads = make_heads(plan.method, dc, unique_sizes[k], plan.n_classes, s.hidden, s.mus, shared,
                           generator=g, own=s.client_model, client=k)
        if k in data:
            clients[k] = Client(
                k, data[k], common=common, heads=heads, lr=lr, batch_size=s.batch_size,
                prox_mu=s.prox_mu if plan.method == "fedprox" else 0.0, seed=plan.seed,
                report_common="common" in shared, device=device)
    return clients
