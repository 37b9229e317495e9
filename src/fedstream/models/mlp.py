"""A numpy multi-layer perceptron whose gradients come out as low-rank factors.

Why not autograd: in online VFL every round is one sample, so a framework's per-call overhead
dominates. A dense layer's gradient for a batch of n samples is ``dW = delta.T @ inp`` and
``db = delta.sum(0)``; we hand the optimiser the factors ``(delta, inp)`` instead of the matrix.
For one sample this is a rank-one gradient, which lets DLR keep its window of past gradients in
O(in + out) memory per entry (see :mod:`fedstream.optim.dlr`).

Initialisation follows PyTorch's ``nn.Linear`` default, U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for
weights and biases, so the plain PyTorch reference can start from the very same parameters.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from fedstream.errors import ConfigError
from fedstream.models.kernels import (
    deferred_input_grad,
    dense_backward,
    dense_forward,
    dense_forward_deferred,
    softmax_cross_entropy_into,
)

DTYPE = np.float32


class LayerGrad(NamedTuple):
    """Gradient of one dense layer as factors: dW = delta.T @ inp, db = delta.sum(axis=0).

    A named tuple: the backward pass makes one per layer per round, so it must be cheap to build.
    """

    delta: np.ndarray  # (n, out)
    inp: np.ndarray  # (n, in)

    def weight(self) -> np.ndarray:
        """The dense weight gradient (out, in); only for tests and reference code."""
        return self.delta.T @ self.inp

    def bias(self) -> np.ndarray:
        return self.delta.sum(axis=0)


@dataclass
class Deferred:
    """A low-rank weight update an optimiser has not folded into ``W`` yet.

    The layer's weight is ``W_eff = W - sum_s A[s] * outer(U[s], V[s])``. DLR uses this to keep
    its window as rank-one factors and touch W once per round, as OGD does
    (:mod:`fedstream.optim.dlr`). Forward and backward passes apply the r terms in
    O(r * (in + out)), so they always see ``W_eff``.
    """

    U: np.ndarray  # (r, out)
    V: np.ndarray  # (r, in)
    A: np.ndarray  # (r,)

    def matrix(self) -> np.ndarray:
        """sum_s A[s] * outer(U[s], V[s]) as a dense (out, in) matrix (tests, checkpoints)."""
        return (self.U * self.A[:, None]).T @ self.V


class Dense:
    """y = x @ W_eff.T + b, optionally followed by ReLU (W_eff = W unless an update is deferred)."""

    def __init__(self, n_in: int, n_out: int, *, relu: bool, rng: np.random.Generator):
        bound = 1.0 / np.sqrt(n_in)
        self.W = rng.uniform(-bound, bound, size=(n_out, n_in)).astype(DTYPE)
        self.b = rng.uniform(-bound, bound, size=(n_out,)).astype(DTYPE)
        self.relu = relu
        self.deferred: Deferred | None = None

    @property
    def shape(self) -> tuple[int, int]:
        return self.W.shape  # (out, in)

    def weight(self) -> np.ndarray:
        """The effective weight W_eff: ``W`` itself, or a new array when an update is deferred."""
        if self.deferred is None:
            return self.W
        return (self.W - self.deferred.matrix()).astype(self.W.dtype)


class MLP:
    """A stack of :class:`Dense` layers with forward and backward passes on 2-D batches."""

    def __init__(self, sizes: list[int], *, relu_last: bool, rng: np.random.Generator):
        if len(sizes) < 2 or min(sizes) < 1:
            raise ConfigError(f"model sizes must be >= 2 positive integers, got {sizes}")
        n = len(sizes) - 1
        self.layers = [
            Dense(sizes[i], sizes[i + 1], relu=(i < n - 1) or relu_last, rng=rng) for i in range(n)
        ]
        self.sizes = list(sizes)
        self._buffers: dict[int, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {}

    @property
    def n_in(self) -> int:
        return self.sizes[0]

    @property
    def n_out(self) -> int:
        return self.sizes[-1]

    @property
    def dtype(self) -> np.dtype:
        """The type of the weights (and of the rows the model reads)."""
        return self.layers[0].W.dtype

    def forward(self, x: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
        """Return the output (n, out) and the layer inputs/outputs needed by :meth:`backward`.

        Outputs live in buffers owned by the model and are overwritten by the next call: use (or
        copy) them before the next forward pass. Senders encode them at once, so this is safe.
        """
        n = x.shape[0]
        acts = [x]
        for layer, (out, _, _) in zip(self.layers, self._bufs(n)):
            d = layer.deferred
            if d is None:
                dense_forward(acts[-1], layer.W, layer.b, layer.relu, out)
            else:
                dense_forward_deferred(acts[-1], layer.W, layer.b, layer.relu, out, d.U, d.V, d.A)
            acts.append(out)
        return acts[-1], acts

    def backward(
        self, acts: list[np.ndarray], grad_out: np.ndarray, *, need_input_grad: bool = False
    ) -> tuple[list[LayerGrad], np.ndarray | None]:
        """Back-propagate ``grad_out`` (n, out); return per-layer factors and d(loss)/d(input)."""
        bufs = self._bufs(grad_out.shape[0])
        grads: list[LayerGrad] = [None] * len(self.layers)  # type: ignore[list-item]
        g = grad_out
        for k in range(len(self.layers) - 1, -1, -1):
            layer, (_, delta, grad_in) = self.layers[k], bufs[k]
            need = k > 0 or need_input_grad
            dense_backward(g, acts[k + 1], layer.W, layer.relu, delta, grad_in, need)
            if need and layer.deferred is not None:
                d = layer.deferred
                deferred_input_grad(delta, d.U, d.V, d.A, grad_in)
            grads[k] = LayerGrad(delta, acts[k])
            g = grad_in
        return grads, (g if need_input_grad else None)

    def _bufs(self, n: int) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Per-layer work buffers (out, delta, grad_in) for n rows, allocated once per distinct n."""
        bufs = self._buffers.get(n)
        if bufs is None:
            bufs = [
                (np.empty((n, l.W.shape[0]), DTYPE), np.empty((n, l.W.shape[0]), DTYPE),
                 np.empty((n, l.W.shape[1]), DTYPE))
                for l in self.layers
            ]
            self._buffers[n] = bufs
        return bufs

    # -- state -------------------------------------------------------------------------------
    def parameters(self) -> list[np.ndarray]:
        """The model's effective weights and biases in layer order: [W0, b0, W1, b1, ...].

        Read-only by contract: a layer with a deferred update returns a materialised copy.
        """
        out = []
        for layer in self.layers:
            out += [layer.weight(), layer.b]
        return out

    def _stored(self) -> list[np.ndarray]:
        """The arrays the model stores (W without deferred terms, which their optimiser keeps)."""
        out = []
        for layer in self.layers:
            out += [layer.W, layer.b]
        return out

    def state_dict(self) -> dict[str, np.ndarray]:
        return {f"p{i}": p.copy() for i, p in enumerate(self._stored())}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        for i, p in enumerate(self._stored()):
            p[...] = state[f"p{i}"]


def build_client_model(
    dataset: str, n_in: int, embedding: int, rng: np.random.Generator
) -> MLP:
    """The paper's client bottom model.

    Images: one layer n_in -> embedding with ReLU (section 5.1).
    HIGGS/SUSY: n_in -> 32 -> 64 -> 98 -> embedding (128 in the paper), ReLU after each hidden
    layer and none on the output layer (appendix D.2 says "after each hidden layer").
    """
    if dataset in ("higgs", "susy"):
        return MLP([n_in, 32, 64, 98, embedding], relu_last=False, rng=rng)
    return MLP([n_in, embedding], relu_last=True, rng=rng)


def build_server_model(dataset: str, n_in: int, n_classes: int, rng: np.random.Generator) -> MLP:
    """The paper's server top model: 256 ReLU -> classes (images); 256-128-64-32 -> 2 (HIGGS/SUSY)."""
    if dataset in ("higgs", "susy"):
        return MLP([n_in, 256, 128, 64, 32, n_classes], relu_last=False, rng=rng)
    return MLP([n_in, 256, n_classes], relu_last=False, rng=rng)


def softmax_cross_entropy(logits: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-sample cross-entropy losses (n,) and d(loss_i)/d(logits_i) (n, C), numerically stable."""
    losses = np.empty(len(y), np.float64)
    grad = np.empty(logits.shape, logits.dtype)
    softmax_cross_entropy_into(logits, np.asarray(y, np.int64), losses, grad)
    return losses, grad
