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

from fedstream.errors import ConfigError
from fedstream.models import MLP, LayerGrad
from fedstream.optim.base import Optimizer


class DLR(Optimizer):
    """Exponentially weighted sliding-window gradient descent with a rank-one ring buffer."""

    name = "dlr"

    def __init__(self, model: MLP, *, lr: float, window: int, alpha: float):
        super().__init__(model, lr=lr)
        if not (isinstance(window, int) and window >= 1):
            raise ConfigError(f"optimizer.window must be an integer >= 1, got {window!r}")
        if not (0.0 < alpha <= 1.0):
            raise ConfigError(f"optimizer.alpha must be in (0, 1], got {alpha!r}")
        self.window, self.alpha = window, float(alpha)
        self.alpha_l = self.alpha**window  # weight of the entry that leaves the window
        self.norm = float(sum(self.alpha**i for i in range(window)))  # W
        self.pos = 0
        self.S_W = [np.zeros_like(layer.W) for layer in model.layers]
        self.S_b = [np.zeros_like(layer.b) for layer in model.layers]
        self.ring_delta = [np.zeros((window, layer.W.shape[0]), layer.W.dtype) for layer in model.layers]
        self.ring_inp = [np.zeros((window, layer.W.shape[1]), layer.W.dtype) for layer in model.layers]

    def _push(self, grads: list[LayerGrad] | None) -> None:
        """Advance the window by one entry (``None`` = a zero gradient) and update S."""
        a, al, p = self.alpha, self.alpha_l, self.pos
        for k in range(len(self.S_W)):
            old_d, old_x = self.ring_delta[k][p], self.ring_inp[k][p]
            S_W, S_b = self.S_W[k], self.S_b[k]
            S_W *= a
            S_b *= a
            if grads is None:
                S_W -= al * np.outer(old_d, old_x)
                S_b -= al * old_d
                old_d[:] = 0.0
                continue
            d, x = grads[k].delta, grads[k].inp
            if d.shape[0] != 1:
                raise ValueError(f"DLR takes one-sample gradients, got a batch of {d.shape[0]}")
            # rank-2 update: + outer(d, x) - alpha^l outer(old_d, old_x), as one small matmul
            S_W += np.stack([d[0], -al * old_d]).T @ np.stack([x[0], old_x])
            S_b += d[0] - al * old_d
            old_d[:] = d[0]
            old_x[:] = x[0]
        self.pos = (p + 1) % self.window

    def _step(self, grads: list[LayerGrad]) -> None:
        self._push(grads)
        scale = self.lr / self.norm
        for layer, S_W, S_b in zip(self.model.layers, self.S_W, self.S_b):
            layer.W -= scale * S_W
            layer.b -= scale * S_b

    def skip(self) -> None:
        self._push(None)

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
