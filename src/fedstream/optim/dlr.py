"""Dynamic local regret (DLR): gradient descent on an exponentially weighted window.

The update of paper eqs. (2), (4), (5):

    S_t = sum_{i=0}^{l-1} alpha^i g_{t-i},      w_{t+1} = w_t - (lr / W) S_t,    W = sum_{i<l} alpha^i

where g_{t-i} is the gradient computed at its own past iterate (never recomputed) and a passive
round contributes g = 0. Warm-up choice: before l gradients exist the missing ones count as zeros
and we still divide by the full W (the online VFL paper's constant W), not by the weights present.

Cost: O(d) per round whatever l is. We keep the running sum and use

    S_t = alpha * S_{t-1} + g_t - alpha^l g_{t-l}.

The entry that leaves the window is stored compactly: a one-sample dense-layer gradient is rank one,
``outer(delta, inp)``, so the ring buffer holds the factors (l x (in + out) numbers per layer), not
l full matrices. The plain version that stores l matrices and sums them is
:class:`fedstream.vfl.reference` 's oracle, and tests check both agree.
"""

from __future__ import annotations

import numpy as np

from numba import njit

from fedstream.errors import ConfigError
from fedstream.models import MLP, LayerGrad
from fedstream.optim.base import Optimizer


@njit(cache=True, fastmath=True)
def dlr_layer_update(W, b, S_W, S_b, d, x, old_d, old_x, alpha, alpha_l, scale):  # pragma: no cover (jit)
    """One DLR round of a dense layer, fused into a single pass over W and S_W:

        S_W <- alpha * S_W + outer(d, x) - alpha^l * outer(old_d, old_x)
        S_b <- alpha * S_b + d - alpha^l * old_d
        W   <- W - scale * S_W,   b <- b - scale * S_b        (not done when scale == 0)

    then the ring slot (old_d, old_x) takes the newest factors (d, x). ``d = 0`` with ``scale = 0``
    is a passive round. Arguments are 1-D factor vectors; W, S_W are (out, in). Scalars are cast
    to the arrays' dtype so the inner loop stays in one precision and vectorises.
    """
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
    old_x[:] = x
    old_d[:] = d


class DLR(Optimizer):
    """Exponentially weighted sliding-window gradient descent with a rank-one ring buffer."""

    name = "dlr"

    def __init__(self, model: MLP, *, lr: float, window: int, alpha: float):
        super().__init__(model, lr=lr)
        if not (isinstance(window, int) and window >= 1):
            raise ConfigError(f"optimizer.window must be an integer >= 1, got {window!r}")
        if not (0.0 < alpha < 1.0):  # with alpha = 1 rounding errors in the running sum never decay
            raise ConfigError(f"optimizer.alpha must be in (0, 1), got {alpha!r}")
        self.window, self.alpha = window, float(alpha)
        self.alpha_l = self.alpha**window  # weight of the entry that leaves the window
        self.norm = float(sum(self.alpha**i for i in range(window)))  # W
        self.pos = 0
        self.S_W = [np.zeros_like(layer.W) for layer in model.layers]
        self.S_b = [np.zeros_like(layer.b) for layer in model.layers]
        self.ring_delta = [np.zeros((window, layer.W.shape[0]), layer.W.dtype) for layer in model.layers]
        self.ring_inp = [np.zeros((window, layer.W.shape[1]), layer.W.dtype) for layer in model.layers]
        zeros = [np.zeros_like(layer.b) for layer in model.layers]
        self._layer_state = list(zip(model.layers, self.S_W, self.S_b, zeros))

    def _push(self, grads: list[LayerGrad] | None, scale: float) -> None:
        """Advance the window by one entry (``None`` = a zero gradient), update S and, if
        ``scale`` > 0, the parameters: one fused kernel call per layer."""
        p, a, al = self.pos, self.alpha, self.alpha_l
        for k, (layer, S_W, S_b, zeros) in enumerate(self._layer_state):
            old_d, old_x = self.ring_delta[k][p], self.ring_inp[k][p]
            if grads is None:
                d, x = zeros, old_x
            else:
                g = grads[k]
                if g.delta.shape[0] != 1:
                    raise ValueError(f"DLR takes one-sample gradients, got a batch of {g.delta.shape[0]}")
                d, x = g.delta[0], g.inp[0]
            dlr_layer_update(layer.W, layer.b, S_W, S_b, d, x, old_d, old_x, a, al, scale)
        self.pos = (p + 1) % self.window

    def step(self, grads: list[LayerGrad]) -> None:
        self._push(grads, self.lr / self.norm)

    def skip(self) -> None:
        self._push(None, 0.0)

    def state_dict(self) -> dict[str, np.ndarray]:
        state = {"pos": np.array(self.pos)}
        for k in range(len(self.S_W)):
            state |= {f"S_W{k}": self.S_W[k], f"S_b{k}": self.S_b[k],
                      f"ring_delta{k}": self.ring_delta[k], f"ring_inp{k}": self.ring_inp[k]}
        return {key: np.array(v, copy=True) for key, v in state.items()}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        self.pos = int(state["pos"])
        for k in range(len(self.S_W)):
            for name in ("S_W", "S_b", "ring_delta", "ring_inp"):
                getattr(self, name)[k][...] = state[f"{name}{k}"]
