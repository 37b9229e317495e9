"""One CHFL experiment: a dataset, a feature split, a run seed, a method -> test accuracies.

:func:`run_chfl` loads the dataset, splits features (common/unique, ``settings.split_index``) and
rows (60/20/20, ``seed``), then for every learning rate runs one federation (Algorithm 2 for
``chfl``, Algorithm 1 for ``common``/``concat``, FedProx for ``fedprox``, no federation for
``local``) of ``rounds`` rounds. Each round the server's model goes down to every client and the
clients' models come back up as encoded :class:`ModelUpdate` bytes, counted per client and
direction. After each round every client scores its candidates on its validation rows; each
client then keeps the (learning rate, μ, round) with the best validation accuracy
(:mod:`fedstream.hfl.selection`) and reports that model's test accuracy.

Result variants: ``chfl`` reports its per-client choice over all μ (``chfl``) and restricted to
μ = 0 (``mu=0``) and to μ > 0 (``mu>0``), the two CHFL columns of Table II, plus the baselines
of ``settings.shared_baselines`` scored in the same federation (``common``: identical to a
separate Common run with the same seed; ``concat``: its own head on the same common column).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from fedstream.data.chfl_datasets import SPECS, load_chfl_dataset
from fedstream.data.paths import resolve_data_root
from fedstream.hfl.client import Client, ClientData, make_client_data, make_heads
from fedstream.hfl.fedavg import FedAvgServer
from fedstream.hfl.models import Column, state_arrays
from fedstream.hfl.selection import Choice, Selector, summarize
from fedstream.hfl.settings import CHFLSettings, check_method
from fedstream.hfl.splits import FeatureSplit, feature_split, split_rows
from fedstream.transport.tensors import ModelTransport

Progress = Callable[[dict], None]


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


def prepare(X: np.ndarray, y: np.ndarray, settings: CHFLSettings, *, method: str, seed: int,
            n_classes: int | None = None) -> Experiment:
    """Split ``(X, y)`` into per-client views for one run (optionally a random ``max_rows`` subset)."""
    check_method(method)
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
    rs = split_rows(len(y), settings.clients, seed=seed)
    data = [make_client_data(X, y, fs.common, fs.unique[k], rs.train[k], rs.val[k], rs.test)
            for k in range(settings.clients)]
    return Experiment(settings, method, seed, fs, data, n_classes, len(y))


def _clients(ex: Experiment, lr: float) -> tuple[list[Client], Column | None]:
    """Fresh clients (and the server's initial common column), identically seeded for every lr."""
    s = ex.settings
    torch.manual_seed(ex.seed)
    dc = len(ex.features.common)
    federated = ex.method != "local"
    shared = s.shared_baselines if ex.method == "chfl" else ()
    initial = Column(dc, ex.n_classes, s.hidden) if federated else None
    clients = []
    for k, data in enumerate(ex.data):
        du = len(ex.features.unique[k])
        clients.append(Client(
            k, data, common=Column(dc, ex.n_classes, s.hidden) if federated else None,
            heads=make_heads(ex.method, dc, du, ex.n_classes, s.hidden, s.mus, shared), lr=lr,
            batch_size=s.batch_size, prox_mu=s.prox_mu if ex.method == "fedprox" else 0.0,
            seed=ex.seed, report_common="common" in shared))
    return clients, initial


def _evaluate(clients: list[Client], lr: float, rnd: int, selector: Selector) -> float:
    """Score every candidate on validation; snapshot those that improve. Mean best val acc."""
    means = []
    for c in clients:
        val = c.accuracy("val")
        for n, v in val.items():
            if selector.improves(c.k, lr, n, v):
                selector.keep(c.k, Choice(lr, n, rnd, v), c.snapshot(n))
        means.append(max(val.values()))
    return float(np.mean(means))


def _test_choices(clients: list[Client], selector: Selector,
                  variants: dict[str, Callable[[str], bool]]) -> dict[str, dict]:
    """Each variant's per-client choice, scored on the test rows from its snapshot."""
    scored: dict[tuple[int, float, str], Choice] = {}
    out = {}
    for name, ok in variants.items():
        picks = []
        for c in clients:
            ch = selector.choose(c.k, ok)
            key = (c.k, ch.lr, ch.candidate)
            if key not in scored:
                c.restore(ch.candidate, selector.snapshots[key])
                scored[key] = replace(ch, test_acc=c.accuracy("test", only=[ch.candidate])[ch.candidate])
            picks.append(scored[key])
        out[name] = summarize(picks)
    return out


def federation(ex: Experiment, lr: float, transport: ModelTransport, selector: Selector,
               progress: Progress | None = None) -> list[Client]:
    """Run ``rounds`` rounds with learning rate ``lr``, feeding validation scores to ``selector``."""
    s = ex.settings
    clients, initial = _clients(ex, lr)
    server = FedAvgServer(state_arrays(initial)) if initial is not None else None
    for t in range(s.rounds + 1):
        if server is not None:  # θ^t down to every client (t = T: the final model)
            for msg in server.broadcast(range(len(clients))):
                clients[msg.client].receive(transport.down(msg))
        if t > 0 and (s.select_round or t == s.rounds):
            val = _evaluate(clients, lr, t, selector)
            if progress is not None:
                progress({"method": ex.method, "lr": lr, "round": t, "rounds": s.rounds, "val_acc": val})
        if t == s.rounds:
            break
        for c in clients:
            c.train_epochs(s.local_epochs)
        if server is not None:
            server.aggregate([transport.up(c.upload()) for c in clients])
    return clients


def _variants(method: str, settings: CHFLSettings) -> dict[str, Callable[[str], bool]]:
    """Result name -> which candidates its per-client choice may pick."""
    if method != "chfl":
        return {method: lambda c: True}
    out: dict[str, Callable[[str], bool]] = {"chfl": lambda c: c.startswith("mu=")}
    if 0.0 in settings.mus:
        out["mu=0"] = lambda c: c == "mu=0"
    if any(m > 0 for m in settings.mus):
        out["mu>0"] = lambda c: c.startswith("mu=") and c != "mu=0"
    for b in settings.shared_baselines:
        out[b] = lambda c, b=b: c == b
    return out


def run_on_table(X: np.ndarray, y: np.ndarray, settings: CHFLSettings, *, method: str = "chfl",
                 seed: int = 0, progress: Progress | None = None, n_classes: int | None = None) -> dict:
    """:func:`run_chfl` on arrays already in memory (X float32 (n, d), y int64 0-based).

    ``n_classes`` defaults to ``y.max() + 1``.
    """
    t0 = time.perf_counter()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # runs are parallelised across processes
    try:
        ex = prepare(X, y, settings, method=method, seed=seed, n_classes=n_classes)
        transport = ModelTransport(settings.clients)
        selector = Selector()
        for lr in settings.lrs:
            clients = federation(ex, lr, transport, selector, progress)
        variants = _test_choices(clients, selector, _variants(method, settings))
    finally:
        torch.set_num_threads(threads)
    main = variants[next(iter(variants))]
    return {
        "task": "chfl", "method": method, "seed": seed, "settings": settings.to_dict(),
        "test_acc": main["test_acc"], "test_acc_per_client": main["test_acc_per_client"],
        "variants": variants, "n_rows": ex.n_rows, "n_classes": ex.n_classes,
        "features": {"common": ex.features.common.tolist(),
                     "unique": [u.tolist() for u in ex.features.unique]},
        "bytes": transport.ledger.summary(), "federations": len(settings.lrs) if method != "local" else 0,
        "wall_seconds": time.perf_counter() - t0,
    }


def run_chfl(settings: CHFLSettings, data_root: str | os.PathLike[str] | None, *, method: str = "chfl",
             seed: int = 0, progress: Progress | None = None) -> dict:
    """Run one experiment of ``method`` (chfl, common, local, concat, fedprox) and return its results.

    ``data_root``: resolved as in :func:`fedstream.data.resolve_data_root`. The result holds the
    mean and per-client test accuracy of the validation-chosen models (``test_acc``,
    ``test_acc_per_client``, ``variants``), the bytes sent up and down (``bytes``), the feature
    split, the data file read and whether it is partial (``data``), and ``wall_seconds``.
    """
    check_method(method)
    t0 = time.perf_counter()
    loaded = load_chfl_dataset(settings.dataset, resolve_data_root(data_root))
    out = run_on_table(loaded.table.X, loaded.table.y, settings, method=method, seed=seed,
                       progress=progress, n_classes=SPECS[settings.dataset].n_classes)
    out["data"] = {"name": settings.dataset, "path": str(Path(loaded.path)), "status": loaded.status}
    out["wall_seconds"] = time.perf_counter() - t0
    return out
