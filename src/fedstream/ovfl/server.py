"""The server party of event-driven online VFL (paper Algorithm 1, server procedure).

The server holds the labels and the top model. Once the activated clients' embeddings for round
t are in, it queries the passive clients, predicts (the prequential "test" step), computes the
loss, updates its own model and returns d loss / d embedding for the activated clients only.

With SLR (``window = l``) each client sends the embeddings of its last l samples at current
parameters, the server keeps the last l labels and descends F = (1/l) sum_i f^{t-i}; it returns
the per-sample gradients d f^{t-i} / d h (l rows), as in Algorithm 5.

A client the server does not query (``topl`` activation) is stood in for by ``stand_in``
(:class:`fedstream.selection.online.TopLActivation`): :meth:`Server.pad` gives its padding as the
round's embedding, and after each round the stand-in sees the server's input row and which of its
embeddings were really sent.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedstream.errors import ProtocolError
from fedstream.models import MLP
from fedstream.models.kernels import softmax_cross_entropy_into
from fedstream.optim import Optimizer
from fedstream.ovfl.window import RowWindow
from fedstream.runs.state import StateOfParts
from fedstream.transport.messages import Embedding, Gradient, Query


@dataclass
class RoundResult:
    """What the server made of one round: its prediction (before learning) and the gradients."""

    prediction: int
    gradients: list[Gradient]


class Server(StateOfParts):
    """The label-holding party with the top model."""

    def __init__(self, model: MLP, optimizer: Optimizer, *, n_clients: int, embedding: int, window: int = 1):
        if model.n_in != n_clients * embedding:
            raise ProtocolError(
                f"server model takes {model.n_in} inputs but {n_clients} clients x {embedding} "
                f"embedding = {n_clients * embedding}"
            )
        self.model, self.optimizer = model, optimizer
        self.n_clients, self.embedding, self.window = n_clients, embedding, window
        self.labels = RowWindow(window, 1, dtype=np.int64)
        self._work: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}  # per row count
        self.stand_in = None  # fill(client, rows) / received(y, row, real) for clients not queried
        self._padded: list[int] = []  # clients padded in the current round

    def query(self, t: int, client: int) -> Query:
        """The query a passive client receives for round t."""
        return Query(round=t, client=client, rows=min(self.labels.count + 1, self.window))

    def pad(self, t: int, client: int) -> Embedding:
        """The stand-in's embedding for a client not queried in round t (no message is sent)."""
        if self.stand_in is None:
            raise ProtocolError(f"round {t}: client {client} was neither activated nor queried, "
                                "and the server has no padding to stand in for it")
        self._padded.append(client)
        return Embedding(
            round=t, client=client, values=self.stand_in.fill(client, min(self.labels.count + 1, self.window))
        )

    def on_embeddings(self, t: int, y: int, embeddings: list[Embedding], active: list[int]) -> RoundResult:
        """Predict, learn from label ``y`` and return gradients for the ``active`` clients."""
        self.labels.push(y)
        h, losses, g_logits = self._buffers(min(self.labels.count, self.window))
        self._stack(t, embeddings, h)
        self.tell_stand_in(y, h[-1])
        logits, acts = self.model.forward(h)
        prediction = int(logits[-1].argmax())
        softmax_cross_entropy_into(logits, self.labels.rows()[:, 0], losses, g_logits)
        grads, g_h = self.model.backward(acts, g_logits, need_input_grad=True)
        if self.window > 1:  # F = (1/l) sum f: scale the server's own step, not the clients' rows
            for g in grads:
                g.delta[...] *= 1.0 / self.window  # in place; g_h was computed from unscaled rows
        self.optimizer.step(grads)
        e = self.embedding
        out = [Gradient(t, m, g_h[:, m * e:(m + 1) * e]) for m in active]
        return RoundResult(prediction, out)

    def tell_stand_in(self, y: int, row: np.ndarray) -> None:
        """Show the stand-in (if any) the round's label, input row and which clients really sent."""
        if self.stand_in is not None:
            real = np.ones(self.n_clients, dtype=bool)
            real[self._padded] = False
            self.stand_in.received(y, row, real)
        self._padded.clear()

    def _buffers(self, rows: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The stacked embeddings (rows, M*e), per-row losses and d loss / d logits, allocated once."""
        work = self._work.get(rows)
        if work is None:
            dtype = self.model.layers[0].W.dtype
            work = (np.empty((rows, self.model.n_in), dtype), np.empty(rows, np.float64),
                    np.empty((rows, self.model.n_out), dtype))
            self._work[rows] = work
        return work

    def _stack(self, t: int, embeddings: list[Embedding], h: np.ndarray) -> None:
        """Check each client's embedding for round t and copy it into its columns of ``h``."""
        if len(embeddings) != self.n_clients:
            raise ProtocolError(
                f"round {t}: expected embeddings from {self.n_clients} clients, got {len(embeddings)}"
            )
        e = self.embedding
        shape = (h.shape[0], e)
        for m, msg in enumerate(embeddings):
            if msg.client != m:
                raise ProtocolError(
                    f"round {t}: embedding {m} comes from client {msg.client}, expected client {m}"
                )
            if msg.round != t or msg.values.shape != shape:
                raise ProtocolError(
                    f"round {t}: embedding from client {m} for round {msg.round} has shape "
                    f"{msg.values.shape}, expected {shape}"
                )
            h[:, m * e:(m + 1) * e] = msg.values

    def _parts(self) -> dict[str, object]:
        return {"model": self.model, "optim": self.optimizer, "labels": self.labels}
