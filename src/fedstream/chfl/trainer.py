"""One CHFL experiment: a dataset, a feature split, a run seed, a method -> test accuracies.

:func:`run_chfl` loads the dataset, splits features (common/unique, ``settings.split_index``) and
rows (60/20/20, ``seed``), then for every learning rate runs one federation (Algorithm 2 for
``chfl``, Algorithm 1 for ``common``/``concat``, FedProx for ``fedprox``, no federation for
``local``) of ``rounds`` rounds. Each round the server's model goes down to every client and the
clients' models come back up as encoded :class:`ModelUpdate` bytes, counted per client and
direction. After each round every client scores its candidates on its validation rows; each
client then keeps the (learning rate, μ, round) with the best validation accuracy
(:mod:`fedstream.chfl.selection`) and reports that model's test accuracy. Given a run folder, the
run writes a metrics row per evaluation and a checkpoint after every FedAvg round, and resumes
from it (:class:`BatchRun`, :mod:`fedstream.chfl.checkpoint`).

One protocol, two backends: :class:`BatchRun` is the server's side (FedAvg and the round loop)
and talks to the clients through a :class:`Cohort`: :class:`LocalCohort` in this process, or
``fedstream.deploy.chfl_proxy.RemoteCohort`` over a link to nodes that each hold one client
(``fedstream deploy``). Both run a client's side of a round with the same functions
(:func:`validate_client`, :func:`keep_common`, :func:`train_and_upload`, :func:`score_choices`),
and each node builds its client with :func:`build_clients` and its data with :func:`prepare_client`.

Result variants: ``chfl`` reports its per-client choice over all μ (``chfl``) and restricted to
μ = 0 (``mu=0``) and to μ > 0 (``mu>0``), the two CHFL columns of Table II, plus the baselines
of ``settings.shared_baselines`` scored in the same federation (``common``: identical to a
separate Common run with the same seed; ``concat``: its own head on the same common column).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Protocol

import numpy as np
import torch

from fedstream.chfl.checkpoint import (
    RunFolder,
    arrays_to_tensors,
    ledger_state,
    load_ledger,
    tensors_to_arrays,
)
from fedstream.chfl.client import Client, ClientData, make_client_data, make_heads
from fedstream.chfl.fedavg import FedAvgServer
from fedstream.chfl.messages import ModelUpdate
from fedstream.chfl.models import Column, state_arrays
from fedstream.chfl.selection import Choice, Selector, summarize
from fedstream.chfl.settings import CHFLSettings, check_method
from fedstream.chfl.splits import (
    FeatureSplit,
    RowSplit,
    SettingError,
    feature_split,
    split_rows,
)
from fedstream.data.chfl_datasets import SPECS, load_chfl_dataset
from fedstream.data.paths import resolve_data_root
from fedstream.runs.threads import one_torch_thread
from fedstream.transport.ledger import ByteLedger
from fedstream.transport.tensors import ModelTransport

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


def _split(X: np.ndarray, y: np.ndarray, settings: CHFLSettings, *, seed: int,
           n_classes: int | None) -> tuple[np.ndarray, np.ndarray, FeatureSplit, RowSplit, int]:
    """The run's rows (a random ``max_rows`` subset if set), feature split and row split."""
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
    return X, y, fs, rs, n_classes


def prepare(X: np.ndarray, y: np.ndarray, settings: CHFLSettings, *, method: str, seed: int,
            n_classes: int | None = None) -> Experiment:
    """Split ``(X, y)`` into per-client views for one run (optionally a random ``max_rows`` subset)."""
    check_method(method)
    X, y, fs, rs, n_classes = _split(X, y, settings, seed=seed, n_classes=n_classes)
    data = [make_client_data(X, y, fs.common, fs.unique[k], rs.train[k], rs.val[k], rs.test)
            for k in range(settings.clients)]
    return Experiment(settings, method, seed, fs, data, n_classes, len(y))


def prepare_client(X: np.ndarray, y: np.ndarray, settings: CHFLSettings, *, seed: int, client: int,
                   n_classes: int | None = None) -> tuple[FeatureSplit, ClientData, int, int]:
    """Client ``client``'s part of :func:`prepare`: (feature split, its view, rows, classes).

    The same splits as the simulator's, then only this client's rows and columns are kept: what
    a deployed node holds (``fedstream.deploy.chfl_data``).
    """
    if isinstance(client, bool) or not isinstance(client, int) or not 0 <= client < settings.clients:
        raise SettingError("clients", f"client index {client!r}: expected 0..{settings.clients - 1}")
    X, y, fs, rs, n_classes = _split(X, y, settings, seed=seed, n_classes=n_classes)
    data = make_client_data(X, y, fs.common, fs.unique[client], rs.train[client], rs.val[client], rs.test)
    return fs, data, len(y), n_classes


def initial_column(plan: Plan) -> Column | None:
    """The server's initial global common column: the first draw of the run's generator."""
    if not plan.federated:
        return None
    s = plan.settings
    return Column(plan.n_common, plan.n_classes, s.hidden, generator=torch.Generator().manual_seed(plan.seed))


def build_clients(plan: Plan, unique_sizes: Sequence[int], lr: float,
                  data: Mapping[int, ClientData]) -> dict[int, Client]:
    """Fresh clients (those in ``data``), identically seeded for every lr.

    Weights come from a generator seeded by the run's seed, never from the global torch RNG, drawn
    in a fixed order: the server's initial column, then client 0's common column and heads,
    client 1's, ... A node holding only its own data replays the draws of the clients before it
    (``unique_sizes``: every client's number of unique features) and keeps only its own.
    """
    s = plan.settings
    g = torch.Generator().manual_seed(plan.seed)
    dc = plan.n_common
    shared = s.shared_baselines if plan.method == "chfl" else ()
    if plan.federated:
        Column(dc, plan.n_classes, s.hidden, generator=g)  # the server's initial column
    clients = {}
    for k in range(max(data, default=-1) + 1):
        common = Column(dc, plan.n_classes, s.hidden, generator=g) if plan.federated else None
        heads = make_heads(
            plan.method, dc, unique_sizes[k], plan.n_classes, s.hidden, s.mus, shared, generator=g
        )
        if k in data:
            clients[k] = Client(
                k, data[k], common=common, heads=heads, lr=lr, batch_size=s.batch_size,
                prox_mu=s.prox_mu if plan.method == "fedprox" else 0.0, seed=plan.seed,
                report_common="common" in shared)
    return clients


# -- one client's side of a round, shared by the in-process cohort and a deployed node ----------

def validate_client(c: Client, selector: Selector, lr: float, rnd: int) -> float:
    """Score ``c``'s candidates on its validation rows; snapshot those that improve. Best val acc."""
    val = c.accuracy("val")
    for n, v in val.items():
        if selector.improves(c.k, lr, n, v):
            selector.keep(c.k, Choice(lr, n, rnd, v), c.snapshot(n))
    return max(val.values())


def keep_common(commons: dict[tuple[float, int], dict[str, np.ndarray]], selector: Selector, lr: float,
                rnd: int, state: Mapping[str, np.ndarray]) -> None:
    """Keep θ^rnd (the global column the candidates were just scored with) while a record uses it."""
    commons[(lr, rnd)] = dict(state)
    used = {(ch.lr, ch.round) for ch in selector.best.values()}
    for key in [k for k in commons if k not in used]:
        del commons[key]


def score_choices(
    c: Client,
    selector: Selector,
    commons: Mapping[tuple[float, int], Mapping[str, np.ndarray]],
    variants: Mapping[str, Callable[[str], bool]],
) -> dict[str, Choice]:
    """``c``'s choice for each variant, scored on the test rows from its snapshot (each once)."""
    scored: dict[tuple[float, str], Choice] = {}
    out = {}
    for name, ok in variants.items():
        ch = selector.choose(c.k, ok)
        key = (ch.lr, ch.candidate)
        if key not in scored:
            c.restore(ch.candidate, selector.snapshots[(c.k, *key)], commons.get((ch.lr, ch.round)))
            scored[key] = replace(ch, test_acc=c.accuracy("test", only=[ch.candidate])[ch.candidate])
        out[name] = scored[key]
    return out


def train_and_upload(c: Client, epochs: int, federated: bool) -> ModelUpdate | None:
    """``epochs`` local epochs, then the common column to send (None when not federated)."""
    c.train_epochs(epochs)
    return c.upload() if federated else None


@dataclass
class RoundResult:
    """What a round brings back: each client's best validation accuracy (when scored) and the
    clients' updates (decoded, in client order; a remote client that failed is missing)."""

    val: dict[int, float] = field(default_factory=dict)
    updates: list[ModelUpdate] = field(default_factory=list)


class Cohort(Protocol):
    """The clients of a run as the server side sees them, whatever carries the messages.

    :class:`LocalCohort` holds them in this process; ``fedstream.deploy.chfl_proxy.RemoteCohort``
    sends each of them one request per round over a link. A round is one call (receive θ^t,
    score on validation, train, upload) so that a remote client costs one round trip per round.
    Every model crosses as encoded :class:`ModelUpdate` bytes counted in ``ledger``.
    """

    ledger: ByteLedger

    def start(self, lr: float) -> None:
        """A new federation: fresh clients (identically seeded) with learning rate ``lr``."""
        ...

    def round(self, lr: float, t: int, models: Sequence[ModelUpdate] | None, *, validate: bool,
              epochs: int) -> RoundResult:
        """Deliver θ^t (``models``: one message per client, None when not federated); with
        ``validate`` each client scores its candidates on its validation rows and keeps its best
        (lr, candidate, round t) snapshot; then ``epochs`` local epochs and the upload (0: neither)."""
        ...

    def test_choices(self, variants: Mapping[str, Callable[[str], bool]]) -> dict[str, list[Choice]]:
        """Each variant's per-client choice, scored on the test rows (client order)."""
        ...

    def checkpoint_state(self, *, mid_federation: bool) -> dict:
        """What the cohort adds to the run's checkpoint (the clients' side, or what the server
        knows of remote clients); ``mid_federation``: the clients are between two rounds."""
        ...

    def load_checkpoint(self, state: Mapping) -> None:
        """Restore :meth:`checkpoint_state`'s part of ``state`` (before the federation starts)."""
        ...

    def load_federation(self, state: Mapping) -> None:
        """Restore the clients of the federation the checkpoint stopped in (after :meth:`start`)."""
        ...


def checkpointed_after(t: int, rounds: int) -> bool:
    """Whether :class:`BatchRun` checkpoints once round ``t`` of a federation of ``rounds`` rounds is
    done: after every FedAvg round but the last one (``t + 1 < rounds``; round T follows at once and
    the federation's end checkpoints) and at the federation's end (``t == rounds``). A remote cohort
    asks its nodes to keep their state at exactly these points."""
    return t + 1 < rounds or t == rounds


def boundary(lr_index: int, rnd: int, rounds: int) -> int:
    """The run's position (federation ``lr_index``, next round ``rnd``) as one increasing number:
    round requests done over all federations. A deployed run's checkpoints and the nodes' kept
    states are named by it (``fedstream.deploy.node.kept_boundary``)."""
    return lr_index * (rounds + 1) + rnd


class LocalCohort:
    """The clients in this process: :class:`Client` objects, a :class:`Selector` and a
    :class:`ModelTransport` (every update really encoded, counted and decoded).

    θ^t is the same for every client, so it is kept once per (lr, round) a record points to.
    """

    def __init__(self, ex: Experiment):
        self.ex = ex
        self.transport = ModelTransport(ex.settings.clients)
        self.ledger = self.transport.ledger
        self.selector = Selector()
        self.commons: dict[tuple[float, int], dict[str, np.ndarray]] = {}  # (lr, round) -> θ_c^t
        self.clients: list[Client] | None = None

    def start(self, lr: float) -> None:
        sizes = [len(u) for u in self.ex.features.unique]
        made = build_clients(self.ex.plan, sizes, lr, dict(enumerate(self.ex.data)))
        self.clients = [made[k] for k in range(len(self.ex.data))]

    def round(self, lr: float, t: int, models: Sequence[ModelUpdate] | None, *, validate: bool,
              epochs: int) -> RoundResult:
        clients = self.clients
        received = [self.transport.down(msg) for msg in models] if models is not None else []
        for msg in received:
            clients[msg.client].receive(msg)
        out = RoundResult()
        if validate:
            out.val = {c.k: validate_client(c, self.selector, lr, t) for c in clients}
            if received:  # every client holds θ^t now: keep it once, not once per client
                keep_common(self.commons, self.selector, lr, t, received[0].tensors)
        if epochs:
            ups = [train_and_upload(c, epochs, self.ex.plan.federated) for c in clients]
            out.updates = [self.transport.up(u) for u in ups if u is not None]
        return out

    def test_choices(self, variants: Mapping[str, Callable[[str], bool]]) -> dict[str, list[Choice]]:
        if self.clients is None:  # resumed after the last federation: fresh clients suffice
            self.start(self.ex.settings.lrs[-1])
        picks = [score_choices(c, self.selector, self.commons, variants) for c in self.clients]
        return {name: [p[name] for p in picks] for name in variants}

    # -- checkpoints ---------------------------------------------------------------------------
    def records_state(self) -> dict:
        """The validation records with their snapshots and the global columns they point to."""
        return {
            "selector": [
                {
                    "key": [k, lr, cand],
                    "choice": asdict(ch),
                    "snapshot": self.selector.snapshots[(k, lr, cand)],
                }
                for (k, lr, cand), ch in self.selector.best.items()
            ],
            "commons": [
                {"lr": lr, "round": rnd, "tensors": arrays_to_tensors(st)}
                for (lr, rnd), st in self.commons.items()
            ],
        }

    def load_records(self, state: dict) -> None:
        for rec in state["selector"]:
            self.selector.keep(int(rec["key"][0]), Choice(**rec["choice"]), rec["snapshot"])
        self.commons = {(c["lr"], int(c["round"])): tensors_to_arrays(c["tensors"]) for c in state["commons"]}

    def clients_state(self) -> list[dict]:
        # a client's common column and its Adam state are replaced by the next round's θ^t and a
        # fresh Adam (Client.receive) before they are used again: not worth tens of MB per round
        return [c.state() | {"common": None, "opt_common": None, "anchor": {}} for c in self.clients]

    def load_clients(self, states: Sequence[dict]) -> None:
        for c, cs in zip(self.clients, states):
            c.load_state(cs)

    def checkpoint_state(self, *, mid_federation: bool) -> dict:
        return self.records_state() | ({"clients": self.clients_state()} if mid_federation else {})

    def load_checkpoint(self, state: Mapping) -> None:
        self.load_records(state)

    def load_federation(self, state: Mapping) -> None:
        self.load_clients(state["clients"])


METRIC_COLUMNS = ["lr", "round", "val_acc", "bytes_total"]
# result variant -> summary.json key test_acc_<suffix>: every run names what it measured, so that a
# report row keyed by dataset alone gathers Common from chfl runs and Local from local runs
SUMMARY_NAMES = {"chfl": "chfl", "mu=0": "mu0", "mu>0": "mupos", "common": "common", "concat": "concat",
                 "local": "local", "fedprox": "fedprox"}


class BatchRun:
    """The federations of one run (one per learning rate), checkpointed after every FedAvg round.

    The server's side: the FedAvg server and the round loop; the clients are a :class:`Cohort`
    (in this process, or remote nodes behind a link: the same loop either way). State between
    rounds: the position (learning rate index, rounds done), the server's model, every client's
    :meth:`~fedstream.chfl.client.Client.state`, the validation records with their head snapshots,
    the global common column of every round a record points to, and the byte ledger. With
    ``folder`` (a :class:`~fedstream.chfl.checkpoint.RunFolder`) the run resumes from its
    checkpoint, writes one metrics row per evaluation and a checkpoint after every round
    (:func:`checkpointed_after`). What the clients' side adds to a checkpoint is the cohort's
    (:meth:`Cohort.checkpoint_state`): an in-process cohort saves its clients; a remote one only
    what the server knows of its nodes, each node keeping its own state at the same points.
    """

    def __init__(self, plan: Plan, cohort: Cohort, folder: RunFolder | None = None,
                 progress: Progress | None = None):
        self.plan, self.cohort, self.folder, self.progress = plan, cohort, folder, progress
        self.server: FedAvgServer | None = None  # the FedAvg server of the current (or last) federation
        self.lr_index, self.round = 0, 0
        self.resumed: dict | None = None  # the mid-federation part of a checkpoint, until used
        self.elapsed = 0.0  # wall seconds of earlier sessions of this run
        state = folder.resume() if folder is not None else None
        if state is not None:
            self._load(state)
        self.started = time.perf_counter()

    @property
    def ledger(self) -> ByteLedger:
        return self.cohort.ledger

    def run(self) -> None:
        """Every remaining federation."""
        s = self.plan.settings
        while self.lr_index < len(s.lrs):
            self._federation(s.lrs[self.lr_index])
            self.lr_index, self.round = self.lr_index + 1, 0
            self._checkpoint(mid_federation=False)

    def _federation(self, lr: float) -> None:
        """Rounds ``self.round`` .. T of the federation with learning rate ``lr``."""
        s, plan = self.plan.settings, self.plan
        self.cohort.start(lr)
        initial = initial_column(plan)
        self.server = server = FedAvgServer(state_arrays(initial)) if initial is not None else None
        if self.resumed is not None:
            self._load_federation(self.resumed)
            self.resumed = None
        for t in range(self.round, s.rounds + 1):
            evaluate = t > 0 and (s.select_round or t == s.rounds)
            # θ^t down to every client (t = T: the final model), scored, trained on, sent back up
            models = server.broadcast(range(s.clients)) if server is not None else None
            result = self.cohort.round(
                lr, t, models, validate=evaluate, epochs=0 if t == s.rounds else s.local_epochs
            )
            if evaluate:
                val = float(np.mean(list(result.val.values())))
                row = {"lr": lr, "round": t, "val_acc": val, "bytes_total": self.ledger.total}
                if self.folder is not None:
                    self.folder.append(row)
                if self.progress is not None:
                    self.progress(
                        {"method": plan.method, "lr": lr, "round": t, "rounds": s.rounds, "val_acc": val}
                    )
            if t == s.rounds:
                break
            if server is not None:
                server.aggregate(result.updates)
            self.round = t + 1
            if checkpointed_after(t, s.rounds):  # (t < T here: the federation's end checkpoints in run())
                self._checkpoint(mid_federation=True)

    def test_choices(self, variants: dict[str, Callable[[str], bool]]) -> dict[str, dict]:
        """Each variant's per-client choice, scored on the test rows from its snapshot."""
        return {name: summarize(picks) for name, picks in self.cohort.test_choices(variants).items()}

    # -- checkpoints ---------------------------------------------------------------------------

    def _checkpoint(self, *, mid_federation: bool) -> None:
        if self.folder is None:
            return
        state = {
            "lr_index": self.lr_index, "round": self.round, "ledger": ledger_state(self.ledger),
            **self.cohort.checkpoint_state(mid_federation=mid_federation),
            "elapsed": self.elapsed + time.perf_counter() - self.started,
        }
        if mid_federation:
            server = self.server
            state["server"] = None if server is None else {
                "round": server.round, "tensors": arrays_to_tensors(server.state)}
        self.folder.save(state)

    def _load(self, state: dict) -> None:
        self.lr_index, self.round = int(state["lr_index"]), int(state["round"])
        load_ledger(self.ledger, state["ledger"])
        self.cohort.load_checkpoint(state)
        self.elapsed = float(state["elapsed"])
        if "server" in state:  # stopped between two rounds of a federation (None: Local has no server)
            self.resumed = state

    def _load_federation(self, state: dict) -> None:
        if self.server is not None:
            self.server.state = tensors_to_arrays(state["server"]["tensors"])
            self.server.round = int(state["server"]["round"])
        self.cohort.load_federation(state)


def variants_of(method: str, settings: CHFLSettings) -> dict[str, Callable[[str], bool]]:
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
    there and (``resume``) continue from a checkpoint found there (:mod:`fedstream.chfl.checkpoint`).
    """
    t0 = time.perf_counter()
    with one_torch_thread():  # runs are parallelised across processes
        ex = prepare(X, y, settings, method=method, seed=seed, n_classes=n_classes)
        folder = None if run_dir is None else RunFolder(
            run_dir, identity(settings, method, seed, ex.n_rows, ex.n_classes), METRIC_COLUMNS, resume=resume)
        run = BatchRun(ex.plan, LocalCohort(ex), folder, progress)
        run.run()
        variants = run.test_choices(variants_of(method, settings))
    return result_of(run, variants, n_rows=ex.n_rows, features=ex.features) | {
        "wall_seconds": run.elapsed + time.perf_counter() - t0, "resumed": run.elapsed > 0}


def result_of(run: BatchRun, variants: dict[str, dict], *, n_rows: int, features: FeatureSplit) -> dict:
    """The result dict of a finished run (timings aside), simulated or deployed alike."""
    plan, settings = run.plan, run.plan.settings
    main = variants[next(iter(variants))]
    return {
        "task": "chfl", "method": plan.method, "seed": plan.seed, "settings": settings.to_dict(),
        "test_acc": main["test_acc"], "test_acc_per_client": main["test_acc_per_client"],
        **{f"test_acc_{SUMMARY_NAMES[v]}": r["test_acc"] for v, r in variants.items() if v in SUMMARY_NAMES},
        "variants": variants, "n_rows": n_rows, "n_classes": plan.n_classes,
        "features": {"common": features.common.tolist(), "unique": [u.tolist() for u in features.unique]},
        "bytes": run.ledger.summary(), "federations": len(settings.lrs) if plan.federated else 0,
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
