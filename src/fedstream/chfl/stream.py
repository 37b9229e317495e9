"""Streaming CHFL (beyond the paper): samples arrive over time, a client may join late.

Each client's rows arrive as a stream, ``batch`` per tick. On arrival a client first predicts
them (the prequential test step) and then learns from them with one mini-batch step of
Algorithm 2 (its local common column on the common features, then its unique column with the
common column fixed). Every ``sync_every`` ticks the active clients' common columns are averaged
by FedAvg, weighted by the samples each learnt since the last average, through the same
:class:`ModelUpdate` messages and byte-counting transport as the batch experiments. The last
client joins at ``late_join`` of the stream with its own, new unique features: it starts from the
current global common column and a fresh unique column; under ``local`` it starts from nothing.

Standardisation uses each client's first ``stats_rows`` samples (what it can have seen early
on), as the online-VFL sources do. Reported: prequential accuracy per ``eval_every`` ticks and
client (the curve), accumulated prequential accuracy, the late joiner's own curve, bytes. Each
point of the curve also has the share of the most-predicted class of each client's predictions
(``top_class_share_per_client``) and, of the client whose predictions are most one class beyond
its labels' skew (``top_class_client``), that share and its labels' (``top_class_share``,
``label_top_class_share``): the last point's say whether the run ended collapsed
(:mod:`fedstream.metrics.collapse`: ``collapsed`` and a warning in the summary).
Given a run folder, the curve's rows (tick, acc, top_class_share) are written as they complete and
a checkpoint after every synchronisation; a checkpoint found there is resumed
(:mod:`fedstream.chfl.checkpoint`).
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import asdict, dataclass
from typing import NamedTuple

import numpy as np
import torch

from fedstream.chfl.checkpoint import (
    RunFolder,
    arrays_to_tensors,
    ledger_state,
    load_ledger,
    tensors_to_arrays,
)
from fedstream.chfl.client import Client, ClientData, View, make_heads
from fedstream.chfl.fedavg import FedAvgServer
from fedstream.chfl.models import Column, common_column, state_arrays
from fedstream.chfl.settings import (
    METHODS,
    check_choice,
    check_int,
    check_list,
    check_num,
)
from fedstream.chfl.splits import FeatureSplit, SettingError, random_split
from fedstream.data.chfl_datasets import DATASETS, SPECS, load_chfl_dataset
from fedstream.data.paths import resolve_data_root
from fedstream.metrics.collapse import collapse_fields, count_share, most_collapsed
from fedstream.runs.threads import one_torch_thread
from fedstream.transport.tensors import ModelTransport


@dataclass(frozen=True)
class StreamSettings:
    """A streaming CHFL run; ConfigError names a bad field and its allowed values."""

    dataset: str = "covertype"
    clients: int = 5
    common_ratio: float = 0.3
    split_index: int = 0
    hidden: tuple[int, ...] = (512, 256, 128)
    batch: int = 16  # samples per tick per active client
    sync_every: int = 10  # ticks between FedAvg rounds
    lr: float = 1e-3
    mu: float = 0.5
    prox_mu: float = 0.01  # fedprox only
    late_join: float = 0.5  # fraction of the ticks after which the last client joins (0: never late)
    eval_every: int = 20  # ticks per point of the curve
    stats_rows: int = 256
    max_rows: int | None = None
    client_model: object = None  # model.client: a factory of the local heads (fedstream.own_models)
    server_model: object = None  # model.server: a factory of the common column

    def __post_init__(self) -> None:
        if self.dataset != "table":  # table: the user's file, fedstream.chfl.table_data.run_stream_table
            check_choice("dataset", self.dataset, DATASETS)
        for name in ("clients", "batch", "sync_every", "eval_every", "stats_rows"):
            check_int(name, getattr(self, name), 1)
        check_int("split_index", self.split_index, 0)
        check_num("common_ratio", self.common_ratio, 0.0, 1.0, open_lo=True, open_hi=True)
        object.__setattr__(self, "hidden", check_list("hidden", self.hidden))
        for h in self.hidden:
            check_int("hidden", h, 1)
        check_num("lr", self.lr, 0.0, 1.0, open_lo=True)
        check_num("mu", self.mu, 0.0, 1.0)
        check_num("prox_mu", self.prox_mu, 0.0, 1e6, open_lo=True)
        check_num("late_join", self.late_join, 0.0, 1.0, open_hi=True)
        if self.max_rows is not None:
            check_int("max_rows", self.max_rows, 1)


def stream_view(X: np.ndarray, y: np.ndarray, rows: np.ndarray, common: np.ndarray,
                 unique: np.ndarray, stats_rows: int) -> View:
    cols = np.concatenate([common, unique])
    Z = X[np.ix_(rows, cols)]
    head = Z[:stats_rows]
    std = head.std(axis=0)
    Z = torch.from_numpy(((Z - head.mean(axis=0)) / np.where(std > 0, std, 1.0)).astype(np.float32))
    nc = len(common)
    return View(Z[:, :nc].contiguous(), Z[:, nc:].contiguous(), torch.from_numpy(y[rows]))


@dataclass(frozen=True)
class StreamLayout:
    """Who holds what in a streaming run: the feature split, each client's rows (its part of the
    run's permutation, in arrival order), the ticks and each client's join tick. Sizes only: a
    deployed node and the server compute it as the simulator does."""

    features: FeatureSplit
    parts: list[np.ndarray]
    n_ticks: int
    join_tick: list[int]


def stream_layout(n_rows: int, n_features: int, s: StreamSettings, seed: int) -> StreamLayout:
    fs = random_split(n_features, s.clients, ratio=s.common_ratio, seed=s.split_index)
    parts = np.array_split(np.random.default_rng([seed, 5]).permutation(n_rows), s.clients)
    n_ticks = min(len(p) for p in parts) // s.batch
    join_tick = [0] * s.clients
    if s.late_join > 0 and s.clients > 1:
        join_tick[-1] = int(s.late_join * n_ticks)
    return StreamLayout(fs, parts, n_ticks, join_tick)


def stream_rows(X: np.ndarray, y: np.ndarray, s: StreamSettings, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The run's rows: all, or the ``max_rows`` subset drawn from ``seed``."""
    if s.max_rows is not None and s.max_rows < len(y):
        rows = np.sort(np.random.default_rng([seed, 4]).choice(len(y), s.max_rows, replace=False))
        return X[rows], y[rows]
    return X, y


def draw_parties(layout: StreamLayout, s: StreamSettings, method: str, seed: int, n_classes: int,
                 upto: int) -> tuple[Column | None, list[tuple[dict, Column | None]]]:
    """The run's weight draws, in the simulator's order from one generator seeded with ``seed``: the
    server's initial common column (federated methods), then each client's heads and common column,
    for clients 0..``upto``-1 (a deployed node k replays the draws of the clients before it)."""
    g = torch.Generator().manual_seed(seed)  # the run's own: the global torch RNG is not touched
    fs, federated = layout.features, method != "local"
    dc = len(fs.common)
    initial = common_column(s.server_model, dc, n_classes, s.hidden, generator=g) if federated else None
    drawn = []
    for k in range(upto):
        heads = make_heads(method, dc, len(fs.unique[k]), n_classes, s.hidden, (s.mu,), generator=g,
                           own=s.client_model, client=k)
        drawn.append((heads, common_column(s.server_model, dc, n_classes, s.hidden, generator=g,
                                           party=f"client {k}") if federated else None))
    return initial, drawn


def stream_client(k: int, view: View, drawn: tuple[dict, Column | None], s: StreamSettings, method: str,
                  seed: int) -> Client:
    heads, common = drawn
    return Client(k, ClientData(view, view, view), heads=heads, lr=s.lr, batch_size=s.batch, common=common,
                  prox_mu=s.prox_mu if method == "fedprox" else 0.0, seed=seed)


class TickScore(NamedTuple):
    """A client's prequential test of one tick's batch: how many it predicted correctly, and how
    many of its predictions and of the batch's labels went to each class."""

    correct: float
    predicted: np.ndarray
    labels: np.ndarray


def learn_tick(c: Client, t: int, join_tick: int, batch: int) -> TickScore:
    """Client ``c``'s tick ``t``: predict its next batch (the prequential test), then learn from it."""
    i = (t - join_tick) * batch
    xc, xu, y = (a[i:i + batch] for a in c.data.train)
    out = c.predict(xc, xu, c.candidates()[:1])[c.candidates()[0]]
    guess = out.argmax(1)
    n_classes = out.shape[1]
    score = TickScore(float((guess == y).sum()), np.bincount(guess.numpy(), minlength=n_classes),
                      np.bincount(y.numpy(), minlength=n_classes))
    c.step(xc, xu, y)
    return score


def class_shares(predicted: np.ndarray, labels: np.ndarray, join_tick: list[int], a: int,
                 b: int) -> list[tuple[float, float] | None]:
    """Per client, over ticks [a, b), the shares of its most-predicted class and of the most
    frequent label (:func:`fedstream.metrics.collapse.count_share`) from the counts per client, tick
    and class; None for a client with no tick there (not active yet, or every tick missed)."""
    out: list[tuple[float, float] | None] = []
    for k in range(len(join_tick)):
        lo = max(a, join_tick[k])
        p = predicted[k, lo:b].sum(axis=0) if b > lo else None
        out.append(None if p is None or p.sum() == 0 else
                   (count_share(p), count_share(labels[k, lo:b].sum(axis=0))))
    return out


def share_fields(shares: list[tuple[float, float] | None]) -> dict:
    """A curve point's collapse fields from :func:`class_shares` (see the module doc)."""
    k = most_collapsed([(math.nan, math.nan) if v is None else v for v in shares])
    if k is None:
        return {}
    return {"top_class_share": shares[k][0], "label_top_class_share": shares[k][1], "top_class_client": k,
            "top_class_share_per_client": [None if v is None else v[0] for v in shares]}


def prequential_point(correct: np.ndarray, join_tick: list[int], batch: int, a: int, b: int,
                      seen: np.ndarray | None = None, counts: tuple[np.ndarray, np.ndarray] | None = None
                      ) -> dict:
    """Prequential accuracy over ticks [a, b), per client (None: not active yet) and mean.
    ``seen``: which (client, tick) were played (a deployed node that failed misses ticks);
    ``counts``: the predictions and labels per client, tick and class, for the collapse fields
    (:func:`share_fields`)."""
    per = []
    for k in range(len(join_tick)):
        lo = max(a, join_tick[k])
        n = b - lo if seen is None else int(seen[k, lo:b].sum())
        per.append(None if b <= join_tick[k] or n <= 0 else float(correct[k, lo:b].sum() / (n * batch)))
    live = [p for p in per if p is not None]
    out = {"tick": b, "acc": float(np.mean(live)), "per_client": per}
    return out if counts is None else out | share_fields(class_shares(*counts, join_tick, a, b))


def stream_summary(correct: np.ndarray, join_tick: list[int], s: StreamSettings,
                   seen: np.ndarray | None = None,
                   counts: tuple[np.ndarray, np.ndarray] | None = None) -> dict:
    """The result's accuracy keys from the correct counts per client and tick (``seen``, ``counts``:
    as for :func:`prequential_point`), and the collapse fields of the curve's last point."""
    n_ticks = correct.shape[1]
    played = [(n_ticks - join_tick[k]) if seen is None else int(seen[k].sum()) for k in range(s.clients)]
    per = [float(correct[k].sum() / (played[k] * s.batch)) if played[k] else float("nan")
           for k in range(s.clients)]
    late = s.clients - 1
    starts = range(0, n_ticks, s.eval_every)
    curve = [prequential_point(correct, join_tick, s.batch, a, min(a + s.eval_every, n_ticks), seen, counts)
             for a in starts]
    out = {"ticks": n_ticks, "prequential_acc": float(np.mean(per)), "prequential_acc_per_client": per,
           "curve": curve, "late_client": {"client": late, "join_tick": join_tick[late],
                                           "curve": [p["per_client"][late] for p in curve]}}
    last = curve[-1]
    if "top_class_share" in last:
        where = f"client {last['top_class_client']}'s last ticks ({starts[-1]}..{n_ticks - 1})"
        out |= collapse_fields(last["top_class_share"], last["label_top_class_share"], where)
    return out


class _Stream:
    """The clients, the server and the bookkeeping of one streaming run."""

    def __init__(self, X: np.ndarray, y: np.ndarray, s: StreamSettings, method: str, seed: int,
                 n_classes: int):
        self.s, self.method = s, method
        layout = stream_layout(len(y), X.shape[1], s, seed)
        fs, self.n_ticks, self.join_tick = layout.features, layout.n_ticks, list(layout.join_tick)
        initial, drawn = draw_parties(layout, s, method, seed, n_classes, s.clients)
        self.server = FedAvgServer(state_arrays(initial)) if initial is not None else None
        self.clients: list[Client] = [
            stream_client(k, stream_view(X, y, layout.parts[k], fs.common, fs.unique[k], s.stats_rows),
                          drawn[k], s, method, seed)
            for k in range(s.clients)]
        self.transport = ModelTransport(s.clients)
        self.correct = np.zeros((s.clients, self.n_ticks))
        # predictions and labels per client, tick and class (the collapse fields: share_fields)
        self.predicted = np.zeros((s.clients, self.n_ticks, n_classes), dtype=np.int64)
        self.labels = np.zeros_like(self.predicted)
        self.since_sync = [0] * s.clients

    def active(self, t: int) -> list[int]:
        return [k for k in range(self.s.clients) if t >= self.join_tick[k]]

    def _down(self, ks: list[int]) -> None:
        for msg in self.server.broadcast(ks):
            self.clients[msg.client].receive(self.transport.down(msg))

    def _sync(self, ks: list[int]) -> None:
        """FedAvg over the active clients that learnt since the last sync, then θ down to all."""
        ups = []
        for k in ks:
            if self.since_sync[k] > 0:
                u = self.clients[k].upload()
                ups.append(self.transport.up(u._replace(n_samples=self.since_sync[k])))
                self.since_sync[k] = 0
        self.server.aggregate(ups)
        self._down(ks)

    def tick(self, t: int) -> None:
        """Every active client predicts its next batch, is scored, then learns from it."""
        ks = self.active(t)
        if self.server is not None:
            joining = [k for k in ks if self.join_tick[k] == t]
            if joining:
                self._down(joining)
        for k in ks:
            score = learn_tick(self.clients[k], t, self.join_tick[k], self.s.batch)
            self.correct[k, t], self.predicted[k, t], self.labels[k, t] = score
            self.since_sync[k] += self.s.batch
        if self.server is not None and (t + 1) % self.s.sync_every == 0:
            self._sync(ks)

    def point(self, a: int, b: int) -> dict:
        """Prequential accuracy over ticks [a, b), per client (None: not active yet) and mean."""
        return prequential_point(self.correct, self.join_tick, self.s.batch, a, b,
                                 counts=(self.predicted, self.labels))

    def state(self, t: int) -> dict:
        """Everything after tick ``t - 1`` (for a checkpoint): clients, server, scores, ledger."""
        return {
            "tick": t, "clients": [c.state() for c in self.clients], "since_sync": list(self.since_sync),
            "server": None if self.server is None else {
                "round": self.server.round, "tensors": arrays_to_tensors(self.server.state)},
            "correct": torch.from_numpy(self.correct.copy()), "ledger": ledger_state(self.transport.ledger),
            "predicted": torch.from_numpy(self.predicted.copy()),
            "labels": torch.from_numpy(self.labels.copy()),
        }

    def load(self, state: dict) -> int:
        """Put back a :meth:`state`; returns the tick to continue from."""
        for c, cs in zip(self.clients, state["clients"]):
            c.load_state(cs)
        self.since_sync = [int(v) for v in state["since_sync"]]
        if self.server is not None:
            self.server.state = tensors_to_arrays(state["server"]["tensors"])
            self.server.round = int(state["server"]["round"])
        self.correct = state["correct"].numpy().copy()
        if "predicted" in state:  # (a checkpoint from before the counts were kept: none before it)
            self.predicted, self.labels = state["predicted"].numpy().copy(), state["labels"].numpy().copy()
        load_ledger(self.transport.ledger, state["ledger"])
        return int(state["tick"])


METRIC_COLUMNS = ["tick", "acc", "top_class_share"]  # top_class_share: the curve point's (share_fields)


def run_stream_on_table(X: np.ndarray, y: np.ndarray, settings: StreamSettings, *,
                        method: str = "chfl", seed: int = 0, n_classes: int | None = None,
                        run_dir: str | os.PathLike[str] | None = None, resume: bool = True) -> dict:
    """:func:`run_stream` on arrays in memory.

    ``run_dir``: write a metrics row (tick, acc) per ``eval_every`` ticks and a checkpoint after
    every FedAvg synchronisation there, and (``resume``) continue from a checkpoint found there.
    """
    check_choice("method", method, METHODS)
    t0 = time.perf_counter()
    X, y = stream_rows(X, y, settings, seed)
    n_classes = int(y.max()) + 1 if n_classes is None else n_classes
    with one_torch_thread():
        st = _Stream(X, y, settings, method, seed, n_classes)
        if st.n_ticks < 1:
            raise SettingError("batch", f"expected at most {len(y) // settings.clients} (the rows per "
                               f"client), found {settings.batch}")
        folder = None if run_dir is None else RunFolder(
            run_dir, {"task": "chfl-stream", "settings": asdict(settings), "method": method, "seed": seed,
                      "n_rows": len(y), "n_classes": n_classes}, METRIC_COLUMNS, resume=resume)
        saved = folder.resume() if folder is not None else None
        start, elapsed = (st.load(saved), float(saved["elapsed"])) if saved is not None else (0, 0.0)
        every = settings.eval_every
        for t in range(start, st.n_ticks):
            st.tick(t)
            if folder is None:
                continue
            if (t + 1) % every == 0 or t + 1 == st.n_ticks:
                p = st.point((t // every) * every, t + 1)
                folder.append({k: p.get(k) for k in METRIC_COLUMNS})
            if st.server is not None and (t + 1) % settings.sync_every == 0 and t + 1 < st.n_ticks:
                folder.save(st.state(t + 1) | {"elapsed": elapsed + time.perf_counter() - t0})
    return {
        "task": "chfl-stream", "method": method, "seed": seed, "settings": asdict(settings),
        **stream_summary(st.correct, st.join_tick, settings, counts=(st.predicted, st.labels)),
        "bytes": st.transport.ledger.summary(), "wall_seconds": elapsed + time.perf_counter() - t0,
        "resumed": elapsed > 0,
    }


def run_stream(settings: StreamSettings, data_root: str | os.PathLike[str] | None, *,
               method: str = "chfl", seed: int = 0, run_dir: str | os.PathLike[str] | None = None,
               resume: bool = True) -> dict:
    """Run the streaming form of ``method`` on ``settings.dataset``; see the module docstring.

    ``run_dir``: metrics rows and checkpoints there; a checkpoint found there is resumed.
    """
    loaded = load_chfl_dataset(settings.dataset, resolve_data_root(data_root))
    out = run_stream_on_table(loaded.table.X, loaded.table.y, settings, method=method, seed=seed,
                              n_classes=SPECS[settings.dataset].n_classes, run_dir=run_dir,
                              resume=resume)
    out["data"] = {"name": settings.dataset, "path": str(loaded.path), "status": loaded.status}
    return out
