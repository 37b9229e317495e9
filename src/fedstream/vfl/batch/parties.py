"""The two roles of batch VFL (splitVFLc, the paper's section 3): clients and a server.

Parties exchange the typed messages of :mod:`fedstream.vfl.messages` (rows = the batch) and never
see the transport; autograd stays inside a party. A client computes its embedding E and keeps the
graph until the server's dL/dE comes back; it then back-propagates exactly what it received
(eq. 4: grad theta = dL/dE * dE/dtheta, with dL/dE possibly quantised). The server concatenates
the embeddings it received (possibly sparsified or cache-filled), computes the cross-entropy, the
gradient of every embedding and its own update, all at the same (pre-update) parameters.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from fedstream.errors import ProtocolError
from fedstream.vfl.messages import Embedding, Gradient


def _tensor(values: np.ndarray) -> torch.Tensor:
    """A float32 tensor owning a copy of received values (messages may be read-only views)."""
    return torch.from_numpy(np.array(values, dtype=np.float32))


class BatchClient:
    """Client ``index``: a bottom model over its strip of the features, trained by plain SGD."""

    def __init__(self, index: int, model: nn.Module, lr: float):
        self.index = index
        self.model = model
        self.optimizer = torch.optim.SGD(model.parameters(), lr=lr)
        self._pending: tuple[int, torch.Tensor] | None = None  # (round, embedding with its graph)

    def embed(self, step: int, x: torch.Tensor) -> Embedding:
        """Training forward pass: the embedding to send; the graph is kept for :meth:`on_gradient`."""
        self.model.train()
        out = self.model(x)
        self._pending = (step, out)
        return Embedding(step, self.index, out.detach().numpy())

    def infer(self, step: int, x: torch.Tensor) -> Embedding:
        """Evaluation forward pass (no graph, batch-norm in inference mode)."""
        self.model.eval()
        with torch.no_grad():
            return Embedding(step, self.index, self.model(x).numpy())

    def on_gradient(self, grad: Gradient) -> None:
        """Back-propagate the received dL/dE through the kept graph and take one SGD step."""
        if self._pending is None or grad.round != self._pending[0] or grad.client != self.index:
            want = None if self._pending is None else self._pending[0]
            raise ProtocolError(f"client {self.index}: gradient for round {grad.round} (client {grad.client}) "
                                f"but the pending embedding is for round {want}")
        _, out = self._pending
        if tuple(grad.values.shape) != tuple(out.shape):
            raise ProtocolError(f"client {self.index}: gradient of shape {grad.values.shape} for an embedding "
                                f"of shape {tuple(out.shape)}")
        self.optimizer.zero_grad(set_to_none=True)
        out.backward(_tensor(grad.values))
        self.optimizer.step()
        self._pending = None


class BatchServer:
    """The server: labels and the top model over the concatenated client embeddings."""

    def __init__(self, model: nn.Module, n_clients: int, embedding: int, lr: float):
        self.model = model
        self.n_clients = n_clients
        self.embedding = embedding
        self.optimizer = torch.optim.SGD(model.parameters(), lr=lr)

    def _inputs(self, step: int, embeddings: list[Embedding], rows: int) -> list[torch.Tensor]:
        """Check the M received embeddings (order, round, shape) and make them leaf tensors."""
        if len(embeddings) != self.n_clients:
            raise ProtocolError(f"server: expected {self.n_clients} embeddings, received {len(embeddings)}")
        for m, e in enumerate(embeddings):
            if e.client != m or e.round != step or e.values.shape != (rows, self.embedding):
                raise ProtocolError(f"server: expected client {m}'s embedding for round {step} of shape "
                                    f"({rows}, {self.embedding}), received client {e.client}, round {e.round}, "
                                    f"shape {e.values.shape}")
        return [_tensor(e.values) for e in embeddings]

    def train_step(self, step: int, embeddings: list[Embedding], labels: torch.Tensor) -> tuple[float, list[Gradient]]:
        """Mean cross-entropy of the batch; one SGD step; dL/dE for every client."""
        inputs = [t.requires_grad_() for t in self._inputs(step, embeddings, len(labels))]
        self.model.train()
        loss = nn.functional.cross_entropy(self.model(torch.cat(inputs, dim=1)), labels)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        return float(loss.detach()), [Gradient(step, m, t.grad.numpy()) for m, t in enumerate(inputs)]

    def predict(self, step: int, embeddings: list[Embedding], rows: int) -> np.ndarray:
        """Predicted classes (rows,) from the received embeddings."""
        inputs = self._inputs(step, embeddings, rows)
        self.model.eval()
        with torch.no_grad():
            return self.model(torch.cat(inputs, dim=1)).argmax(dim=1).numpy()
