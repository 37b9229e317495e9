"""The two roles of batch VFL (splitVFLc, the paper's section 3): clients and a server.

Parties exchange the typed messages of :mod:`fedstream.transport.messages` (rows = the batch) and never
see the transport; autograd stays inside a party. A client computes its embedding E and keeps the
graph until the server's dL/dE comes back; it then back-propagates exactly what it received
(eq. 4: grad theta = dL/dE * dE/dtheta, with dL/dE possibly quantised). The server concatenates
the embeddings it received (possibly sparsified or cache-filled), computes the cross-entropy, the
gradient of every embedding and its own update, all at the same (pre-update) parameters.

With participant selection only the selected clients send; the server stands in for the others
with its padding (:mod:`fedstream.selection.padding`: zero, running mean, latest, EMA of what each
client sent in training) and returns gradients to the senders only.

``device`` (:mod:`fedstream.runs.device`): where a party's model and batches live; the messages it
sends are CPU arrays, what it receives goes to its device.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from fedstream.errors import ProtocolError
from fedstream.selection.padding import Padding
from fedstream.transport.messages import Embedding, Gradient
from fedstream.vfl.settings import OPTIMIZERS


def make_optimizer(name: str, params, lr: float) -> torch.optim.Optimizer:
    """A party's optimiser over ``params``: ``name`` one of :data:`OPTIMIZERS`, plain SGD (the paper's)
    or Adam (torch's defaults beside ``lr``)."""
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr)
    raise ValueError(f"train.optimizer = {name!r}: expected one of {', '.join(OPTIMIZERS)}")


def set_mode(model: nn.Module, training: bool) -> None:
    """``model.train(training)`` unless the model is in that mode already (parties switch their
    whole model only, so its flag speaks for every submodule; the recursive switch costs ~90 µs a
    call on these small models, 8 % of an MNIST step when done every step)."""
    if model.training != training:
        model.train(training)


def _tensor(values: np.ndarray) -> torch.Tensor:
    """A float32 tensor owning a copy of received values (messages may be read-only views)."""
    return torch.from_numpy(np.array(values, dtype=np.float32))


class BatchClient:
    """Client ``index``: a bottom model over its strip of the features, trained by plain SGD (or
    ``optimizer``, one of :data:`OPTIMIZERS`)."""

    def __init__(self, index: int, model: nn.Module, lr: float, device: torch.device | None = None,
                 optimizer: str = "sgd"):
        self.index = index
        self.device = torch.device("cpu") if device is None else device
        self.model = model.to(self.device)
        self.optimizer = make_optimizer(optimizer, model.parameters(), lr)
        self._pending: tuple[int, torch.Tensor] | None = None  # (round, embedding with its graph)

    def embed(self, step: int, x: torch.Tensor) -> Embedding:
        """Training forward pass: the embedding to send; the graph is kept for :meth:`on_gradient`."""
        set_mode(self.model, True)
        out = self.model(x.to(self.device))
        self._pending = (step, out)
        return Embedding(step, self.index, out.detach().cpu().numpy())

    @property
    def pending_step(self) -> int | None:
        """The step whose embedding waits for its gradient (None: none waits)."""
        return None if self._pending is None else self._pending[0]

    def drop(self) -> None:
        """Forget the embedding waiting for its gradient (the step never happened)."""
        self._pending = None

    def infer(self, step: int, x: torch.Tensor) -> Embedding:
        """Evaluation forward pass (no graph, batch-norm in inference mode)."""
        set_mode(self.model, False)
        with torch.no_grad():
            return Embedding(step, self.index, self.model(x.to(self.device)).cpu().numpy())

    def on_gradient(self, grad: Gradient) -> None:
        """Back-propagate the received dL/dE through the kept graph and take one optimiser step."""
        if self._pending is None or grad.round != self._pending[0] or grad.client != self.index:
            want = None if self._pending is None else self._pending[0]
            raise ProtocolError(
                f"client {self.index}: gradient for round {grad.round} (client {grad.client}) "
                f"but the pending embedding is for round {want}"
            )
        _, out = self._pending
        if tuple(grad.values.shape) != tuple(out.shape):
            raise ProtocolError(
                f"client {self.index}: gradient of shape {grad.values.shape} for an embedding "
                f"of shape {tuple(out.shape)}"
            )
        self.optimizer.zero_grad(set_to_none=True)
        out.backward(_tensor(grad.values).to(self.device))
        self.optimizer.step()
        self._pending = None


class BatchServer:
    """The server: labels and the top model over the concatenated client embeddings.

    ``padding`` fills in the embedding of a client that did not send (None in the received list);
    without one every client must send. ``optimizer``: one of :data:`OPTIMIZERS` (plain SGD by default).
    """

    def __init__(
        self, model: nn.Module, n_clients: int, embedding: int, lr: float, padding: Padding | None = None,
        device: torch.device | None = None, optimizer: str = "sgd",
    ):
        self.device = torch.device("cpu") if device is None else device
        self.model = model.to(self.device)
        self.n_clients = n_clients
        self.embedding = embedding
        self.optimizer = make_optimizer(optimizer, model.parameters(), lr)
        self.padding = padding
        self.last_correct = 0  # correct predictions of the last training batch (before the update)

    def _received(self, step: int, embeddings: list[Embedding | None], rows: int) -> list[np.ndarray | None]:
        """Check the received embeddings (order, round, shape; None for a client that did not send)."""
        if len(embeddings) != self.n_clients:
            raise ProtocolError(f"server: expected {self.n_clients} embeddings, received {len(embeddings)} "
                                "(None stands for an unselected client)")
        if self.padding is None and any(e is None for e in embeddings):
            missing = [m for m, e in enumerate(embeddings) if e is None]
            raise ProtocolError(
                f"server: no embedding from client(s) {missing} and no padding to stand in for them"
            )
        if all(e is None for e in embeddings):
            raise ProtocolError(f"server: no client sent an embedding for round {step}")
        for m, e in enumerate(embeddings):
            if e is not None and (
                e.client != m or e.round != step or e.values.shape != (rows, self.embedding)
            ):
                raise ProtocolError(
                    f"server: expected client {m}'s embedding for round {step} of shape "
                    f"({rows}, {self.embedding}), received client {e.client}, round {e.round}, "
                    f"shape {e.values.shape}"
                )
        return [None if e is None else e.values for e in embeddings]

    def _inputs(self, values: list[np.ndarray | None], rows: int) -> list[torch.Tensor]:
        """Leaf tensors of the received values, padding where a client did not send."""
        return [
            (_tensor(self.padding.fill(m, rows)) if v is None else _tensor(v)).to(self.device)
            for m, v in enumerate(values)
        ]

    def train_step(
        self, step: int, embeddings: list[Embedding | None], labels: torch.Tensor
    ) -> tuple[float, list[Gradient]]:
        """Mean cross-entropy of the batch; one optimiser step; dL/dE for every client that sent."""
        values = self._received(step, embeddings, len(labels))
        inputs = self._inputs(values, len(labels))
        sent = [m for m, v in enumerate(values) if v is not None]
        for m in sent:
            inputs[m].requires_grad_()
        set_mode(self.model, True)
        logits = self.model(torch.cat(inputs, dim=1))
        labels = labels.to(self.device)
        loss = nn.functional.cross_entropy(logits, labels)
        self.last_correct = int((logits.detach().argmax(dim=1) == labels).sum())
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        if self.padding is not None:  # what the server saw this step stands in for the client later
            for m in sent:
                self.padding.update(m, values[m])
        return float(loss.detach()), [Gradient(step, m, inputs[m].grad.cpu().numpy()) for m in sent]

    def logits(self, step: int, embeddings: list[Embedding | None], rows: int) -> torch.Tensor:
        """Class scores (rows, classes), on the CPU, from the received embeddings (padding, but no
        padding update)."""
        inputs = self._inputs(self._received(step, embeddings, rows), rows)
        set_mode(self.model, False)
        with torch.no_grad():
            return self.model(torch.cat(inputs, dim=1)).cpu()

    def predict(self, step: int, embeddings: list[Embedding | None], rows: int) -> np.ndarray:
        """Predicted classes (rows,) from the received embeddings."""
        return self.logits(step, embeddings, rows).argmax(dim=1).numpy()
