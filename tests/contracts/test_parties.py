"""Contract checks over every party: online VFL's client and server, batch VFL's client and server,
and the CHFL client (the ``*Party`` seams of :mod:`fedstream.seams`).

Registry: one line per online deployment shape (optimiser, activation policy, transport); the
parties of the other tasks have one configuration each. Checks: each party satisfies its Protocol;
a world of parties played n rounds, saved (parties, policy, links, ledger), loaded into a world
built with other initial weights and played m more rounds predicts, learns and counts exactly as
the uninterrupted world, bit for bit; messages that do not fit a party raise ``ProtocolError``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pytest
import torch
from torch import nn

from fedstream.chfl.client import Client as CHFLClient
from fedstream.chfl.client import make_client_data, make_heads
from fedstream.chfl.models import Column, state_arrays
from fedstream.errors import ProtocolError
from fedstream.models import MLP
from fedstream.optim import make_optimizer
from fedstream.ovfl.activation import FixedCount, Full, RandomActivation
from fedstream.ovfl.client import Client
from fedstream.ovfl.protocol import ComputeClock, play_round
from fedstream.ovfl.server import Server
from fedstream.ovfl.torch_parties import TorchClient, TorchModel, TorchServer, WindowOptimizer, torch_mlp
from fedstream.seams import (
    BatchClientParty,
    BatchServerParty,
    FederatedClientParty,
    OnlineClientParty,
    OnlineServerParty,
    Stateful,
)
from fedstream.selection.online import TopLActivation
from fedstream.selection.padding import make_padding
from fedstream.transport import CompressionSpec, InProcessTransport, make_transport
from fedstream.transport.messages import Embedding, Gradient, Query
from fedstream.transport.updates import ModelUpdate
from fedstream.vfl.parties import BatchClient, BatchServer

M, D, E, C, CHUNK = 3, 4, 5, 3, 6  # clients, features per client, embedding, classes, rounds per chunk


# --- online VFL ---------------------------------------------------------------------------------
@dataclass
class OnlineCase:
    name: str
    optimizer: str
    policy: Callable[[], object]
    spec: CompressionSpec = field(default_factory=CompressionSpec)
    window: int = 1  # SLR's sample window (the parties' window); 1 otherwise
    torch: bool = False  # the PyTorch parties (model.backend = "torch") on the same MLPs


ONLINE = [
    OnlineCase("ogd-full", "ogd", lambda: Full(M)),
    OnlineCase("slr-random-topk-cache-quant", "slr", lambda: RandomActivation(M, p=0.5, seed=1),
               CompressionSpec(up="topk", down="quant-huffman", ratio=0.4, cache=True), window=3),
    OnlineCase("dlr-fixed-sign", "dlr", lambda: FixedCount(M, k=1, seed=2),
               CompressionSpec(down="sign-scaled")),
    OnlineCase("ogd-topl", "ogd", lambda: TopLActivation(M, l=1, embedding=E, window=4, explore=3, k=1,
                                                         n_groups=3, seed=3)),
    OnlineCase("torch-dlr-random-sign", "dlr", lambda: RandomActivation(M, p=0.5, seed=1),
               CompressionSpec(down="sign-scaled"), torch=True),
    OnlineCase("torch-slr-fixed-topk", "slr", lambda: FixedCount(M, k=1, seed=2),
               CompressionSpec(up="topk", ratio=0.4), window=3, torch=True),
    OnlineCase("torch-ogd-topl", "ogd", lambda: TopLActivation(M, l=1, embedding=E, window=4, explore=3, k=1,
                                                               n_groups=3, seed=3), torch=True),
]


def torch_opt(case: OnlineCase, model: TorchModel) -> WindowOptimizer:
    return WindowOptimizer(model.params, lr=0.05, window=3 if case.optimizer == "dlr" else None, alpha=0.7)


class World:
    """The parties, policy and transport of one online run, as the engine wires them."""

    def __init__(self, case: OnlineCase, seed: int):
        rng = np.random.default_rng(seed)
        opt = lambda model: make_optimizer(case.optimizer, model, lr=0.05, window=3, alpha=0.7)  # noqa: E731
        models = [MLP([D, E], relu_last=True, rng=rng) for _ in range(M)]
        self.clients = [Client(m, mod, opt(mod), window=case.window) for m, mod in enumerate(models)]
        top = MLP([M * E, 6, C], relu_last=False, rng=rng)
        self.server = Server(top, opt(top), n_clients=M, embedding=E, window=case.window)
        if case.torch:
            self.clients = [TorchClient(m, tm, torch_opt(case, tm), window=case.window)
                            for m, tm in enumerate(TorchModel(torch_mlp(mod), D, E) for mod in models)]
            ttop = TorchModel(torch_mlp(top), M * E, C)
            self.server = TorchServer(ttop, torch_opt(case, ttop), n_clients=M, embedding=E,
                                      window=case.window)
        self.policy = case.policy()
        if hasattr(self.policy, "fill"):
            self.server.stand_in = self.policy
        self.transport = make_transport(M, case.spec)
        self.predictions: list[int] = []

    def parts(self) -> dict[str, object]:
        parts = {"server": self.server, "policy": self.policy, "transport": self.transport,
                 "ledger": self.transport.ledger} | {f"client{m}": c for m, c in enumerate(self.clients)}
        return {k: p for k, p in parts.items() if isinstance(p, Stateful)}

    def state(self) -> dict[str, np.ndarray]:
        return {f"{k}.{n}": np.array(v, copy=True) for k, p in self.parts().items()
                for n, v in p.state_dict().items()}

    def load(self, state: dict[str, np.ndarray]) -> None:
        for k, p in self.parts().items():
            p.load_state_dict({n[len(k) + 1:]: v for n, v in state.items() if n.startswith(f"{k}.")})

    def play(self, chunks: range) -> None:
        clock = ComputeClock()
        for c in chunks:
            rng = np.random.default_rng([5, c])
            x, y = rng.normal(size=(CHUNK, M, D)).astype(np.float32), rng.integers(C, size=CHUNK)
            masks = self.policy.mask(c, x.mean(axis=2))
            queried = self.policy.queried(masks)
            for r in range(CHUNK):
                t = c * CHUNK + r
                result = play_round(t, list(x[r]), int(y[r]), masks[r], self.server, self.clients,
                                    self.transport, clock, None if queried is None else queried[r])
                self.predictions.append(result.prediction)
            self.policy.observe([x[:, m] for m in range(M)], y)


def _same_state(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        if k.endswith(".seconds"):  # wall time spent scoring (topl), not a result
            continue
        assert np.array_equal(a[k], b[k], equal_nan=a[k].dtype.kind == "f"), k


@pytest.mark.parametrize("case", ONLINE, ids=[c.name for c in ONLINE])
def test_online_parties_satisfy_their_protocols(case):
    world = World(case, 0)
    assert all(isinstance(c, OnlineClientParty) for c in world.clients)
    assert isinstance(world.server, OnlineServerParty)


@pytest.mark.parametrize("case", ONLINE, ids=[c.name for c in ONLINE])
def test_online_state_save_load_equals_continuing(case):
    n, m = 2, 3
    whole = World(case, 0)
    whole.play(range(n + m))
    first = World(case, 0)
    first.play(range(n))
    state = first.state()
    resumed = World(case, 1)  # other initial weights: everything must come from the state
    resumed.load(state)
    resumed.play(range(n, n + m))
    assert resumed.predictions == whole.predictions[n * CHUNK:]
    _same_state(whole.state(), resumed.state())


def test_online_client_rejects_messages_that_do_not_fit():
    world = World(ONLINE[0], 0)
    client = world.clients[1]
    with pytest.raises(ProtocolError):
        client.observe(0, np.zeros(D + 1, np.float32))
    client.observe(0, np.zeros(D, np.float32))
    with pytest.raises(ProtocolError):
        client.on_event(1)
    with pytest.raises(ProtocolError):
        client.on_gradient(Gradient(0, 1, np.zeros((1, E), np.float32)))  # nothing sent yet
    with pytest.raises(ProtocolError):
        client.on_query(Query(0, 1, rows=2))
    client.on_event(0)
    with pytest.raises(ProtocolError):
        client.on_gradient(Gradient(0, 1, np.zeros((2, E), np.float32)))
    with pytest.raises(ProtocolError):
        client.on_gradient(Gradient(1, 1, np.zeros((1, E), np.float32)))


def test_online_server_rejects_messages_that_do_not_fit():
    server = World(ONLINE[0], 0).server
    good = [Embedding(0, m, np.zeros((1, E), np.float32)) for m in range(M)]
    for bad in (good[:-1], good[::-1], good[:-1] + [Embedding(1, M - 1, good[0].values)],
                good[:-1] + [Embedding(0, M - 1, np.zeros((1, E + 1), np.float32))]):
        with pytest.raises(ProtocolError):
            server.on_embeddings(0, 1, bad, [0])
    with pytest.raises(ProtocolError):
        server.pad(0, 1)  # no stand-in
    with pytest.raises(ProtocolError):
        Server(MLP([M * E + 1, C], relu_last=False, rng=np.random.default_rng(0)), None, n_clients=M,
               embedding=E)


# --- batch VFL ----------------------------------------------------------------------------------
B = 4  # batch rows


class BatchWorld:
    def __init__(self, seed: int, padding: str | None):
        torch.manual_seed(seed)
        self.clients = [BatchClient(m, nn.Sequential(nn.Linear(D, E), nn.ReLU()), lr=0.1) for m in range(M)]
        pad = None if padding is None else make_padding(padding, M, E)
        self.server = BatchServer(nn.Linear(M * E, C), M, E, lr=0.1, padding=pad)
        self.transport = InProcessTransport(M)
        self.losses: list[float] = []

    def play(self, steps: range) -> None:
        for s in steps:
            g = torch.Generator().manual_seed(s)
            x = torch.randn(M, B, D, generator=g)
            labels = torch.randint(0, C, (B,), generator=g)
            chosen = range(M) if self.server.padding is None else [m for m in range(M) if (s + m) % 3]
            embs = [self.transport.up(self.clients[m].embed(s, x[m])) if m in chosen else None
                    for m in range(M)]
            loss, grads = self.server.train_step(s, embs, labels)
            self.losses.append(loss)
            for grad in grads:
                self.clients[grad.client].on_gradient(self.transport.down(grad))

    def state(self) -> dict:
        """What a batch VFL checkpoint keeps: each party's model and optimiser, the padding."""
        parties = self.clients + [self.server]
        state = {f"{i}": (p.model.state_dict(), p.optimizer.state_dict()) for i, p in enumerate(parties)}
        if self.server.padding is not None:
            state["padding"] = self.server.padding.state_dict()
        return copy.deepcopy(state)

    def load(self, state: dict) -> None:
        for i, p in enumerate(self.clients + [self.server]):
            p.model.load_state_dict(state[f"{i}"][0])
            p.optimizer.load_state_dict(state[f"{i}"][1])
        if "padding" in state:
            self.server.padding.load_state_dict(state["padding"])


def _params(parties) -> list[torch.Tensor]:
    return [p.detach().clone() for party in parties for p in party.model.parameters()]


@pytest.mark.parametrize("padding", [None, "mean", "ema"])
def test_batch_state_save_load_equals_continuing(padding):
    n, m = 3, 4
    whole = BatchWorld(0, padding)
    assert all(isinstance(c, BatchClientParty) for c in whole.clients)
    assert isinstance(whole.server, BatchServerParty)
    whole.play(range(n + m))
    first = BatchWorld(0, padding)
    first.play(range(n))
    resumed = BatchWorld(1, padding)
    resumed.load(first.state())
    resumed.play(range(n, n + m))
    assert resumed.losses == whole.losses[n:]
    for a, b in zip(_params(whole.clients + [whole.server]), _params(resumed.clients + [resumed.server])):
        assert torch.equal(a, b)


def test_batch_parties_reject_messages_that_do_not_fit():
    world = BatchWorld(0, None)
    client, server = world.clients[0], world.server
    with pytest.raises(ProtocolError):
        client.on_gradient(Gradient(0, 0, np.zeros((B, E), np.float32)))  # nothing pending
    emb = client.embed(0, torch.zeros(B, D))
    for bad in (Gradient(1, 0, emb.values), Gradient(0, 1, emb.values), Gradient(0, 0, emb.values[:1])):
        with pytest.raises(ProtocolError):
            client.on_gradient(bad)
    good = [Embedding(0, m, np.zeros((B, E), np.float32)) for m in range(M)]
    labels = torch.zeros(B, dtype=torch.int64)
    for bad in (good[:-1], good[::-1], [None] + good[1:], [None] * M,
                good[:-1] + [Embedding(0, M - 1, np.zeros((B, E + 1), np.float32))]):
        with pytest.raises(ProtocolError):
            server.train_step(0, bad, labels)


# --- CHFL -----------------------------------------------------------------------------------------
DC, DU, HIDDEN = 3, 2, (6,)


def _chfl_client(seed: int) -> CHFLClient:
    rng = np.random.default_rng(0)  # the data are the same for every client built
    X, y = rng.normal(size=(40, DC + DU)), rng.integers(C, size=40)
    rows = np.arange(40)
    data = make_client_data(X, y, np.arange(DC), np.arange(DC, DC + DU), rows[:24], rows[24:32], rows[32:])
    g = torch.Generator().manual_seed(seed)
    heads = make_heads("chfl", DC, DU, C, HIDDEN, [0.0, 0.5], shared=("concat",), generator=g)
    return CHFLClient(0, data, common=Column(DC, C, HIDDEN, generator=g), heads=heads, lr=0.01,
                      batch_size=8, prox_mu=0.1, seed=4, report_common=True)


def _global(r: int) -> ModelUpdate:
    column = Column(DC, C, HIDDEN, generator=torch.Generator().manual_seed(50 + r))
    return ModelUpdate(r, 0, state_arrays(column), 0)


def _chfl_round(client: CHFLClient, r: int, uploads: list) -> None:
    client.receive(_global(r))
    client.train_epochs(1)
    uploads.append(client.upload())


def _chfl_state(client: CHFLClient) -> list[torch.Tensor]:
    mods = [client.common, *client.heads.values()]
    return [p.detach().clone() for mod in mods for p in mod.state_dict().values()]


def test_chfl_client_state_save_load_equals_continuing():
    whole, whole_up = _chfl_client(0), []
    assert isinstance(whole, FederatedClientParty)
    for r in range(2):
        _chfl_round(whole, r, whole_up)
    whole.train_epochs(1)  # a second pass in round 1, after the save point below
    for r in range(2, 4):
        _chfl_round(whole, r, whole_up)

    first, first_up = _chfl_client(0), []
    for r in range(2):
        _chfl_round(first, r, first_up)
    state = copy.deepcopy(first.state())  # tensors are live: copy before training on
    resumed, resumed_up = _chfl_client(9), list(first_up)
    resumed.receive(_global(0))  # make its Adam state exist, as a resumed trainer does
    resumed.load_state(state)
    resumed.train_epochs(1)
    for r in range(2, 4):
        _chfl_round(resumed, r, resumed_up)
    for a, b in zip(whole_up, resumed_up):
        assert a.round == b.round and all(np.array_equal(a.tensors[k], b.tensors[k]) for k in a.tensors)
    assert all(torch.equal(a, b) for a, b in zip(_chfl_state(whole), _chfl_state(resumed)))
    assert whole.accuracy("test") == resumed.accuracy("test")


def test_chfl_client_rejects_a_model_that_does_not_fit():
    with pytest.raises(ProtocolError):
        _chfl_client(0).receive(ModelUpdate(0, 0, {"w": np.zeros((2, 2), np.float32)}, 1))
