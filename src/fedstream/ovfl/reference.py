"""The plain, obviously-correct reference of online VFL: the oracle of the tests.

Per-sample PyTorch autograd, one module per party, and the optimisers written the textbook way:
DLR keeps its window as a list of the last l full gradients and sums them every round
(eq. 4/5); SLR recomputes the window loss at the current parameters (Algorithm 5). No transport,
no messages, no tricks. It starts from the parameters of an :class:`OnlineVFL` and plays the
same stream and activation draws, so tests can compare parameters and predictions round by round.
With ``topl`` activation, clients neither activated nor queried are replaced by the reference's own
padding of what they sent, and their optimisers do not advance; the rows of the rounds where every
client sent are shown to the policy, so its estimate (and the next chunks' masks) follow the engine's.
"""

from __future__ import annotations

from collections import deque

import numpy as np
import torch

from fedstream.ovfl.engine import CHUNK, OnlineVFL
from fedstream.ovfl.parties import server_lr
from fedstream.selection.padding import make_padding


def _torch_mlp(model) -> torch.nn.Sequential:
    """A torch copy of a :class:`fedstream.models.MLP` (same weights, same ReLUs)."""
    mods: list[torch.nn.Module] = []
    for layer in model.layers:
        lin = torch.nn.Linear(layer.W.shape[1], layer.W.shape[0])
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(layer.weight().copy()))
            lin.bias.copy_(torch.from_numpy(layer.b.copy()))
        mods += [lin, torch.nn.ReLU()] if layer.relu else [lin]
    return torch.nn.Sequential(*mods)


class PlainOptimizer:
    """OGD, or DLR with an explicit list of the last l gradients (zeros for passive rounds)."""

    def __init__(self, params: list[torch.nn.Parameter], *, name: str, lr: float, window: int, alpha: float):
        self.params, self.name, self.lr = params, name, lr
        self.window, self.alpha = window, alpha
        self.history: deque[list[torch.Tensor]] = deque(maxlen=window)

    def step(self, grads: list[torch.Tensor] | None) -> None:
        """``grads=None`` is a passive round: DLR records zeros, nothing is updated."""
        if self.name != "dlr":
            if grads is not None:
                with torch.no_grad():
                    for p, g in zip(self.params, grads):
                        p -= self.lr * g
            return
        self.history.appendleft([torch.zeros_like(p) for p in self.params] if grads is None else grads)
        if grads is None:
            return
        W = sum(self.alpha**i for i in range(self.window))
        with torch.no_grad():
            for k, p in enumerate(self.params):
                smoothed = sum(self.alpha**i * g[k] for i, g in enumerate(self.history)) / W
                p -= self.lr * smoothed


class ReferenceOnlineVFL:
    """Replays an :class:`OnlineVFL` configuration with plain per-sample autograd."""

    def __init__(self, engine: OnlineVFL):
        cfg = engine.config
        self.engine = engine
        self.name = cfg["optimizer.name"]
        self.window = cfg["optimizer.window"]
        kw = dict(name=self.name, window=self.window, alpha=cfg["optimizer.alpha"])
        self.clients = [_torch_mlp(c.model) for c in engine.clients]
        self.server = _torch_mlp(engine.server.model)
        self.client_opts = [
            PlainOptimizer(list(c.parameters()), lr=cfg["optimizer.lr"], **kw) for c in self.clients
        ]
        self.server_opt = PlainOptimizer(list(self.server.parameters()), lr=server_lr(cfg), **kw)
        self.inputs: list[deque] = [deque(maxlen=self.window) for _ in self.clients]
        self.labels: deque = deque(maxlen=self.window)
        self.predictions: list[int] = []
        self.padding = None
        if hasattr(engine.activation, "fill"):  # topl: unqueried clients are padded
            ema = {"alpha": 0.1} if cfg["activation.padding"] == "ema" else {}
            self.padding = make_padding(
                cfg["activation.padding"], len(self.clients), cfg["model.embedding"], **ema
            )

    def run(self, rounds: int) -> ReferenceOnlineVFL:
        eng = self.engine
        for t in range(rounds):
            chunk, j = divmod(t, CHUNK)
            if j == 0:
                X, y, _ = eng.stream.batch(chunk * CHUNK, CHUNK)
                blocks, mask = eng.chunk_inputs(chunk, X)  # the same data and activation draws
                queried = eng.activation.queried(mask)
            asked = mask[j] | (True if queried is None else queried[j])
            self.play([torch.from_numpy(b[j].copy()) for b in blocks], int(y[j]), mask[j], asked)
            if j == CHUNK - 1:  # as the engine: a complete chunk is shown to the policy once
                eng.activation.observe(blocks, y)
        return self

    def play(
        self, blocks: list[torch.Tensor], y: int, active: np.ndarray, asked: np.ndarray | None = None
    ) -> None:
        """One round; ``asked[m]`` False: client m is not part of it (padded, no optimiser step)."""
        asked = np.ones(len(self.clients), dtype=bool) if asked is None else asked
        slr = self.name == "slr"
        for q, x in zip(self.inputs, blocks):
            q.append(x)
        self.labels.append(y)
        # clients: embeddings of this sample (or of the window, for SLR) at current parameters
        emb = [c(torch.stack(list(q) if slr else [q[-1]])) for c, q in zip(self.clients, self.inputs)]
        if self.padding is not None:
            for m in np.flatnonzero(asked):
                self.padding.update(int(m), emb[m][-1].detach().numpy())
            emb = [e if asked[m] else torch.from_numpy(self.padding.fill(m, e.shape[0]).astype(np.float32))
                   for m, e in enumerate(emb)]
            if asked.all():
                self.engine.activation.received(y, torch.cat([e[-1] for e in emb]).detach().numpy(), asked)
        h = [e.detach().requires_grad_(True) for e in emb]
        logits = self.server(torch.cat(h, dim=1))
        self.predictions.append(int(logits[-1].argmax()))
        ys = torch.tensor(list(self.labels) if slr else [y])
        losses = torch.nn.functional.cross_entropy(logits, ys, reduction="none")
        loss = losses.sum() / self.window if slr else losses.sum()
        grads = torch.autograd.grad(loss, list(self.server.parameters()) + h)
        n_server = len(list(self.server.parameters()))
        self.server_opt.step(list(grads[:n_server]))
        for m, (client, e, v) in enumerate(zip(self.clients, emb, grads[n_server:])):
            if not active[m]:
                if asked[m]:
                    self.client_opts[m].step(None)
                continue
            # the server sends d f / d h per sample; SLR's client averages over its window
            v = v * self.window if slr else v
            surrogate = (e * v).sum() / self.window if slr else (e * v).sum()
            self.client_opts[m].step(list(torch.autograd.grad(surrogate, list(client.parameters()))))

    def parameters(self) -> dict[str, list[np.ndarray]]:
        """Parameters as numpy arrays, laid out like ``MLP.parameters()``."""
        out = {"server": [p.detach().numpy().copy() for p in self.server.parameters()]}
        for m, c in enumerate(self.clients):
            out[f"client{m}"] = [p.detach().numpy().copy() for p in c.parameters()]
        return out
