"""The client party of event-driven online VFL (paper Algorithm 1, client procedure).

A client holds one block of features and a bottom model. Each round the environment hands it
its block (:meth:`observe`). If an event activated it, it sends its embedding (:meth:`on_event`),
later receives d loss / d embedding (:meth:`on_gradient`) and learns. If it is passive it only
answers the server's query (:meth:`on_query`) and pushes a zero into its optimiser's window.

The same steps exist in a deferred form, for a node that answers a batch of events before their
gradients come back (:mod:`fedstream.deploy`): :meth:`embed` gives the embedding and a
:class:`Ticket` (the forward state of that event), :meth:`answer` a passive event's embedding,
and later :meth:`apply` (ticket, gradient) or :meth:`skip` learn, in round order. The simulator's
methods are the case of one event per request: ``on_event`` keeps its ticket, ``on_gradient``
applies it, ``on_query`` answers and skips at once.

With SLR (``window > 1``) the client keeps its last l inputs and sends l embeddings computed at
its current parameters (Algorithm 5); the gradient it gets back has l rows and it steps on their
mean.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedstream.errors import ProtocolError
from fedstream.models import MLP
from fedstream.optim import Optimizer
from fedstream.ovfl.window import RowWindow
from fedstream.runs.state import StateOfParts
from fedstream.transport.messages import Embedding, Gradient, Query


@dataclass
class Ticket:
    """What an activated event leaves behind until its gradient comes: its round and the forward
    state of the bottom model (for :meth:`Client.apply`)."""

    round: int
    acts: list[np.ndarray]


class Client(StateOfParts):
    """One feature-holding party."""

    def __init__(self, index: int, model: MLP, optimizer: Optimizer, *, window: int = 1):
        self.index = index
        self.model = model
        self.optimizer = optimizer
        self.window = window
        self.inputs = RowWindow(window, model.n_in)
        self._round = -1
        self._ticket: Ticket | None = None  # the activated event waiting for its gradient

    def observe(self, t: int, x: np.ndarray) -> None:
        """Receive this round's feature block from the environment."""
        if x.shape != (self.model.n_in,):
            raise ProtocolError(
                f"client {self.index}: feature block has shape {x.shape}, "
                f"its model expects ({self.model.n_in},)"
            )
        self.inputs.push(x)
        self._round = t

    @property
    def round(self) -> int:
        """The round of the last observation (-1 before the first)."""
        return self._round

    def embed(self, t: int, *, copy: bool = False) -> tuple[Embedding, Ticket]:
        """Activated by an event: the embedding of this round's sample (and window) and the ticket
        its gradient is applied with. ``copy``: the ticket owns its arrays (the model reuses its
        buffers, so a ticket kept past the next forward pass must be copied)."""
        self._check_round(t)
        out, acts = self.model.forward(self.inputs.rows())
        if copy:
            acts = [np.array(a, copy=True) for a in acts]
        return Embedding(round=t, client=self.index, values=out), Ticket(t, acts)

    def answer(self, query: Query) -> Embedding:
        """Passive: the embedding the server's query asks for; nothing is learnt (see :meth:`skip`)."""
        self._check_round(query.round)
        out, _ = self.model.forward(self.inputs.rows())
        if query.rows != out.shape[0]:
            raise ProtocolError(
                f"client {self.index}: query for round {query.round} asks for {query.rows} rows, "
                f"its window holds {out.shape[0]}"
            )
        return Embedding(round=query.round, client=self.index, values=out)

    def apply(self, ticket: Ticket, grad: Gradient) -> None:
        """Back-propagate d loss / d embedding through the forward state of ``ticket``; one step."""
        if grad.round != ticket.round or grad.values.shape != ticket.acts[-1].shape:
            raise ProtocolError(
                f"client {self.index}: gradient of shape {grad.values.shape} for round {grad.round} "
                f"does not match the embedding it sent"
            )
        g = grad.values / self.window if self.window > 1 else grad.values
        grads, _ = self.model.backward(ticket.acts, g)
        self.optimizer.step(grads)

    def skip(self) -> None:
        """A passive event (or one whose gradient was lost): a zero enters the optimiser's window."""
        self.optimizer.skip()

    def on_event(self, t: int) -> Embedding:
        """Activated by an event: send the embedding of this round's sample (and window)."""
        msg, self._ticket = self.embed(t)
        return msg

    def on_query(self, query: Query) -> Embedding:
        """Passive: answer the server's query; no learning, a zero enters the DLR window."""
        msg = self.answer(query)
        self._ticket = None
        self.skip()
        return msg

    def on_gradient(self, grad: Gradient) -> None:
        """Back-propagate d loss / d embedding through the bottom model and take a step."""
        self._check_round(grad.round)
        if self._ticket is None:
            raise ProtocolError(
                f"client {self.index}: gradient of shape {grad.values.shape} for round {grad.round} "
                f"does not match the embedding it sent"
            )
        self.apply(self._ticket, grad)
        self._ticket = None

    def _check_round(self, t: int) -> None:
        if t != self._round:
            raise ProtocolError(
                f"client {self.index}: message for round {t}, but it is at round {self._round}"
            )

    def _parts(self) -> dict[str, object]:
        return {"model": self.model, "optim": self.optimizer, "inputs": self.inputs}
