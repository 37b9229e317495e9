"""K models of the same shape stored as one stack, for K online VFL runs advanced together.

Why: a round of one run costs ~15 µs of arithmetic but several times that in Python (party methods,
kernel dispatch, message encoding). When K runs share a stream (a paper table: optimisers x
activations x learning rates), a party can hold the K runs' models of its role as stacked arrays
``W[k]`` (K, out, in) and make one kernel call per layer per round for all of them. Each stacked
kernel is a loop over the runs calling the single-run kernel of :mod:`fedstream.models.kernels` on
run k's slices, so a stacked run computes exactly what the run alone computes (tests compare them).

Layer inputs are stacked too, (K, n, in), except a client's first layer, whose input is the shared
feature block: an input with a leading axis of 1 is used by every run (``run_slice``).

numba's on-disk cache (``cache=True``) is keyed on this file only: after editing a kernel of
:mod:`fedstream.models.kernels`, touch this file too, or the stacked runs keep the old machine code.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from fedstream.errors import ConfigError
from fedstream.models.kernels import (
    deferred_input_grad,
    dense_backward,
    dense_forward,
    dense_forward_deferred,
    softmax_cross_entropy_into,
)
from fedstream.models.mlp import DTYPE, MLP


@njit(cache=True)
def run_slice(X, k):  # pragma: no cover (jit)
    """Run k's slice of a stacked input, or the one shared slice when X has a leading axis of 1."""
    return X[k] if X.shape[0] > 1 else X[0]


@njit(cache=True, fastmath=True)
def stack_forward(X, W, b, relu, out):  # pragma: no cover (jit)
    """out[k] = X[k] @ W[k].T + b[k] (then ReLU) for every run k (X[0] if shared)."""
    for k in range(W.shape[0]):
        dense_forward(run_slice(X, k), W[k], b[k], relu, out[k])


@njit(cache=True, fastmath=True)
def stack_forward_deferred(X, W, b, relu, out, U, V, A):  # pragma: no cover (jit)
    """As :func:`stack_forward` with W_eff[k] = W[k] - sum_s A[k, s] outer(U[k, s], V[k, s])."""
    for k in range(W.shape[0]):
        dense_forward_deferred(run_slice(X, k), W[k], b[k], relu, out[k], U[k], V[k], A[k])


@njit(cache=True, fastmath=True)
def stack_backward(G, Z, W, relu, delta, grad_in, need_input_grad, runs):  # pragma: no cover (jit)
    """For each k in ``runs``: delta[k] = G[k] * (Z[k] > 0 if relu), grad_in[k] = delta[k] @ W[k]."""
    for j in range(runs.shape[0]):
        k = runs[j]
        dense_backward(G[k], Z[k], W[k], relu, delta[k], grad_in[k], need_input_grad)


@njit(cache=True, fastmath=True)
def stack_deferred_input_grad(delta, U, V, A, grad_in, runs):  # pragma: no cover (jit)
    """For each k in ``runs``: grad_in[k] -= delta[k] @ sum_s A[k, s] outer(U[k, s], V[k, s])."""
    for j in range(runs.shape[0]):
        k = runs[j]
        deferred_input_grad(delta[k], U[k], V[k], A[k], grad_in[k])


@njit(cache=True)
def stack_softmax_cross_entropy(logits, y, losses, grad):  # pragma: no cover (jit)
    """Per run k and row: losses[k] = logsumexp(z) - z[y], grad[k] = softmax(z) - onehot(y)."""
    for k in range(logits.shape[0]):
        softmax_cross_entropy_into(logits[k], y, losses[k], grad[k])


class StackedLayer:
    """One dense layer of K runs: W (K, out, in), b (K, out); ``deferred`` = (U, V, A) stacked
    (see :class:`fedstream.models.mlp.Deferred`) when the runs' optimiser defers this layer."""

    def __init__(self, W: np.ndarray, b: np.ndarray, relu: bool):
        self.W, self.b, self.relu = W, b, relu
        self.deferred: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None


class MLPStack:
    """The same-shaped MLPs of K runs as stacked layers, with forward/backward over all runs."""

    def __init__(self, models: list[MLP]):
        if not models:
            raise ConfigError("a model stack needs at least one model")
        sizes = models[0].sizes
        for i, m in enumerate(models):
            if m.sizes != sizes or [l.relu for l in m.layers] != [l.relu for l in models[0].layers]:
                raise ConfigError(f"run {i}'s model has sizes {m.sizes}, the stack's first has {sizes}")
        self.sizes, self.K = list(sizes), len(models)
        self.layers = [
            StackedLayer(
                np.stack([m.layers[i].W for m in models]),
                np.stack([m.layers[i].b for m in models]),
                layer.relu,
            )
            for i, layer in enumerate(models[0].layers)
        ]
        self._buffers: dict[int, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {}

    @property
    def n_in(self) -> int:
        return self.sizes[0]

    def write_back(self, models: list[MLP]) -> None:
        """Copy run k's stored weights into ``models[k]`` (checkpoints, summaries)."""
        for k, m in enumerate(models):
            for layer, stacked in zip(m.layers, self.layers):
                layer.W[...] = stacked.W[k]
                layer.b[...] = stacked.b[k]

    def forward(self, x: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
        """x (1 or K, n, in) -> output (K, n, out) and the activations for :meth:`backward`.

        Outputs live in buffers owned by the stack and are overwritten by the next call."""
        acts = [x]
        for layer, (out, _, _) in zip(self.layers, self.layer_buffers(x.shape[1])):
            if layer.deferred is None:
                stack_forward(acts[-1], layer.W, layer.b, layer.relu, out)
            else:
                stack_forward_deferred(acts[-1], layer.W, layer.b, layer.relu, out, *layer.deferred)
            acts.append(out)
        return acts[-1], acts

    def backward(
        self, acts: list[np.ndarray], grad_out: np.ndarray, runs: np.ndarray, *, need_input_grad: bool = False
    ) -> tuple[list[tuple[np.ndarray, np.ndarray]], np.ndarray | None]:
        """Back-propagate ``grad_out`` (K, n, out; rows of ``runs`` only) for the runs ``runs``.

        Returns per layer the stacked factors (delta (K, n, out), inp (1 or K, n, in)), valid for
        ``runs``, and d loss / d input (K, n, in) if asked."""
        bufs = self.layer_buffers(grad_out.shape[1])
        grads: list = [None] * len(self.layers)
        g = grad_out
        for i in range(len(self.layers) - 1, -1, -1):
            layer, (_, delta, grad_in) = self.layers[i], bufs[i]
            need = i > 0 or need_input_grad
            stack_backward(g, acts[i + 1], layer.W, layer.relu, delta, grad_in, need, runs)
            if need and layer.deferred is not None:
                stack_deferred_input_grad(delta, *layer.deferred, grad_in, runs)
            grads[i] = (delta, acts[i])
            g = grad_in
        return grads, (g if need_input_grad else None)

    def layer_buffers(self, n: int) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Per-layer (out, delta, grad_in) buffers for n rows and K runs, allocated once per n."""
        bufs = self._buffers.get(n)
        if bufs is None:
            K = self.K
            bufs = [(np.zeros((K, n, l.W.shape[1]), DTYPE), np.zeros((K, n, l.W.shape[1]), DTYPE),
                     np.zeros((K, n, l.W.shape[2]), DTYPE)) for l in self.layers]
            self._buffers[n] = bufs
        return bufs
