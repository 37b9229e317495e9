"""Prediction with trained online VFL parties: who computes what, and which messages travel.

A prediction needs every party, as learning does, but nothing is learnt and no state changes:

1. each client runs its bottom model on its own feature block of the rows (:func:`client_embedding`)
   and sends the embeddings up (one :class:`~fedstream.transport.messages.Embedding` per client);
2. the server stacks them, runs its top model and turns the logits into class probabilities
   (:func:`server_probabilities`); the labels never leave the server and no gradient goes down.

:func:`predict_proba` plays these two steps over a transport (its ledger counts the bytes), so a
prediction sees exactly the float32 embeddings a server sees while learning.

>>> import numpy as np
>>> from fedstream.models import MLP
>>> from fedstream.optim import make_optimizer
>>> from fedstream.transport import InProcessTransport
>>> rng = np.random.default_rng(0)
>>> def party(sizes):
...     model = MLP(sizes, relu_last=False, rng=rng)
...     return model, make_optimizer("ogd", model, lr=0.1, window=1, alpha=0.9)
>>> clients = [Client(m, *party([3, 4])) for m in range(2)]  # 3 features each, embeddings of 4
>>> server = Server(*party([8, 2]), n_clients=2, embedding=4)
>>> link = InProcessTransport(2)
>>> blocks = [rng.normal(size=(5, 3)), rng.normal(size=(5, 3))]  # 5 rows: each client's columns
>>> proba = predict_proba(server, clients, blocks, link)
>>> proba.shape, bool(np.allclose(proba.sum(axis=1), 1.0))
((5, 2), True)
>>> link.ledger.summary()["down"], link.ledger.messages  # embeddings up, nothing down
(0, [1, 1])
"""

from __future__ import annotations

import numpy as np

from fedstream.ovfl.client import Client
from fedstream.ovfl.server import Server
from fedstream.transport.messages import Embedding


def client_embedding(client: Client, t: int, x: np.ndarray) -> Embedding:
    """Client side: the embeddings of rows ``x`` (n, block width) at the current parameters."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    if x.ndim != 2 or x.shape[1] != client.model.n_in:
        raise ValueError(f"client {client.index}: expected rows of {client.model.n_in} features, "
                         f"got an array of shape {x.shape}")
    out, _ = client.model.forward(x)
    return Embedding(round=t, client=client.index, values=np.array(out, copy=True))


def server_logits(server: Server, embeddings: list[Embedding]) -> np.ndarray:
    """Server side: the top model's logits (n, classes) for the clients' embeddings, in client order."""
    h = np.concatenate([e.values for e in embeddings], axis=1)
    logits, _ = server.model.forward(np.ascontiguousarray(h, dtype=server.model.dtype))
    return np.array(logits, copy=True)


def softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise class probabilities (float64)."""
    z = logits.astype(np.float64) - logits.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def server_probabilities(server: Server, embeddings: list[Embedding]) -> np.ndarray:
    """Server side: class probabilities (n, classes)."""
    return softmax(server_logits(server, embeddings))


def predict_logits(server: Server, clients: list[Client], blocks: list[np.ndarray], transport,
                   t: int = 0) -> np.ndarray:
    """Steps 1 and 2 over ``transport``: ``blocks[m]`` is client m's features (n, width m)."""
    embeddings = [transport.up(client_embedding(c, t, x)) for c, x in zip(clients, blocks)]
    return server_logits(server, embeddings)


def predict_proba(server: Server, clients: list[Client], blocks: list[np.ndarray], transport,
                  t: int = 0) -> np.ndarray:
    """Class probabilities (n, classes) for the rows whose feature blocks are ``blocks``."""
    return softmax(predict_logits(server, clients, blocks, transport, t))
