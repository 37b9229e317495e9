"""Online VFL parties on PyTorch modules: ``model.backend = "torch"`` (any model, not only MLPs).

The compiled engine's parties (:class:`~fedstream.ovfl.client.Client`, :class:`~fedstream.ovfl.server.Server`)
run fedstream's MLPs with hand-written backward passes and fused optimiser kernels. These run any
``torch.nn.Module`` with autograd and speak the very same messages, so the simulator's message path,
compression, activation policies (topl's padding included), checkpoints and deployments run them
unchanged; only the fused loop (``simulator.path = "auto"``'s fast path) and ``--stack`` need the
compiled MLPs and are not used.

* :class:`TorchModel` gives a module the interface the rest of online VFL reads of a party's model:
  ``n_in``, ``n_out``, ``parameters()`` (numpy views, for the divergence checks and digests),
  ``forward(x)`` on numpy rows (inference), ``state_dict`` / ``load_state_dict`` of numpy arrays.
* :class:`WindowOptimizer`: the update rules of the compiled ones, written on flat gradients:
  OGD and SLR ``w -= lr g``; DLR ``w -= (lr / W) sum_i alpha^i g_{t-i}`` over a ring of the last l
  gradients, a passive round pushing a zero and taking no step (:mod:`fedstream.optim.dlr`).
* :class:`TorchClient` and :class:`TorchServer` are the parties; SLR's windows, scalings and the
  server's prediction before its update are those of the compiled parties.

The models are the factories' (``model.client``, ``model.server``, :mod:`fedstream.own_models`), or
without them torch copies of the built-in MLPs with the compiled engine's initial weights, so that
the same config gives the same errors on both backends to within float rounding (tests).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from fedstream.errors import ProtocolError
from fedstream.ovfl.client import Client, Ticket
from fedstream.ovfl.server import RoundResult, Server
from fedstream.ovfl.window import RowWindow
from fedstream.transport.messages import Embedding, Gradient, Query


class TorchModel:
    """A ``torch.nn.Module`` party model with the compiled MLP's reading interface (module doc)."""

    dtype = np.float32

    def __init__(self, module: torch.nn.Module, n_in: int, n_out: int):
        self.module, self.n_in, self.n_out = module, n_in, n_out
        self.params = list(module.parameters())

    def parameters(self) -> list[np.ndarray]:
        return [p.detach().numpy() for p in self.params]

    def forward(self, x: np.ndarray) -> tuple[np.ndarray, list]:
        """Outputs (n, n_out) of numpy rows (n, n_in), without gradient; the second item is empty."""
        with torch.no_grad():
            return self.module(torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))).numpy(), []

    def state_dict(self) -> dict[str, np.ndarray]:
        return {k: v.detach().cpu().numpy().copy() for k, v in self.module.state_dict().items()}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        self.module.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in state.items()}, strict=True)


def torch_mlp(model) -> torch.nn.Sequential:
    """A torch module with the layers, ReLUs and current weights of a compiled
    :class:`fedstream.models.MLP`."""
    mods: list[torch.nn.Module] = []
    for layer in model.layers:
        lin = torch.nn.Linear(layer.W.shape[1], layer.W.shape[0])
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(np.array(layer.weight(), dtype=np.float32)))
            lin.bias.copy_(torch.from_numpy(np.array(layer.b, dtype=np.float32)))
        mods += [lin, torch.nn.ReLU()] if layer.relu else [lin]
    return torch.nn.Sequential(*mods)


class WindowOptimizer:
    """OGD / SLR (``window`` None) or DLR over a ring of the last ``window`` flat gradients."""

    def __init__(self, params: list[torch.nn.Parameter], *, lr: float, window: int | None = None,
                 alpha: float = 1.0):
        self.params, self.lr, self.window = params, lr, window
        if window is not None:
            self.ring = torch.zeros(window, sum(p.numel() for p in params))
            self.pos = 0
            self.decay = alpha ** torch.arange(window, dtype=torch.float64)  # alpha^age
            self.scale = lr / float(self.decay.sum())
            self.decay = self.decay.float()

    @torch.no_grad()
    def step(self, grads: list[torch.Tensor]) -> None:
        if self.window is None:
            for p, g in zip(self.params, grads):
                p -= self.lr * g
            return
        self.ring[self.pos] = torch.cat([g.reshape(-1) for g in grads])
        ages = (self.pos - torch.arange(self.window)) % self.window  # slot s: the gradient of age ages[s]
        smoothed = (self.decay[ages] @ self.ring) * self.scale
        self.pos = (self.pos + 1) % self.window
        offset = 0
        for p in self.params:
            n = p.numel()
            p -= smoothed[offset:offset + n].view_as(p)
            offset += n

    def skip(self) -> None:
        """A passive round: DLR pushes a zero gradient and takes no step; OGD does nothing."""
        if self.window is not None:
            self.ring[self.pos] = 0.0
            self.pos = (self.pos + 1) % self.window

    def state_dict(self) -> dict[str, np.ndarray]:
        if self.window is None:
            return {}
        return {"ring": self.ring.numpy().copy(), "pos": np.array(self.pos)}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        if self.window is not None:
            self.ring[...] = torch.from_numpy(np.array(state["ring"]))
            self.pos = int(state["pos"])


class TorchClient(Client):
    """A feature-holding party on a torch module (the protocol of :class:`~fedstream.ovfl.client.Client`)."""

    def __init__(self, index: int, model: TorchModel, optimizer: WindowOptimizer, *, window: int = 1):
        self.index, self.model, self.optimizer, self.window = index, model, optimizer, window
        self.inputs = RowWindow(window, model.n_in)
        self._round = -1
        self._ticket = None
        self.steps = 0  # optimiser steps taken
        self._live: tuple[int, int, torch.Tensor] | None = None  # (round, steps, output with its graph)

    def observe(self, t: int, x: np.ndarray) -> None:
        if x.shape != (self.model.n_in,):
            raise ProtocolError(f"client {self.index}: feature block has shape {x.shape}, its model expects "
                                f"({self.model.n_in},)")
        self.inputs.push(x)
        self._round = t

    def embed(self, t: int, *, copy: bool = False) -> tuple[Embedding, Ticket]:
        """The embedding and a ticket holding the input rows and the output, as arrays (a deployed node
        saves them between requests); the output's graph is kept beside for :meth:`apply`."""
        self._check_round(t)
        x = np.array(self.inputs.rows(), dtype=np.float32)
        self.model.module.train()
        out = self.model.module(torch.from_numpy(x))
        self._live = (t, self.steps, out)
        values = out.detach().numpy()
        return Embedding(round=t, client=self.index, values=values), Ticket(t, [x, values])

    def answer(self, query: Query) -> Embedding:
        self._check_round(query.round)
        self.model.module.train()
        out, _ = self.model.forward(self.inputs.rows())
        if query.rows != out.shape[0]:
            raise ProtocolError(f"client {self.index}: query for round {query.round} asks for {query.rows} "
                                f"rows, its window holds {out.shape[0]}")
        return Embedding(round=query.round, client=self.index, values=out)

    def apply(self, ticket: Ticket, grad: Gradient) -> None:
        """Back-propagate d loss / d embedding through the ticket's output and step. The graph kept by
        :meth:`embed` serves when no step came between; otherwise (a node answering B > 1 events
        ahead, ``network.batch``, or rebuilt from its saved state) the output is recomputed from the
        ticket's rows at the current weights: torch cannot differentiate a graph whose weights changed."""
        if grad.round != ticket.round or grad.values.shape != ticket.acts[-1].shape:
            raise ProtocolError(f"client {self.index}: gradient of shape {grad.values.shape} for round "
                                f"{grad.round} does not match the embedding it sent")
        live = self._live
        if live is not None and live[:2] == (ticket.round, self.steps):
            out = live[2]
        else:
            self.model.module.train()
            out = self.model.module(torch.from_numpy(np.array(ticket.acts[0], dtype=np.float32)))
        self._live = None
        g = grad.values / self.window if self.window > 1 else grad.values
        grads = torch.autograd.grad(out, self.model.params, torch.from_numpy(np.array(g, dtype=np.float32)),
                                    allow_unused=True)
        self.optimizer.step([torch.zeros_like(p) if d is None else d
                             for p, d in zip(self.model.params, grads)])
        self.steps += 1


class TorchServer(Server):
    """The label-holding party on a torch module (the protocol of :class:`~fedstream.ovfl.server.Server`)."""

    def __init__(self, model: TorchModel, optimizer: WindowOptimizer, *, n_clients: int, embedding: int,
                 window: int = 1):
        if model.n_in != n_clients * embedding:
            raise ProtocolError(f"server model takes {model.n_in} inputs but {n_clients} clients x "
                                f"{embedding} embedding = {n_clients * embedding}")
        self.model, self.optimizer = model, optimizer
        self.n_clients, self.embedding, self.window = n_clients, embedding, window
        self.labels = RowWindow(window, 1, dtype=np.int64)
        self.stand_in = None
        self._padded: list[int] = []

    def on_embeddings(self, t: int, y: int, embeddings: list[Embedding], active: list[int]) -> RoundResult:
        """Predict (before learning), learn from label ``y``, return gradients for the ``active`` clients."""
        self.labels.push(y)
        h = np.empty((min(self.labels.count, self.window), self.model.n_in), np.float32)
        self._stack(t, embeddings, h)
        self.tell_stand_in(y, h[-1])
        ht = torch.from_numpy(h).requires_grad_()
        self.model.module.train()
        logits = self.model.module(ht)
        prediction = int(logits[-1].argmax())
        loss = F.cross_entropy(logits, torch.from_numpy(self.labels.rows()[:, 0]), reduction="sum")
        *grads, g_h = torch.autograd.grad(loss, [*self.model.params, ht], allow_unused=True)
        grads = [torch.zeros_like(p) if g is None else g for p, g in zip(self.model.params, grads)]
        if self.window > 1:  # F = (1/l) sum f: the server's own step on the mean, the clients' rows unscaled
            grads = [g / self.window for g in grads]
        self.optimizer.step(grads)
        e, g_h = self.embedding, g_h.numpy()
        return RoundResult(prediction, [Gradient(t, m, g_h[:, m * e:(m + 1) * e]) for m in active])
