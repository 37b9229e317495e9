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
(:mod:`fedstream.chfl.checkpoint`). The loop (:class:`StreamRun`) plays over a :class:`StreamCohort`:
the clients in this process (:class:`LocalStreamCohort`) or deployed nodes
(``fedstream.chfl.deploy.proxy.RemoteStreamCohort``).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import NamedTuple, Protocol

import numpy as np
import torch

from fedstream.chfl.checkpoint import (
    RunFolder,
    ledger_state,
    load_ledger,
    load_server,
    server_state,
)
from fedstream.chfl.client import Client, ClientData, View, make_heads
from fedstream.chfl.fedavg import FedAvgServer, try_carry_over
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
from fedstream.errors import ProtocolError
from fedstream.metrics.collapse import collapse_fields, count_share, most_collapsed
from fedstream.runs.threads import one_torch_thread
from fedstream.transport.ledger import ByteLedger
from fedstream.transport.tensors import ModelTransport
from fedstream.transport.updates import ModelUpdate


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


class Played(NamedTuple):
    """A client's segment: its correct predictions per tick, its predictions and the batch's labels
    per tick and class, and (at a synchronisation) its common column."""

    correct: np.ndarray
    predicted: np.ndarray
    labels: np.ndarray
    update: ModelUpdate | None


def played(scores: list[TickScore], update: ModelUpdate | None) -> Played:
    return Played(np.array([s.correct for s in scores]), np.stack([s.predicted for s in scores]),
                  np.stack([s.labels for s in scores]), update)


class StreamParty:
    """One client as it plays the stream: its ticks learnt (:func:`learn_tick`) and the rows it
    learnt since its last upload (``since``), which weigh that upload in FedAvg. The same in this
    process (:class:`LocalStreamCohort`) and on a deployed node
    (``fedstream.chfl.deploy.host.StreamHost``)."""

    def __init__(self, client: Client, join_tick: int, batch: int):
        self.client, self.join_tick, self.batch = client, join_tick, batch
        self.since = 0

    def learn(self, t: int) -> TickScore:
        """Tick ``t``: predict its batch (the prequential test), then learn from it."""
        self.since += self.batch
        return learn_tick(self.client, t, self.join_tick, self.batch)

    def upload(self) -> ModelUpdate:
        """The client's common column, weighted by the rows learnt since the last upload (then none)."""
        update = self.client.upload()._replace(n_samples=self.since)
        self.since = 0
        return update

    def play(self, start: int, until: int, upload: bool) -> Played:
        """Ticks [``start``, ``until``), then (``upload``: the segment ends in a synchronisation) the
        upload."""
        scores = [self.learn(t) for t in range(start, until)]
        return played(scores, self.upload() if upload else None)


@dataclass(frozen=True)
class Segment:
    """Ticks [``start``, ``until``) of the active ``clients``: first ``models`` (θ for the clients that
    need it: joining, after a synchronisation, back after a fault); ``upload``: the FedAvg server
    the segment's updates go to (None: no synchronisation ends it); ``keep``: the run checkpoints
    after it."""

    start: int
    until: int
    clients: list[int]
    models: dict[int, ModelUpdate]
    upload: FedAvgServer | None
    keep: bool


class StreamCohort(Protocol):
    """The clients of a streaming run as :class:`StreamRun` sees them, whatever carries the messages.

    :class:`LocalStreamCohort` holds them in this process; ``fedstream.chfl.deploy.proxy.
    RemoteStreamCohort`` sends each one request per segment over a link. Every model crosses as
    encoded :class:`ModelUpdate` bytes counted in ``ledger``; ``faults`` lists the clients' failures
    (remote only)."""

    ledger: ByteLedger
    faults: list[dict]

    def come_back(self, t: int) -> set[int]:
        """Before tick ``t``: the clients set up again since, who need θ with their next segment."""
        ...

    def play(self, seg: Segment) -> dict[int, Played]:
        """Deliver ``seg.models``, then every client of ``seg.clients`` predicts and learns its ticks;
        what each one that did reports (a remote client that failed is missing)."""
        ...

    def finish(self, t: int, models: dict[int, ModelUpdate]) -> None:
        """The end of the stream (``t``: its ticks): the last broadcast."""
        ...

    def checkpoint_state(self) -> dict:
        """What the clients' side adds to the run's checkpoint."""
        ...

    def load_checkpoint(self, state: Mapping) -> None:
        """Restore :meth:`checkpoint_state`'s part of ``state``."""
        ...


class LocalStreamCohort:
    """The clients in this process, behind a :class:`ModelTransport` (every update really encoded,
    counted and decoded); tick by tick, as the stream arrives."""

    def __init__(self, clients: list[Client], join_tick: list[int], batch: int):
        self.parties = [StreamParty(c, j, batch) for c, j in zip(clients, join_tick)]
        self.transport = ModelTransport(len(clients))
        self.ledger = self.transport.ledger
        self.faults: list[dict] = []

    def come_back(self, t: int) -> set[int]:
        return set()

    def _deliver(self, models: dict[int, ModelUpdate]) -> None:
        for k, msg in models.items():
            self.parties[k].client.receive(self.transport.down(msg))

    def tick(self, t: int, ks: list[int]) -> list[TickScore]:
        """Every client of ``ks`` predicts its batch of tick ``t``, is scored, then learns from it."""
        return [self.parties[k].learn(t) for k in ks]

    def play(self, seg: Segment) -> dict[int, Played]:
        self._deliver(seg.models)
        scores: dict[int, list[TickScore]] = {k: [] for k in seg.clients}
        for t in range(seg.start, seg.until):  # tick by tick, as the stream arrives
            for k, score in zip(seg.clients, self.tick(t, seg.clients)):
                scores[k].append(score)
        out = {}
        for k in seg.clients:  # at a synchronisation each one's update crosses the transport
            update = self.transport.up(self.parties[k].upload()) if seg.upload is not None else None
            out[k] = played(scores[k], update)
        return out

    def finish(self, t: int, models: dict[int, ModelUpdate]) -> None:
        self._deliver(models)

    def checkpoint_state(self) -> dict:
        return {"clients": [p.client.state() for p in self.parties],
                "since_sync": [p.since for p in self.parties]}  # rows each learnt since its last upload

    def load_checkpoint(self, state: Mapping) -> None:
        for p, cs, since in zip(self.parties, state["clients"], state["since_sync"]):
            p.client.load_state(cs)
            p.since = int(since)


METRIC_COLUMNS = ["tick", "acc", "top_class_share"]  # top_class_share: the curve point's (share_fields)


class StreamRun:
    """The server's side of a streaming run over a :class:`StreamCohort`: the FedAvg server, the
    scores per client, tick and class, and the loop.

    The stream is cut into segments at every synchronisation (each ``sync_every`` ticks), at every
    join tick and at the end; a segment's ticks need nothing from the server, so a remote client
    plays one segment per request. After a synchronisation θ goes to every active client with its
    next segment (after the last one, with the finish). A client that missed a segment
    (``seen``) gets θ again with its next one; a synchronisation without any update keeps θ
    (``carried``; a second in a row ends the run). With ``folder`` the run writes the metrics rows
    (tick, acc, top_class_share), checkpoints after every synchronisation before the end, and
    resumes from a checkpoint found there."""

    def __init__(self, s: StreamSettings, layout: StreamLayout, n_classes: int, initial: Column | None,
                 cohort: StreamCohort, folder: RunFolder | None = None):
        self.s, self.cohort, self.folder = s, cohort, folder
        self.join_tick, self.n_ticks = list(layout.join_tick), layout.n_ticks
        self.server = FedAvgServer(state_arrays(initial)) if initial is not None else None
        shape = (s.clients, self.n_ticks)
        self.correct, self.seen = np.zeros(shape), np.zeros(shape, dtype=bool)
        # predictions and labels per client, tick and class (the collapse fields: share_fields)
        self.predicted = np.zeros((*shape, n_classes), dtype=np.int64)
        self.labels = np.zeros_like(self.predicted)
        self.need: set[int] = set()  # clients to send θ with their next segment
        self.carried: list[int] = []  # the synchronisations (their tick) without any update
        self.tick, self.elapsed = 0, 0.0
        self.resumed = folder.resume() if folder is not None else None
        if self.resumed is not None:
            self._load(self.resumed)
        self.started = time.perf_counter()

    def run(self) -> None:
        """Every remaining segment, then the finish."""
        s, n, server = self.s, self.n_ticks, self.server
        cuts = sorted(set(range(0, n, s.sync_every)) | set(self.join_tick) | {n})
        for a, b in zip(cuts, cuts[1:]):
            if a < self.tick:
                continue
            self.need |= self.cohort.come_back(a)
            active = [k for k in range(s.clients) if self.join_tick[k] <= a]
            self.need |= {k for k in active if self.join_tick[k] == a}
            upload = server is not None and b % s.sync_every == 0
            keep = self.folder is not None and upload and b < n
            played = self.cohort.play(Segment(a, b, active, self._models(set(active)),
                                              server if upload else None, keep))
            ups = []
            for k, p in sorted(played.items()):
                self.correct[k, a:b], self.predicted[k, a:b], self.labels[k, a:b] = p[:3]
                self.seen[k, a:b] = True
                self.need.discard(k)
                if p.update is not None:
                    ups.append(p.update)
            if upload:
                if ups:
                    server.aggregate(ups)
                else:  # every client's reply lost (each one's fault): θ carries over to the next round
                    self._carry_over(b)
                self.need |= set(active)
            self.tick = b
            if self.folder is not None:
                self._metrics(a, b)
            if keep:
                self.folder.save(self.state())
        self.cohort.finish(n, self._models(set(range(s.clients))))

    def _models(self, among: set[int]) -> dict[int, ModelUpdate]:
        """θ for the clients of ``among`` that need it (none for Local)."""
        ks = sorted(self.need & among) if self.server is not None else []
        return dict(zip(ks, self.server.broadcast(ks))) if ks else {}

    def _carry_over(self, b: int) -> None:
        """The synchronisation at tick ``b`` brought no update: θ carries over (``carried``); twice in
        a row, or the run's only synchronisation: ProtocolError
        (:func:`~fedstream.chfl.fedavg.try_carry_over`)."""
        every = self.s.sync_every
        if not try_carry_over(self.server, self.carried, b, b - every, only=self.n_ticks // every == 1):
            raise ProtocolError(f"tick {b - 1}: no client node sent a valid model update"
                                f"{', nor at the synchronisation before' if b > every else ''} (faults: "
                                f"{[f['reason'] for f in self.cohort.faults[-3:]]})")

    def missed(self) -> list[int]:
        """Per client, the ticks it did not play (a remote client that failed)."""
        return [int((self.n_ticks - j) - self.seen[k].sum()) for k, j in enumerate(self.join_tick)]

    def summary(self) -> dict:
        """The result's accuracy keys (:func:`stream_summary`)."""
        seen = self.seen if any(self.missed()) else None
        return stream_summary(self.correct, self.join_tick, self.s, seen, (self.predicted, self.labels))

    def _metrics(self, a: int, b: int) -> None:
        """The metrics rows (tick, acc, top_class_share) of the points that end in ticks [a, b)."""
        every, join = self.s.eval_every, self.join_tick
        played = all(self.seen[k, join[k]:b].all() for k in range(len(join)))  # no tick missed so far
        for end in range(a + 1, b + 1):
            if end % every == 0 or end == self.n_ticks:
                p = prequential_point(self.correct, join, self.s.batch, ((end - 1) // every) * every, end,
                                      None if played else self.seen, (self.predicted, self.labels))
                self.folder.append({k: p.get(k) for k in METRIC_COLUMNS})

    def state(self) -> dict:
        """Everything after tick ``tick - 1`` (a checkpoint), with the cohort's part."""
        return {"tick": self.tick, "server": server_state(self.server),
                "correct": torch.from_numpy(self.correct.copy()),
                "seen": torch.from_numpy(self.seen.astype(np.uint8)), "need": sorted(self.need),
                "carried": list(self.carried), "ledger": ledger_state(self.cohort.ledger),
                "predicted": torch.from_numpy(self.predicted.copy()),
                "labels": torch.from_numpy(self.labels.copy()),
                "elapsed": self.elapsed + time.perf_counter() - self.started,
                **self.cohort.checkpoint_state()}

    def _load(self, v: dict) -> None:
        self.tick, self.elapsed = int(v["tick"]), float(v["elapsed"])
        load_server(self.server, v["server"])
        self.correct = v["correct"].numpy().copy()
        if "seen" in v:
            self.seen = v["seen"].numpy().astype(bool)
        else:  # (a simulator's checkpoint from before ``seen`` was kept: every tick played)
            for k, j in enumerate(self.join_tick):
                self.seen[k, j:self.tick] = True
        if "predicted" in v:  # (a checkpoint from before the counts were kept: none before it)
            self.predicted, self.labels = v["predicted"].numpy().copy(), v["labels"].numpy().copy()
        self.need = {int(m) for m in v.get("need", [])}
        self.carried = [int(x) for x in v.get("carried", [])]
        load_ledger(self.cohort.ledger, v["ledger"])
        self.cohort.load_checkpoint(v)


def stream_identity(s: StreamSettings, method: str, seed: int, n_rows: int | None,
                    n_classes: int | None) -> dict:
    """What makes two streaming runs the same run (a checkpoint of one resumes only the same)."""
    return {"task": "chfl-stream", "settings": asdict(s), "method": method, "seed": seed, "n_rows": n_rows,
            "n_classes": n_classes}


def stream_result(run: StreamRun, method: str, seed: int) -> dict:
    """The result dict of a finished streaming run (timings aside), simulated or deployed alike."""
    return {"task": "chfl-stream", "method": method, "seed": seed, "settings": asdict(run.s), **run.summary(),
            "bytes": run.cohort.ledger.summary()}


def play_stream(X: np.ndarray, y: np.ndarray, s: StreamSettings, method: str, seed: int, n_classes: int,
                folder: RunFolder | None = None) -> StreamRun:
    """The simulator's streaming run on ``X``, ``y`` (the run's rows), in this process, played."""
    layout = stream_layout(len(y), X.shape[1], s, seed)
    if layout.n_ticks < 1:
        raise SettingError("batch", f"expected at most {len(y) // s.clients} (the rows per "
                           f"client), found {s.batch}")
    fs = layout.features
    initial, drawn = draw_parties(layout, s, method, seed, n_classes, s.clients)
    clients = [stream_client(k, stream_view(X, y, layout.parts[k], fs.common, fs.unique[k], s.stats_rows),
                             drawn[k], s, method, seed) for k in range(s.clients)]
    run = StreamRun(s, layout, n_classes, initial, LocalStreamCohort(clients, layout.join_tick, s.batch),
                    folder)
    run.run()
    return run


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
        ident = stream_identity(settings, method, seed, len(y), n_classes)
        folder = None if run_dir is None else RunFolder(run_dir, ident, METRIC_COLUMNS, resume=resume)
        run = play_stream(X, y, settings, method, seed, n_classes, folder)
    return stream_result(run, method, seed) | {"wall_seconds": run.elapsed + time.perf_counter() - t0,
                                                "resumed": run.elapsed > 0}


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
