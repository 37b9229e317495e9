"""Online gradient descent: w <- w - lr * grad (paper appendix C.2, Algorithm 4).

Also the update rule of SLR: there the party's loss is already the window average F_{t,l}
(Algorithm 5), so the step itself is plain gradient descent.
"""

from __future__ import annotations

from numba import njit

from fedstream.models import LayerGrad
from fedstream.optim.base import Optimizer


@njit(cache=True, fastmath=True)
def low_rank_descent(W, b, D, X, lr):  # pragma: no cover (jit)
    """W <- W - lr * D.T @ X,  b <- b - lr * D.sum(0), in place and without a temporary.

    D is (n, out) and X is (n, in): the factors of a gradient summed over n samples (n = 1 for
    OGD, the window length for SLR). Rows with D[r, i] = 0 (units a ReLU switched off) are skipped.
    """
    step = W.dtype.type(lr)
    n, n_out = D.shape
    n_in = W.shape[1]
    for i in range(n_out):
        W_i = W[i]
        for r in range(n):
            g = step * D[r, i]
            if g != 0:
                X_r = X[r]
                for j in range(n_in):
                    W_i[j] -= g * X_r[j]
                b[i] -= g


class OGD(Optimizer):
    """W -= lr * delta.T @ inp ; b -= lr * sum(delta), with a fused kernel."""

    name = "ogd"

    def step(self, grads: list[LayerGrad]) -> None:
        for layer, g in zip(self.model.layers, grads):
            low_rank_descent(layer.W, layer.b, g.delta, g.inp, self.lr)
