"""The stacked parties of :mod:`fedstream.ovfl.stack`: one party role of K runs that share a stream.

:class:`ClientStack` holds client ``index`` of the K runs (one shared feature block, K bottom
models as one :class:`~fedstream.models.stack.MLPStack`); :class:`ServerStack` holds the K
servers (K top models, one shared label window). Each answers the messages of
:func:`fedstream.ovfl.protocol.play_stack_round` for the runs a message names, and writes run k's
model, optimiser state and windows back into the plain parties (``write_back``).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from fedstream.errors import ProtocolError
from fedstream.models.stack import MLPStack, stack_softmax_cross_entropy
from fedstream.optim.stack import make_optimizer_stack
from fedstream.ovfl.client import Client
from fedstream.ovfl.server import Server
from fedstream.ovfl.window import RowWindow
from fedstream.transport.messages import Embedding, Gradient, Query


def _write_back(stacked, parties: list, window: str) -> None:
    """Run k's model and optimiser state from a stacked party into ``parties[k]``, and the shared
    sample window (``inputs`` of a client, ``labels`` of the server) into each of them."""
    stacked.model.write_back([p.model for p in parties])
    stacked.optimizer.write_back([p.optimizer for p in parties])
    state = getattr(stacked, window).state_dict()
    for p in parties:
        getattr(p, window).load_state_dict(state)


class ClientStack:
    """Client ``index`` of K runs: one feature block (the stream is shared), K bottom models."""

    def __init__(self, index: int, clients: list[Client]):
        self.index, self.K = index, len(clients)
        self.window = clients[0].window
        self.model = MLPStack([c.model for c in clients])
        self.optimizer = make_optimizer_stack(self.model, [c.optimizer for c in clients])
        self.inputs = RowWindow(self.window, self.model.n_in)
        self.inputs.load_state_dict(clients[0].inputs.state_dict())  # the same rows in every run
        self._round = -1
        self._active = np.zeros(self.K, dtype=bool)  # runs in which this client was activated this round
        self._out: np.ndarray | None = None
        self._acts: list[np.ndarray] | None = None
        self._grad: dict[int, np.ndarray] = {}

    def observe(self, t: int, x: np.ndarray) -> None:
        """This round's feature block, shared by every run."""
        if x.shape != (self.model.n_in,):
            raise ProtocolError(f"client {self.index}: feature block has shape {x.shape}, "
                                f"its model expects ({self.model.n_in},)")
        self.inputs.push(x)
        self._round, self._out = t, None
        self._active[:] = False

    def _embeddings(self) -> np.ndarray:
        """(K, rows, e): every run's embedding of this round's sample (or window), computed once."""
        if self._out is None:
            self._out, self._acts = self.model.forward(self.inputs.rows()[None])
        return self._out

    def on_event(self, t: int, runs: np.ndarray) -> Embedding:
        """Activated in ``runs``: send those runs' embeddings."""
        self._check_round(t)
        self._active[runs] = True
        return Embedding(t, self.index, self._embeddings()[runs], runs)

    def on_query(self, query: Query) -> Embedding:
        """Passive in ``query.runs``: answer; those runs push a zero (DLR) when this client steps."""
        self._check_round(query.round)
        out = self._embeddings()
        if query.rows != out.shape[1]:
            raise ProtocolError(
                f"client {self.index}: query for round {query.round} asks for {query.rows} rows, "
                f"its window holds {out.shape[1]}"
            )
        if not self._active.any():  # no gradient will come this round: every run steps (passively) now
            # factors the kernels will not read: no run is active
            bufs = self.model.layer_buffers(out.shape[1])
            self.optimizer.step([(delta, x) for (_, delta, _), x in zip(bufs, self._acts)], self._active)
        return Embedding(query.round, self.index, out[query.runs], query.runs)

    def on_gradient(self, grad: Gradient) -> None:
        """d loss / d embedding for the activated runs: back-propagate and step every run (the
        passive ones with a zero gradient)."""
        self._check_round(grad.round)
        out = self._embeddings()
        if grad.values.shape != (len(grad.runs),) + out.shape[1:] or not self._active[grad.runs].all():
            raise ProtocolError(
                f"client {self.index}: gradient of shape {grad.values.shape} for round {grad.round} "
                "does not match the embeddings it sent"
            )
        G = self._grad.get(out.shape[1])
        if G is None:
            G = self._grad[out.shape[1]] = np.zeros(out.shape, out.dtype)
        G[grad.runs] = grad.values / self.window if self.window > 1 else grad.values
        grads, _ = self.model.backward(self._acts, G, grad.runs)
        self.optimizer.step(grads, self._active)

    def _check_round(self, t: int) -> None:
        if t != self._round:
            raise ProtocolError(
                f"client {self.index}: message for round {t}, but it is at round {self._round}"
            )

    def write_back(self, clients: list[Client]) -> None:
        """Copy run k's model, optimiser state and input window into ``clients[k]``."""
        _write_back(self, clients, "inputs")


class StackResult(NamedTuple):
    """The server's predictions (K,) before learning and the gradients to send."""

    predictions: np.ndarray
    gradients: list[Gradient]


class ServerStack:
    """The server of K runs: the labels (shared) and K top models."""

    def __init__(self, servers: list[Server]):
        s0 = servers[0]
        self.K, self.n_clients, self.embedding, self.window = (
            len(servers),
            s0.n_clients,
            s0.embedding,
            s0.window,
        )
        self.model = MLPStack([s.model for s in servers])
        self.optimizer = make_optimizer_stack(self.model, [s.optimizer for s in servers])
        self.labels = RowWindow(self.window, 1, dtype=np.int64)
        self.labels.load_state_dict(s0.labels.state_dict())
        self._all = np.arange(self.K)
        self._learn = np.ones(self.K, dtype=bool)  # the server learns in every run, every round
        self._work: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    def query(self, t: int, client: int, runs: np.ndarray) -> Query:
        """The query a client that is passive in ``runs`` receives for round t."""
        return Query(t, client, min(self.labels.count + 1, self.window), runs)

    def on_embeddings(
        self, t: int, y: int, embeddings: list[list[Embedding]], active: list[np.ndarray]
    ) -> StackResult:
        """Predict and learn in every run; gradients for client m in the runs ``active[m]``."""
        self.labels.push(y)
        rows = min(self.labels.count, self.window)
        h, losses, g_logits = self._buffers(rows)
        self._stack(t, embeddings, h)
        logits, acts = self.model.forward(h)
        predictions = logits[:, -1].argmax(axis=1)
        stack_softmax_cross_entropy(logits, self.labels.rows()[:, 0], losses, g_logits)
        grads, g_h = self.model.backward(acts, g_logits, self._all, need_input_grad=True)
        if self.window > 1:  # F = (1/l) sum f: scale the server's own step, not the clients' rows
            for delta, _ in grads:
                delta[...] *= 1.0 / self.window
        self.optimizer.step(grads, self._learn)
        e = self.embedding
        out = [
            Gradient(t, m, g_h[runs, :, m * e : (m + 1) * e], runs)
            for m, runs in enumerate(active)
            if runs.size
        ]
        return StackResult(predictions, out)

    def _buffers(self, rows: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        work = self._work.get(rows)
        if work is None:
            dtype = self.model.layers[0].W.dtype
            n_out = self.model.sizes[-1]
            work = (np.empty((self.K, rows, self.model.n_in), dtype), np.empty((self.K, rows), np.float64),
                    np.empty((self.K, rows, n_out), dtype))
            self._work[rows] = work
        return work

    def _stack(self, t: int, embeddings: list[list[Embedding]], h: np.ndarray) -> None:
        """Copy each client's embeddings into its columns of ``h``; every (run, client) exactly once."""
        if len(embeddings) != self.n_clients:
            raise ProtocolError(
                f"round {t}: expected embeddings from {self.n_clients} clients, got {len(embeddings)}"
            )
        e, rows = self.embedding, h.shape[1]
        for m, msgs in enumerate(embeddings):
            seen = 0
            for msg in msgs:
                if msg.client != m or msg.round != t or msg.values.shape != (len(msg.runs), rows, e):
                    raise ProtocolError(
                        f"round {t}: embedding from client {msg.client} for round {msg.round} has "
                        f"shape {msg.values.shape}, expected ({len(msg.runs)}, {rows}, {e}) from client {m}"
                    )
                h[msg.runs, :, m * e:(m + 1) * e] = msg.values
                seen += len(msg.runs)
            if seen != self.K:
                raise ProtocolError(f"round {t}: client {m}'s embeddings cover {seen} of the {self.K} runs")

    def write_back(self, servers: list[Server]) -> None:
        """Copy run k's model, optimiser state and label window into ``servers[k]``."""
        _write_back(self, servers, "labels")
