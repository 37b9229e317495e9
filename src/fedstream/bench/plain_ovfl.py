"""The bench's reference: online VFL as a competent PyTorch user would write it from the paper.

Per-sample autograd, one ``nn.Sequential`` per party, every client activated (Full), written from
the paper's Algorithm 1 and eqs. (4)-(5): each round the clients compute their embeddings, the
server concatenates them, predicts, takes the cross-entropy loss and back-propagates to its
parameters and to the embeddings; each client back-propagates its embedding's gradient. The
optimiser is OGD (``w -= lr * g``) or DLR: each party keeps its last l gradients (one flat vector
per round, computed at that round's parameters) in a ring buffer and steps with
``(lr / W) sum_i alpha^i g_{t-i}``, ``W = sum_{i<l} alpha^i``; while the window fills, the missing
gradients are zeros and the divisor stays W (the online VFL paper's constant W, the warm-up noted
in docs/online-vfl.md).

It is not :mod:`fedstream.ovfl.reference` (the tests' oracle, which keeps l full gradient lists
and mirrors every activation policy); it is what the bench's ratio is taken against, and a test
checks it computes the engine's function (``tests/test_bench_plain_ovfl.py``).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F


def torch_party(model) -> torch.nn.Sequential:
    """A torch module with the layers, ReLUs and current weights of a :class:`fedstream.models.MLP`."""
    mods: list[torch.nn.Module] = []
    for layer in model.layers:
        lin = torch.nn.Linear(layer.W.shape[1], layer.W.shape[0])
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(np.array(layer.weight())))
            lin.bias.copy_(torch.from_numpy(np.array(layer.b)))
        mods += [lin, torch.nn.ReLU()] if layer.relu else [lin]
    return torch.nn.Sequential(*mods)


class PartyOptimizer:
    """OGD, or DLR over a ring of the party's last l flat gradients."""

    def __init__(self, params: list[torch.nn.Parameter], *, lr: float, window: int | None, alpha: float):
        self.params, self.lr = params, lr
        self.window = window
        if window is not None:
            size = sum(p.numel() for p in params)
            self.ring = torch.zeros(window, size)
            self.pos = 0
            self.decay = alpha ** torch.arange(window, dtype=torch.float32)  # alpha^age
            self.norm = float(self.decay.sum())

    @torch.no_grad()
    def step(self) -> None:
        if self.window is None:
            for p in self.params:
                p -= self.lr * p.grad
                p.grad = None
            return
        self.ring[self.pos] = torch.cat([p.grad.reshape(-1) for p in self.params])
        ages = (self.pos - torch.arange(self.window)) % self.window  # slot s: the gradient of age ages[s]
        smoothed = self.decay[ages] @ self.ring / self.norm
        self.pos = (self.pos + 1) % self.window
        offset = 0
        for p in self.params:
            n = p.numel()
            p -= self.lr * smoothed[offset:offset + n].view_as(p)
            p.grad = None
            offset += n


class PlainOnlineVFL:
    """The plain reference, started from the parameters of an engine run (:class:`OnlineVFL`)
    and playing its stream with every client activated."""

    def __init__(self, run):
        cfg = run.config
        self.run = run
        self.clients = [torch_party(c.model) for c in run.clients]
        self.server = torch_party(run.server.model)
        window = cfg["optimizer.window"] if cfg["optimizer.name"] == "dlr" else None
        if cfg["optimizer.name"] not in ("ogd", "dlr"):
            raise ValueError("the plain reference implements OGD and DLR")
        server_lr = cfg["optimizer.server_lr"] or cfg["optimizer.lr"]
        alpha = cfg["optimizer.alpha"]
        self.opts = [PartyOptimizer(list(c.parameters()), lr=cfg["optimizer.lr"], window=window, alpha=alpha)
                     for c in self.clients]
        self.opts.append(PartyOptimizer(list(self.server.parameters()), lr=server_lr, window=window,
                                        alpha=alpha))
        self.blocks = run.blocks
        self.t = 0
        self.predictions: list[int] = []

    def play(self, x: np.ndarray, y: int) -> int:
        """One round on sample ``x`` (all features) with label ``y``; the prediction before learning."""
        xt = torch.from_numpy(x).unsqueeze(0)
        hs = [client(xt[:, block]) for client, block in zip(self.clients, self.blocks)]
        h = torch.cat([hm.detach() for hm in hs], dim=1).requires_grad_()
        logits = self.server(h)
        loss = F.cross_entropy(logits, torch.tensor([y]))
        loss.backward()
        self.opts[-1].step()
        e = hs[0].shape[1]
        for m, hm in enumerate(hs):
            hm.backward(h.grad[:, m * e:(m + 1) * e])
            self.opts[m].step()
        return int(logits.argmax())

    def advance(self, rounds: int) -> None:
        """Play the next ``rounds`` rounds of the run's stream."""
        X, y, _ = self.run.stream.batch(self.t, rounds)
        for i in range(rounds):
            self.predictions.append(self.play(X[i], int(y[i])))
        self.t += rounds

    def parameters(self) -> dict[str, list[np.ndarray]]:
        """Each party's parameters ([W0, b0, W1, b1, ...]) as numpy arrays."""
        parties = {f"client{m}": c for m, c in enumerate(self.clients)} | {"server": self.server}
        return {name: [p.detach().numpy().copy() for p in mod.parameters()] for name, mod in parties.items()}
