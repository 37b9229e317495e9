"""Online gradient descent: w <- w - lr * grad (paper appendix C.2, Algorithm 4).

Also the update rule of SLR: there the party's loss is already the window average F_{t,l}
(Algorithm 5), so the step itself is plain gradient descent.
"""

from __future__ import annotations

from numba import njit

from fedstream.models import LayerGrad
from fedstream.optim.base import Optimizer


@njit(cache=True, fastmath=True)
def rank1_descent(W, b, d, x, lr):  # pragma: no cover (jit)
    """W <- W - lr * outer(d, x),  b <- b - lr * d: a one-sample step without a temporary."""
    step = W.dtype.type(lr)
    n_out, n_in = W.shape
    for i in range(n_out):
        g = step * d[i]
        W_i = W[i]
        for j in range(n_in):
            W_i[j] -= g * x[j]
        b[i] -= g


class OGD(Optimizer):
    """W -= lr * delta.T @ inp ; b -= lr * sum(delta)."""

    name = "ogd"

    def _step(self, grads: list[LayerGrad]) -> None:
        for layer, g in zip(self.model.layers, grads):
            if g.delta.shape[0] == 1:
                rank1_descent(layer.W, layer.b, g.delta[0], g.inp[0], self.lr)
            else:  # SLR: the gradient of a window of samples
                layer.W -= self.lr * (g.delta.T @ g.inp)
                layer.b -= self.lr * g.delta.sum(axis=0)
