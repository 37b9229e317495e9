"""The optimiser contract shared by every party.

An optimiser owns the update rule of one party's model. ``step`` receives the gradient of this
round's loss as per-layer factors (see :class:`fedstream.models.LayerGrad`); ``skip`` is called in a
round where the party is passive (it answered a query but learns nothing). Subclasses override
``step`` and, if they keep history, ``skip`` and the state methods.
"""

from __future__ import annotations

import numpy as np

from fedstream.errors import ConfigError
from fedstream.models import MLP, LayerGrad


class Optimizer:
    """Base class: validated learning rate, a model, and no state."""

    name = "base"

    def __init__(self, model: MLP, *, lr: float):
        if not (lr > 0 and np.isfinite(lr)):
            raise ConfigError(f"optimizer.lr must be a positive finite number, got {lr!r}")
        self.model = model
        self.lr = float(lr)

    def step(self, grads: list[LayerGrad]) -> None:
        """Update the model with this round's gradient factors (one per layer, in layer order)."""
        raise NotImplementedError

    def skip(self) -> None:
        """A passive round: no update. Optimisers with a gradient window push a zero."""

    def state_dict(self) -> dict[str, np.ndarray]:
        return {}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        """Restore what :meth:`state_dict` returned."""
