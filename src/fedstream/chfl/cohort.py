"""The clients' side of a CHFL round, and the clients as the server sees them (:class:`Cohort`).

One round for one client: receive θ^t, score the candidates on the validation rows
(:func:`validate_client`, :func:`keep_common`), train and upload (:func:`train_and_upload`); at the
end each variant's choice is scored on the test rows (:func:`score_choices`). The in-process
:class:`LocalCohort` and a deployed node (``fedstream.chfl.deploy.host``) both run these functions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Protocol

import numpy as np

from fedstream.chfl.checkpoint import arrays_to_tensors, tensors_to_arrays
from fedstream.chfl.client import Client
from fedstream.chfl.plan import Experiment, build_clients
from fedstream.chfl.selection import Choice, Selector
from fedstream.transport.ledger import ByteLedger
from fedstream.transport.tensors import ModelTransport
from fedstream.transport.updates import ModelUpdate

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
            top, label_top = c.class_shares("test", ch.candidate)
            scored[key] = replace(ch, test_acc=c.accuracy("test", only=[ch.candidate])[ch.candidate],
                                  top_class_share=top, label_top_class_share=label_top)
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

    :class:`LocalCohort` holds them in this process; ``fedstream.chfl.deploy.proxy.RemoteCohort``
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
        return records_state(self.selector, self.commons)

    def load_records(self, state: dict) -> None:
        self.commons = load_records(self.selector, state)

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


def records_state(selector: Selector, commons: Mapping) -> dict:
    """A client side's validation records (``selector``) with their snapshots, and the global columns
    they point to (``commons``: (lr, round) -> arrays), as a checkpoint stores them; the simulator's
    cohort and a deployed node keep them the same way."""
    return {
        "selector": [
            {"key": [k, lr, cand], "choice": asdict(ch), "snapshot": selector.snapshots[(k, lr, cand)]}
            for (k, lr, cand), ch in selector.best.items()
        ],
        "commons": [
            {"lr": lr, "round": rnd, "tensors": arrays_to_tensors(st)} for (lr, rnd), st in commons.items()
        ],
    }


def load_records(selector: Selector, state: Mapping) -> dict:
    """Put :func:`records_state`'s records back into ``selector``; the ``commons`` they point to."""
    for rec in state["selector"]:
        selector.keep(int(rec["key"][0]), Choice(**rec["choice"]), rec["snapshot"])
    return {(c["lr"], int(c["round"])): tensors_to_arrays(c["tensors"]) for c in state["commons"]}
