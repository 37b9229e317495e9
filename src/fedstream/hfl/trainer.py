"""One CHFL experiment: a dataset, a feature split, a run seed, a method -> test accuracies.

:func:`run_chfl` loads the dataset, splits features (common/unique, ``settings.split_index``) and
rows (60/20/20, ``seed``), then for every learning rate runs one federation (Algorithm 2 for
``chfl``, Algorithm 1 for ``common``/``concat``, FedProx for ``fedprox``, no federation for
``local``) of ``rounds`` rounds. Each round the server's model goes down to every client and the
clients' models come back up as encoded :class:`ModelUpdate` bytes, counted per client and
direction. After each round every client scores its candidates on its validation rows; each
client then keeps the (learning rate, μ, round) with the best validation accuracy
(:mod:`fedstream.hfl.selection`) and reports that model's test accuracy. Given a run folder, the
run writes a metrics row per evaluation and a checkpoint after every FedAvg round, and resumes
from it (:class:`BatchRun`, :mod:`fedstream.hfl.checkpoint`).

Result variants: ``chfl`` reports its per-client choice over all μ (``chfl``) and restricted to
μ = 0 (``mu=0``) and to μ > 0 (``mu>0``), the two CHFL columns of Table II, plus the baselines
of ``settings.shared_baselines`` scored in the same federation (``common``: identical to a
separate Common run with the same seed; ``concat``: its own head on the same common column).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch

from fedstream.data.chfl_datasets import SPECS, load_chfl_dataset
from fedstream.data.paths import resolve_data_root
from fedstream.hfl.checkpoint import (
    RunFolder,
    arrays_to_tensors,
    ledger_state,
    load_ledger,
    tensors_to_arrays,
)
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
    """Fresh clients (and the server's initial common column), identically seeded for every lr.

    Weights come from a generator seeded by the run's seed, never from the global torch RNG.
    """
    s = ex.settings
    g = torch.Generator().manual_seed(ex.seed)
    dc = len(ex.features.common)
    federated = ex.method != "local"
    shared = s.shared_baselines if ex.method == "chfl" else ()
    initial = Column(dc, ex.n_classes, s.hidden, generator=g) if federated else None
    clients = []
    for k, data in enumerate(ex.data):
        du = len(ex.features.unique[k])
        clients.append(Client(
            k, data, common=Column(dc, ex.n_classes, s.hidden, generator=g) if federated else None,
            heads=make_heads(ex.method, dc, du, ex.n_classes, s.hidden, s.mus, shared, generator=g), lr=lr,
            batch_size=s.batch_size, prox_mu=s.prox_mu if ex.method == "fedprox" else 0.0,
            seed=ex.seed, report_common="common" in shared))
    return clients, initial


METRIC_COLUMNS = ["lr", "round", "val_acc", "bytes_total"]
# result variant -> summary.json key test_acc_<suffix>: every run names what it measured, so that a
# report row keyed by dataset alone gathers Common from chfl runs and Local from local runs
SUMMARY_NAMES = {"chfl": "chfl", "mu=0": "mu0", "mu>0": "mupos", "common": "common", "concat": "concat",
                 "local": "local", "fedprox": "fedprox"}


class BatchRun:
    """The federations of one run (one per learning rate), checkpointed after every FedAvg round.

    State between rounds: the position (learning rate index, rounds done), the server's model,
    every client's :meth:`~fedstream.hfl.client.Client.state`, the validation records with their
    head snapshots, the global common column of every round a record points to, and the byte
    ledger. With ``folder`` (a :class:`~fedstream.hfl.checkpoint.RunFolder`) the run resumes from
    its checkpoint, writes one metrics row per evaluation and a checkpoint after every round.
    """

    def __init__(self, ex: Experiment, folder: RunFolder | None = None, progress: Progress | None = None):
        self.ex, self.folder, self.progress = ex, folder, progress
        self.transport = ModelTransport(ex.settings.clients)
        self.selector = Selector()
        self.commons: dict[tuple[float, int], dict[str, np.ndarray]] = {}  # (lr, round) -> θ_c^t
        self.lr_index, self.round = 0, 0
        self.resumed: dict | None = None  # the mid-federation part of a checkpoint, until used
        self.elapsed = 0.0  # wall seconds of earlier sessions of this run
        state = folder.resume() if folder is not None else None
        if state is not None:
            self._load(state)
        self.started = time.perf_counter()

    def run(self) -> list[Client]:
        """Every remaining federation; returns the clients of the last (containers for scoring)."""
        s = self.ex.settings
        clients: list[Client] | None = None
        while self.lr_index < len(s.lrs):
            clients = self._federation(s.lrs[self.lr_index])
            self.lr_index, self.round = self.lr_index + 1, 0
            self._checkpoint(None, None)
        if clients is None:  # resumed after the last federation: fresh clients suffice
            clients, _ = _clients(self.ex, s.lrs[-1])
        return clients

    def _federation(self, lr: float) -> list[Client]:
        """Rounds ``self.round`` .. T of the federation with learning rate ``lr``."""
        s, ex = self.ex.settings, self.ex
        clients, initial = _clients(ex, lr)
        server = FedAvgServer(state_arrays(initial)) if initial is not None else None
        if self.resumed is not None:
            self._load_federation(self.resumed, server, clients)
            self.resumed = None
        for t in range(self.round, s.rounds + 1):
            if server is not None:  # θ^t down to every client (t = T: the final model)
                for msg in server.broadcast(range(len(clients))):
                    clients[msg.client].receive(self.transport.down(msg))
            if t > 0 and (s.select_round or t == s.rounds):
                val = self._evaluate(clients, server, lr, t)
                row = {"lr": lr, "round": t, "val_acc": val, "bytes_total": self.transport.ledger.total}
                if self.folder is not None:
                    self.folder.append(row)
                if self.progress is not None:
                    self.progress({"method": ex.method, "lr": lr, "round": t, "rounds": s.rounds, "val_acc": val})
            if t == s.rounds:
                break
            for c in clients:
                c.train_epochs(s.local_epochs)
            if server is not None:
                server.aggregate([self.transport.up(c.upload()) for c in clients])
            self.round = t + 1
            if self.round < s.rounds:  # after the last round, the federation's end checkpoints (run())
                self._checkpoint(server, clients)
        return clients

    def _evaluate(self, clients: list[Client], server: FedAvgServer | None, lr: float, rnd: int) -> float:
        """Score every candidate on validation; snapshot those that improve. Mean best val acc."""
        means = []
        for c in clients:
            val = c.accuracy("val")
            for n, v in val.items():
                if self.selector.improves(c.k, lr, n, v):
                    self.selector.keep(c.k, Choice(lr, n, rnd, v), c.snapshot(n))
            means.append(max(val.values()))
        if server is not None:  # every client holds θ^rnd now: keep it once, not once per client
            self.commons[(lr, rnd)] = server.state
            used = {(ch.lr, ch.round) for ch in self.selector.best.values()}
            self.commons = {k: v for k, v in self.commons.items() if k in used}
        return float(np.mean(means))

    def test_choices(self, clients: list[Client], variants: dict[str, Callable[[str], bool]]) -> dict[str, dict]:
        """Each variant's per-client choice, scored on the test rows from its snapshot."""
        scored: dict[tuple[int, float, str], Choice] = {}
        out = {}
        for name, ok in variants.items():
            picks = []
            for c in clients:
                ch = self.selector.choose(c.k, ok)
                key = (c.k, ch.lr, ch.candidate)
                if key not in scored:
                    c.restore(ch.candidate, self.selector.snapshots[key], self.commons.get((ch.lr, ch.round)))
                    scored[key] = replace(ch, test_acc=c.accuracy("test", only=[ch.candidate])[ch.candidate])
                picks.append(scored[key])
            out[name] = summarize(picks)
        return out

    # -- checkpoints ---------------------------------------------------------------------------

    def _checkpoint(self, server: FedAvgServer | None, clients: list[Client] | None) -> None:
        if self.folder is None:
            return
        state = {
            "lr_index": self.lr_index, "round": self.round, "ledger": ledger_state(self.transport.ledger),
            "selector": [{"key": [k, lr, cand], "choice": asdict(ch), "snapshot": self.selector.snapshots[(k, lr, cand)]}
                         for (k, lr, cand), ch in self.selector.best.items()],
            "commons": [{"lr": lr, "round": rnd, "tensors": arrays_to_tensors(st)}
                        for (lr, rnd), st in self.commons.items()],
            "elapsed": self.elapsed + time.perf_counter() - self.started,
        }
        if clients is not None:
            state["server"] = None if server is None else {
                "round": server.round, "tensors": arrays_to_tensors(server.state)}
            # a client's common column and its Adam state are replaced by the next round's θ^t and a
            # fresh Adam (Client.receive) before they are used again: not worth tens of MB per round
            state["clients"] = [c.state() | {"common": None, "opt_common": None, "anchor": {}} for c in clients]
        self.folder.save(state)

    def _load(self, state: dict) -> None:
        self.lr_index, self.round = int(state["lr_index"]), int(state["round"])
        load_ledger(self.transport.ledger, state["ledger"])
        for rec in state["selector"]:
            self.selector.keep(int(rec["key"][0]), Choice(**rec["choice"]), rec["snapshot"])
        self.commons = {(c["lr"], int(c["round"])): tensors_to_arrays(c["tensors"]) for c in state["commons"]}
        self.elapsed = float(state["elapsed"])
        if "clients" in state:
            self.resumed = state

    @staticmethod
    def _load_federation(state: dict, server: FedAvgServer | None, clients: list[Client]) -> None:
        if server is not None:
            server.state = tensors_to_arrays(state["server"]["tensors"])
            server.round = int(state["server"]["round"])
        for c, cs in zip(clients, state["clients"]):
            c.load_state(cs)


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


def identity(settings: CHFLSettings, method: str, seed: int, n_rows: int, n_classes: int) -> dict:
    """What makes two runs the same run (a checkpoint of one resumes only the same)."""
    return {"task": "chfl", "settings": settings.to_dict(), "method": method, "seed": seed,
            "n_rows": n_rows, "n_classes": n_classes}


def run_on_table(X: np.ndarray, y: np.ndarray, settings: CHFLSettings, *, method: str = "chfl",
                 seed: int = 0, progress: Progress | None = None, n_classes: int | None = None,
                 run_dir: str | os.PathLike[str] | None = None, resume: bool = True) -> dict:
    """:func:`run_chfl` on arrays already in memory (X float32 (n, d), y int64 0-based).

    ``n_classes`` defaults to ``y.max() + 1``. ``run_dir``: keep metrics.csv and checkpoint.pt
    there and (``resume``) continue from a checkpoint found there (:mod:`fedstream.hfl.checkpoint`).
    """
    t0 = time.perf_counter()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # runs are parallelised across processes
    try:
        ex = prepare(X, y, settings, method=method, seed=seed, n_classes=n_classes)
        folder = None if run_dir is None else RunFolder(
            run_dir, identity(settings, method, seed, ex.n_rows, ex.n_classes), METRIC_COLUMNS, resume=resume)
        run = BatchRun(ex, folder, progress)
        clients = run.run()
        variants = run.test_choices(clients, _variants(method, settings))
    finally:
        torch.set_num_threads(threads)
    main = variants[next(iter(variants))]
    return {
        "task": "chfl", "method": method, "seed": seed, "settings": settings.to_dict(),
        "test_acc": main["test_acc"], "test_acc_per_client": main["test_acc_per_client"],
        **{f"test_acc_{SUMMARY_NAMES[v]}": r["test_acc"] for v, r in variants.items() if v in SUMMARY_NAMES},
        "variants": variants, "n_rows": ex.n_rows, "n_classes": ex.n_classes,
        "features": {"common": ex.features.common.tolist(),
                     "unique": [u.tolist() for u in ex.features.unique]},
        "bytes": run.transport.ledger.summary(), "federations": len(settings.lrs) if method != "local" else 0,
        "wall_seconds": run.elapsed + time.perf_counter() - t0, "resumed": run.elapsed > 0,
    }


def run_chfl(settings: CHFLSettings, data_root: str | os.PathLike[str] | None, *, method: str = "chfl",
             seed: int = 0, progress: Progress | None = None,
             run_dir: str | os.PathLike[str] | None = None, resume: bool = True) -> dict:
    """Run one experiment of ``method`` (chfl, common, local, concat, fedprox) and return its results.

    ``data_root``: resolved as in :func:`fedstream.data.resolve_data_root`. The result holds the
    mean and per-client test accuracy of the validation-chosen models (``test_acc``,
    ``test_acc_per_client``, ``variants``; a chfl run also ``test_acc_mu0``, ``test_acc_mupos``
    and its shared baselines' ``test_acc_common`` / ``test_acc_concat``), the bytes sent up and
    down (``bytes``), the feature split, the data file read and whether it is partial (``data``),
    and ``wall_seconds``. ``run_dir``: checkpoint after every round there and (``resume``) continue
    from a checkpoint found there.
    """
    check_method(method)
    t0 = time.perf_counter()
    loaded = load_chfl_dataset(settings.dataset, resolve_data_root(data_root))
    load_seconds = time.perf_counter() - t0
    out = run_on_table(loaded.table.X, loaded.table.y, settings, method=method, seed=seed,
                       progress=progress, n_classes=SPECS[settings.dataset].n_classes, run_dir=run_dir,
                       resume=resume)
    out["data"] = {"name": settings.dataset, "path": str(Path(loaded.path)), "status": loaded.status}
    out["wall_seconds"] += load_seconds
    return out
