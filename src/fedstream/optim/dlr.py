"""Dynamic local regret (DLR): gradient descent on an exponentially weighted window.

The update of paper eqs. (2), (4), (5):

    S_t = sum_{i=0}^{l-1} alpha^i g_{t-i},      w_{t+1} = w_t - (lr / W) S_t,    W = sum_{i<l} alpha^i

where g_{t-i} is the gradient computed at its own past iterate (never recomputed) and a passive
round contributes g = 0 and takes no step. Warm-up choice: before l gradients exist the missing
ones count as zeros and we still divide by the full W (the online VFL paper's constant W).

A one-sample dense-layer gradient is rank one, ``outer(d, x)``, so the window is a ring of l factor
pairs (l x (in + out) numbers), never l matrices. Two exact ways to apply it, chosen per layer:

* **running sum** (:func:`dlr_layer_update`): keep S as a matrix, ``S_t = alpha S_{t-1} + g_t -
  alpha^l g_{t-l}``, then ``W -= (lr/W) S_t``. O(in*out) per round but it reads and writes two
  matrices, twice OGD's memory traffic.
* **deferred** (:func:`dlr_deferred_update`): each ring entry s carries the share A_s of its
  gradient applied so far; the model's weight is ``W_eff = W - sum_s A_s outer(d_s, x_s)``
  (:class:`fedstream.models.Deferred`). A step adds ``(lr/W) alpha^age`` to every A_s: O(l). When an
  entry leaves the window its share is final and is folded into W, one rank-one update, the
  cost of an OGD step. Forward and backward passes pay O(l (in + out)) for the deferred terms, so
  this wins when l (in + out) is small against in * out (big layers, moderate windows).

The plain version that stores l full matrices and sums them is the oracle of
:mod:`fedstream.ovfl.reference`; tests check that both ways agree with it.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from fedstream.errors import ConfigError, ProtocolError
from fedstream.models import MLP, Deferred, LayerGrad
from fedstream.optim.base import Optimizer

DEFER_COST = 4.0
"""A layer is deferred when ``DEFER_COST * l * (in + out) <= in * out``: the deferred terms cost
about l (in + out) multiply-adds in each of the forward pass, the input gradient and the step,
while the running sum saves nothing on the forward pass but doubles the step's memory traffic.
``fedstream bench ovfl --forms`` times both forms per layer beside this choice (docs/online-vfl.md,
"DLR at long windows"): on the paper model the choice is the cheaper form at l = 10, 100 and 150;
the measured crossovers are higher (clients' 196 -> 64 about l = 45, server's 256 -> 256 about
l = 90, against 12 and 32 here). A value in (0.97, 4.8] keeps the l = 10 choice, and so the paper
tables' results; any change alters the runs whose choice moves and refuses their checkpoints."""


@njit(cache=True, fastmath=True)
def dlr_layer_update(W, b, S_W, S_b, U, V, pos, D, X, alpha, alpha_l, scale):  # pragma: no cover (jit)
    """One DLR round of a dense layer, fused into a single pass over W and S_W; with
    (d, x) = (D[0], X[0]) the newest factors and (old_d, old_x) = (U[pos], V[pos]) the leaving ones:

        S_W <- alpha * S_W + outer(d, x) - alpha^l * outer(old_d, old_x)
        S_b <- alpha * S_b + d - alpha^l * old_d
        W   <- W - scale * S_W,   b <- b - scale * S_b        (not done when scale == 0)

    then the ring slot pos takes (d, x). ``d = 0`` with ``scale = 0`` is a passive round.
    W, S_W are (out, in), U (l, out), V (l, in), D (1, out), X (1, in). Scalars are cast to the
    arrays' dtype so the inner loop stays in one precision and vectorises.
    """
    d, x, old_d, old_x = D[0], X[0], U[pos], V[pos]
    dt = W.dtype.type
    a, al, sc = dt(alpha), dt(alpha_l), dt(scale)
    n_out, n_in = W.shape
    for i in range(n_out):
        di, odi = d[i], al * old_d[i]
        S_i, W_i = S_W[i], W[i]
        if sc != 0:
            for j in range(n_in):
                s = a * S_i[j] + di * x[j] - odi * old_x[j]
                S_i[j] = s
                W_i[j] -= sc * s
        else:
            for j in range(n_in):
                S_i[j] = a * S_i[j] + di * x[j] - odi * old_x[j]
        S_b[i] = a * S_b[i] + di - odi
        if sc != 0:
            b[i] -= sc * S_b[i]
    for j in range(n_in):  # element loops, not old_x[:] = x: no shape check to compile (see fused_kernels)
        old_x[j] = x[j]
    for i in range(n_out):
        old_d[i] = d[i]


@njit(cache=True, fastmath=True)
def dlr_deferred_update(W, b, S_b, U, V, A, pos, D, X, alpha, alpha_l, scale):  # pragma: no cover (jit)
    """One DLR round of a layer whose weight is W_eff = W - sum_s A[s] outer(U[s], V[s]):

        W    <- W - A[pos] * outer(U[pos], V[pos])      (the leaving entry's share is final)
        S_b  <- alpha * S_b + d - alpha^l * U[pos];  b <- b - scale * S_b   (bias: running sum)
        (U[pos], V[pos], A[pos]) <- (d, x, 0)           (the newest entry enters)
        A[(pos - i) mod l] += scale * alpha^i  for i < l   (the step: W_eff -= scale * S_t)

    with (d, x) = (D[0], X[0]). ``d = 0`` with ``scale = 0`` is a passive round. U (l, out),
    V (l, in), A (l,), D (1, out), X (1, in).
    """
    d, x = D[0], X[0]
    dt = W.dtype.type
    a, al, sc = dt(alpha), dt(alpha_l), dt(scale)
    n_out, n_in = W.shape
    share = A[pos]
    old_d, old_x = U[pos], V[pos]
    for i in range(n_out):
        g = share * old_d[i]
        if g != 0:
            W_i = W[i]
            for j in range(n_in):
                W_i[j] -= g * old_x[j]
        S_b[i] = a * S_b[i] + d[i] - al * old_d[i]
        if sc != 0:
            b[i] -= sc * S_b[i]
    for i in range(n_out):
        old_d[i] = d[i]
    for j in range(n_in):
        old_x[j] = x[j]
    A[pos] = 0
    if sc != 0:
        length = A.shape[0]
        w = sc
        for age in range(length):
            A[(pos - age) % length] += w
            w *= a


class DLR(Optimizer):
    """Exponentially weighted sliding-window gradient descent with a rank-one ring buffer.

    ``defer``: ``"auto"`` picks the cheaper way per layer (see :data:`DEFER_COST`); ``True`` or
    ``False`` forces the deferred or the running-sum way for every layer (tests compare both).
    """

    name = "dlr"

    def __init__(self, model: MLP, *, lr: float, window: int, alpha: float, defer: bool | str = "auto"):
        super().__init__(model, lr=lr)
        if not (isinstance(window, int) and window >= 1):
            raise ConfigError(f"optimizer.window must be an integer >= 1, got {window!r}")
        if not (0.0 < alpha < 1.0):  # with alpha = 1 rounding errors in the running sum never decay
            raise ConfigError(f"optimizer.alpha must be in (0, 1), got {alpha!r}")
        if defer not in (True, False, "auto"):
            raise ConfigError(f"DLR defer must be True, False or 'auto', got {defer!r}")
        self.window, self.alpha = window, float(alpha)
        self.alpha_l = self.alpha**window  # weight of the entry that leaves the window
        self.norm = float(sum(self.alpha**i for i in range(window)))  # W
        self.pos = 0
        self.S_b = [np.zeros_like(layer.b) for layer in model.layers]
        self.ring_delta = [np.zeros((window, layer.W.shape[0]), layer.W.dtype) for layer in model.layers]
        self.ring_inp = [np.zeros((window, layer.W.shape[1]), layer.W.dtype) for layer in model.layers]
        self.S_W: list[np.ndarray | None] = []
        self.shares: list[np.ndarray | None] = []
        for k, layer in enumerate(model.layers):
            if layer.deferred is not None:  # a previous DLR on this model: keep its pending steps
                layer.W[...] -= layer.deferred.matrix().astype(layer.W.dtype)
                layer.deferred = None
            n_out, n_in = layer.W.shape
            deferred = defer if defer != "auto" else DEFER_COST * window * (n_in + n_out) <= n_in * n_out
            if deferred:
                A = np.zeros(window, layer.W.dtype)
                layer.deferred = Deferred(self.ring_delta[k], self.ring_inp[k], A)
                self.S_W.append(None)
                self.shares.append(A)
            else:
                layer.deferred = None
                self.S_W.append(np.zeros_like(layer.W))
                self.shares.append(None)
        self._zeros = [
            (np.zeros((1, layer.W.shape[0]), layer.W.dtype), np.zeros((1, layer.W.shape[1]), layer.W.dtype))
            for layer in model.layers
        ]  # the factors of a passive round's zero gradient
        # per layer, what its kernel call needs, looked up once (the step runs every round)
        self._calls = [
            (
                A is not None,
                layer.W,
                layer.b,
                self.S_W[k] if A is None else A,
                self.S_b[k],
                self.ring_delta[k],
                self.ring_inp[k],
            )
            for k, (layer, A) in enumerate(zip(model.layers, self.shares))
        ]

    @property
    def deferred_layers(self) -> list[int]:
        """Indices of the layers updated the deferred way."""
        return [k for k, A in enumerate(self.shares) if A is not None]

    def _push(self, grads: list[LayerGrad] | None, scale: float) -> None:
        """Advance the window by one entry (``None`` = a zero gradient) and, if ``scale`` > 0,
        step: one fused kernel call per layer."""
        p, a, al = self.pos, self.alpha, self.alpha_l
        factors = self._zeros if grads is None else grads
        if grads is not None and grads[0].delta.shape[0] != 1:
            raise ProtocolError(f"DLR takes one-sample gradients, got a batch of {grads[0].delta.shape[0]}")
        for (deferred, W, b, S_or_A, S_b, U, V), (D, X) in zip(self._calls, factors):
            if deferred:
                dlr_deferred_update(W, b, S_b, U, V, S_or_A, p, D, X, a, al, scale)
            else:
                dlr_layer_update(W, b, S_or_A, S_b, U, V, p, D, X, a, al, scale)
        self.pos = (p + 1) % self.window

    def step(self, grads: list[LayerGrad]) -> None:
        self._push(grads, self.lr / self.norm)

    def skip(self) -> None:
        self._push(None, 0.0)

    def state_dict(self) -> dict[str, np.ndarray]:
        state = {"pos": np.array(self.pos), "deferred": np.array([A is not None for A in self.shares])}
        for k in range(len(self.S_b)):
            state |= {
                f"S_b{k}": self.S_b[k],
                f"ring_delta{k}": self.ring_delta[k],
                f"ring_inp{k}": self.ring_inp[k],
            }
            state[f"S_W{k}" if self.S_W[k] is not None else f"share{k}"] = (
                self.S_W[k] if self.S_W[k] is not None else self.shares[k])
        return {key: np.array(v, copy=True) for key, v in state.items()}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        mine = [A is not None for A in self.shares]
        if "deferred" in state and list(state["deferred"]) != mine:
            raise ConfigError(
                f"DLR state was saved with deferred layers {list(np.flatnonzero(state['deferred']))}, "
                f"this optimiser defers {list(np.flatnonzero(mine))} (DEFER_COST changed?); "
                "resume with the fedstream version that wrote it"
            )
        self.pos = int(state["pos"])
        for k in range(len(self.S_b)):
            for name in ("S_b", "ring_delta", "ring_inp"):
                getattr(self, name)[k][...] = state[f"{name}{k}"]
            if self.S_W[k] is not None:
                self.S_W[k][...] = state[f"S_W{k}"]
            else:
                self.shares[k][...] = state[f"share{k}"]
