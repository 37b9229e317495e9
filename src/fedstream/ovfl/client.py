"""The client party of event-driven online VFL (paper Algorithm 1, client procedure).

A client holds one block of features and a bottom model. Each round the environment hands it
its block (:meth:`observe`). If an event activated it, it sends its embedding (:meth:`on_event`),
later receives d loss / d embedding (:meth:`on_gradient`) and learns. If it is passive it only
answers the server's query (:meth:`on_query`) and pushes a zero into its optimiser's window.

With SLR (``window > 1``) the client keeps its last l inputs and sends l embeddings computed at
its current parameters (Algorithm 5); the gradient it gets back has l rows and it steps on their
mean.
"""

from __future__ import annotations

import numpy as np

from fedstream.errors import ProtocolError
from fedstream.models import MLP
from fedstream.optim import Optimizer
from fedstream.ovfl.messages import Embedding, Gradient, Query
from fedstream.ovfl.window import RowWindow
from fedstream.runs.state import collect, restore


class Client:
    """One feature-holding party."""

    def __init__(self, index: int, model: MLP, optimizer: Optimizer, *, window: int = 1):
        self.index = index
        self.model = model
        self.optimizer = optimizer
        self.window = window
        self.inputs = RowWindow(window, model.n_in)
        self._round = -1
        self._acts: list[np.ndarray] | None = None  # forward state kept for the backward pass

    def observe(self, t: int, x: np.ndarray) -> None:
        """Receive this round's feature block from the environment."""
        if x.shape != (self.model.n_in,):
            raise ProtocolError(
                f"client {self.index}: feature block has shape {x.shape}, "
                f"its model expects ({self.model.n_in},)"
            )
        self.inputs.push(x)
        self._round = t

    def _embed(self) -> Embedding:
        out, self._acts = self.model.forward(self.inputs.rows())
        return Embedding(round=self._round, client=self.index, values=out)

    def on_event(self, t: int) -> Embedding:
        """Activated by an event: send the embedding of this round's sample (and window)."""
        self._check_round(t)
        return self._embed()

    def on_query(self, query: Query) -> Embedding:
        """Passive: answer the server's query; no learning, a zero enters the DLR window."""
        self._check_round(query.round)
        msg = self._embed()
        if query.rows != msg.values.shape[0]:
            raise ProtocolError(
                f"client {self.index}: query for round {query.round} asks for {query.rows} rows, "
                f"its window holds {msg.values.shape[0]}"
            )
        self._acts = None
        self.optimizer.skip()
        return msg

    def on_gradient(self, grad: Gradient) -> None:
        """Back-propagate d loss / d embedding through the bottom model and take a step."""
        self._check_round(grad.round)
        if self._acts is None or grad.values.shape != self._acts[-1].shape:
            raise ProtocolError(
                f"client {self.index}: gradient of shape {grad.values.shape} for round {grad.round} "
                f"does not match the embedding it sent"
            )
        g = grad.values / self.window if self.window > 1 else grad.values
        grads, _ = self.model.backward(self._acts, g)
        self.optimizer.step(grads)
        self._acts = None

    def _check_round(self, t: int) -> None:
        if t != self._round:
            raise ProtocolError(
                f"client {self.index}: message for round {t}, but it is at round {self._round}"
            )

    def _parts(self) -> dict[str, object]:
        return {"model": self.model, "optim": self.optimizer, "inputs": self.inputs}

    def state_dict(self) -> dict[str, np.ndarray]:
        return collect(self._parts())

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        restore(self._parts(), state)
