"""Prediction with trained online VFL parties: who computes what, and which messages travel.

A prediction needs every party, as learning does, but nothing is learnt and no state changes:

1. each client runs its bottom model on its own feature block of the rows (:func:`client_embedding`)
   and sends the embeddings up (one :class:`~fedstream.transport.messages.Embedding` per client);
2. the server stacks them, runs its top model and turns the logits into class probabilities
   (:func:`server_probabilities`); the labels never leave the server and no gradient goes down.

:func:`predict_proba` plays these two steps over a transport (its ledger counts the bytes), so a
prediction sees exactly the float32 embeddings a server sees while learning.
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
    logits, _ = server.model.forward(np.ascontiguousarray(h, dtype=server.model.layers[0].W.dtype))
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
