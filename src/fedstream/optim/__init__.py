"""Optimisers of the online VFL parties: OGD, SLR (OGD on a window loss) and DLR."""

from fedstream.errors import ConfigError
from fedstream.optim.base import Optimizer
from fedstream.optim.dlr import DLR
from fedstream.optim.ogd import OGD

__all__ = ["DLR", "OGD", "Optimizer", "make_optimizer"]


def make_optimizer(name: str, model, *, lr: float, window: int, alpha: float) -> Optimizer:
    """The update rule for ``optimizer.name``: SLR steps like OGD on its window-averaged loss."""
    if name == "dlr":
        return DLR(model, lr=lr, window=window, alpha=alpha)
    if name in ("ogd", "slr"):
        return OGD(model, lr=lr)
    raise ConfigError(f"optimizer.name: unknown optimizer {name!r}; expected one of ogd, slr, dlr")
