"""The optimisers of K stacked runs (:mod:`fedstream.models.stack`): one kernel call per layer.

Each stacked kernel loops over the runs and calls the single-run kernel (:func:`low_rank_descent`,
:func:`dlr_layer_update`, :func:`dlr_deferred_update`) on run k's slices, so the update rule is the
one of :mod:`fedstream.optim.ogd` and :mod:`fedstream.optim.dlr`, not a second implementation.
Runs may differ in learning rate; they share the optimiser kind, window and alpha.

A stack is built from the K runs' own optimisers (their state is copied in, so a resumed run stacks
where it stopped) and writes its state back into them (:meth:`write_back`) for checkpoints.

numba's on-disk cache (``cache=True``) is keyed on this file only: after editing a kernel of
:mod:`fedstream.optim.dlr` or :mod:`fedstream.optim.ogd`, touch this file too (as
:mod:`fedstream.ovfl.fused_kernels` says), or the stacked runs keep the old machine code.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from fedstream.errors import ConfigError
from fedstream.models.stack import MLPStack, run_slice
from fedstream.optim.base import Optimizer
from fedstream.optim.dlr import DLR, dlr_deferred_update, dlr_layer_update
from fedstream.optim.ogd import OGD, low_rank_descent


@njit(cache=True, fastmath=True)
def stack_descent(W, b, D, X, runs, lrs):  # pragma: no cover (jit)
    """For each k in ``runs``: W[k] -= lrs[k] * D[k].T @ X[k],  b[k] -= lrs[k] * D[k].sum(0)."""
    for j in range(runs.shape[0]):
        k = runs[j]
        low_rank_descent(W[k], b[k], D[k], run_slice(X, k), lrs[k])


@njit(cache=True, fastmath=True)
def stack_dlr_running(
    W, b, S_W, S_b, U, V, pos, D, X, active, alpha, alpha_l, scales, zd, zx
):  # pragma: no cover
    """:func:`dlr_layer_update` for every run k: factors (D[k], X[k]) and step scales[k] if
    ``active[k]``, else a zero gradient (zd, zx) and no step (a passive round)."""
    for k in range(W.shape[0]):
        if active[k]:
            dlr_layer_update(
                W[k], b[k], S_W[k], S_b[k], U[k], V[k], pos, D[k], run_slice(X, k), alpha, alpha_l, scales[k]
            )
        else:
            dlr_layer_update(W[k], b[k], S_W[k], S_b[k], U[k], V[k], pos, zd, zx, alpha, alpha_l, 0.0)


@njit(cache=True, fastmath=True)
def stack_dlr_deferred(
    W, b, S_b, U, V, A, pos, D, X, active, alpha, alpha_l, scales, zd, zx
):  # pragma: no cover
    """:func:`dlr_deferred_update` for every run k, active or passive as in :func:`stack_dlr_running`."""
    for k in range(W.shape[0]):
        if active[k]:
            dlr_deferred_update(
                W[k], b[k], S_b[k], U[k], V[k], A[k], pos, D[k], run_slice(X, k), alpha, alpha_l, scales[k]
            )
        else:
            dlr_deferred_update(W[k], b[k], S_b[k], U[k], V[k], A[k], pos, zd, zx, alpha, alpha_l, 0.0)


class OptimizerStack:
    """Base: the K runs' learning rates and the model stack; ``step(grads, active)`` updates the
    runs flagged in ``active`` (a (K,) bool array); the others were passive this round."""

    def __init__(self, model: MLPStack, optimizers: list[Optimizer]):
        kinds = {type(o) for o in optimizers}
        if len(kinds) != 1:
            raise ConfigError(f"a stack needs one optimiser kind, got {sorted(k.__name__ for k in kinds)}")
        self.model = model
        self.lrs = np.array([o.lr for o in optimizers], dtype=np.float64)

    def step(self, grads: list, active: np.ndarray) -> None:
        raise NotImplementedError

    def write_back(self, optimizers: list[Optimizer]) -> None:
        """Copy run k's optimiser state into ``optimizers[k]``."""


class OGDStack(OptimizerStack):
    """OGD (and SLR's step): W[k] -= lr_k * delta[k].T @ inp[k] for the active runs."""

    def step(self, grads: list, active: np.ndarray) -> None:
        runs = np.flatnonzero(active)
        if runs.size:
            for layer, (D, X) in zip(self.model.layers, grads):
                stack_descent(layer.W, layer.b, D, X, runs, self.lrs)


class DLRStack(OptimizerStack):
    """DLR for K runs: stacked S_b, rank-one rings and S_W (running-sum layers) or shares A
    (deferred layers; the model stack's layers get them as their deferred terms)."""

    def __init__(self, model: MLPStack, optimizers: list[DLR]):
        super().__init__(model, optimizers)
        first = optimizers[0]
        for o in optimizers:
            if (o.window, o.alpha, o.pos, o.deferred_layers) != (
                first.window,
                first.alpha,
                first.pos,
                first.deferred_layers,
            ):
                raise ConfigError(
                    "DLR runs in one stack must share window, alpha, deferred layers and ring position"
                )
        self.alpha, self.alpha_l, self.pos, self.window = first.alpha, first.alpha_l, first.pos, first.window
        self.scales = self.lrs / first.norm
        self.S_b = [np.stack([o.S_b[i] for o in optimizers]) for i in range(len(model.layers))]
        self.ring_delta = [np.stack([o.ring_delta[i] for o in optimizers]) for i in range(len(model.layers))]
        self.ring_inp = [np.stack([o.ring_inp[i] for o in optimizers]) for i in range(len(model.layers))]
        self.S_W = [None if first.S_W[i] is None else np.stack([o.S_W[i] for o in optimizers])
                    for i in range(len(model.layers))]
        self.shares = [None if first.shares[i] is None else np.stack([o.shares[i] for o in optimizers])
                       for i in range(len(model.layers))]
        for i, layer in enumerate(model.layers):
            layer.deferred = (
                None if self.shares[i] is None else (self.ring_delta[i], self.ring_inp[i], self.shares[i])
            )
        self._zeros = [(np.zeros((1, l.W.shape[1]), l.W.dtype), np.zeros((1, l.W.shape[2]), l.W.dtype))
                       for l in model.layers]

    def step(self, grads: list, active: np.ndarray) -> None:
        """Every run pushes one entry: its gradient if active, a zero if passive (no step)."""
        p, a, al = self.pos, self.alpha, self.alpha_l
        for i, (layer, (D, X)) in enumerate(zip(self.model.layers, grads)):
            zd, zx = self._zeros[i]
            if self.shares[i] is not None:
                stack_dlr_deferred(
                    layer.W,
                    layer.b,
                    self.S_b[i],
                    self.ring_delta[i],
                    self.ring_inp[i],
                    self.shares[i],
                    p,
                    D,
                    X,
                    active,
                    a,
                    al,
                    self.scales,
                    zd,
                    zx,
                )
            else:
                stack_dlr_running(
                    layer.W,
                    layer.b,
                    self.S_W[i],
                    self.S_b[i],
                    self.ring_delta[i],
                    self.ring_inp[i],
                    p,
                    D,
                    X,
                    active,
                    a,
                    al,
                    self.scales,
                    zd,
                    zx,
                )
        self.pos = (p + 1) % self.window

    def write_back(self, optimizers: list[DLR]) -> None:
        for k, o in enumerate(optimizers):
            o.pos = self.pos
            for i in range(len(self.S_b)):
                o.S_b[i][...] = self.S_b[i][k]
                o.ring_delta[i][...] = self.ring_delta[i][k]
                o.ring_inp[i][...] = self.ring_inp[i][k]
                if self.S_W[i] is not None:
                    o.S_W[i][...] = self.S_W[i][k]
                else:
                    o.shares[i][...] = self.shares[i][k]


def make_optimizer_stack(model: MLPStack, optimizers: list[Optimizer]) -> OptimizerStack:
    """The stack of ``optimizers`` (all OGD, or all DLR of one window and alpha)."""
    if all(isinstance(o, DLR) for o in optimizers):
        return DLRStack(model, optimizers)  # type: ignore[arg-type]
    if all(type(o) is OGD for o in optimizers):
        return OGDStack(model, optimizers)
    raise ConfigError(f"cannot stack optimisers {sorted({type(o).__name__ for o in optimizers})}")
