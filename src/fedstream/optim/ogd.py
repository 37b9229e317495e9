"""Online gradient descent: w <- w - lr * grad (paper appendix C.2, Algorithm 4).

Also the update rule of SLR: there the party's loss is already the window average F_{t,l}
(Algorithm 5), so the step itself is plain gradient descent.
"""

from __future__ import annotations

from fedstream.models import LayerGrad
from fedstream.optim.base import Optimizer


class OGD(Optimizer):
    """W -= lr * delta.T @ inp ; b -= lr * sum(delta)."""

    name = "ogd"

    def _step(self, grads: list[LayerGrad]) -> None:
        for layer, g in zip(self.model.layers, grads):
            layer.W -= self.lr * (g.delta.T @ g.inp)
            layer.b -= self.lr * g.delta.sum(axis=0)
