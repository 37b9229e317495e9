"""Activation policies: which clients an event activates in each round.

A policy sees a chunk of rounds at once (vectorised) and returns a boolean mask (rounds, clients).
Randomness is drawn from a generator keyed by ``(seed, chunk index)``, so the mask of a round does
not depend on where a run started or resumed. In a deployment each client would evaluate its own
column (``random`` and ``event`` need nothing from other parties; ``fixed`` is a coordinator's draw).
``topl`` (participant selection as a policy, :mod:`fedstream.selection.online`) is the server's
choice from an online KNN-MI estimate, updated after each complete chunk via :meth:`Activation.observe`;
it is the one policy that does not query passive clients (:meth:`Activation.queried`): the server
pads them instead, so they cost no bytes. The base class :class:`Activation` lives in
:mod:`fedstream.selection.policy`, below both this module and ``topl``.
"""

from __future__ import annotations

import numpy as np

from fedstream.errors import ConfigError
from fedstream.selection.online import TopLActivation
from fedstream.selection.policy import Activation

__all__ = [
    "Activation",
    "EventActivation",
    "FixedCount",
    "Full",
    "RandomActivation",
    "make_activation",
]


class Full(Activation):
    """Every client is activated in every round."""

    name = "full"

    def mask(self, chunk: int, block_means: np.ndarray) -> np.ndarray:
        return np.ones(block_means.shape, dtype=bool)


class RandomActivation(Activation):
    """Each client independently with probability p (paper: "Random")."""

    name = "random"

    def __init__(self, n_clients: int, *, p: float, seed: int = 0):
        super().__init__(n_clients, seed=seed)
        if not 0.0 <= p <= 1.0:
            raise ConfigError(f"activation.p must be in [0, 1], got {p!r}")
        self.p = p

    def mask(self, chunk: int, block_means: np.ndarray) -> np.ndarray:
        return self._uniform(chunk, block_means.shape) < self.p


class EventActivation(Activation):
    """A client is activated when the mean of its standardised features exceeds Γ (paper: "Event")."""

    name = "event"

    def __init__(self, n_clients: int, *, threshold: float, seed: int = 0):
        super().__init__(n_clients, seed=seed)
        self.threshold = threshold

    def mask(self, chunk: int, block_means: np.ndarray) -> np.ndarray:
        return block_means > self.threshold


class FixedCount(Activation):
    """Exactly k clients, chosen uniformly at random each round (paper appendix D.3, Fig. 13)."""

    name = "fixed"

    def __init__(self, n_clients: int, *, k: int, seed: int = 0):
        super().__init__(n_clients, seed=seed)
        if not 0 <= k <= n_clients:
            raise ConfigError(f"activation.k must be in [0, vfl.clients={n_clients}], got {k!r}")
        self.k = k

    def mask(self, chunk: int, block_means: np.ndarray) -> np.ndarray:
        ranks = self._uniform(chunk, block_means.shape).argsort(axis=1).argsort(axis=1)
        return ranks < self.k

    def mask_among(self, chunk: int, block_means: np.ndarray, held: np.ndarray | None) -> np.ndarray:
        """k of the clients that hold each round's id (all of them where fewer hold it)."""
        if held is None:
            return self.mask(chunk, block_means)
        draws = np.where(held, self._uniform(chunk, block_means.shape), 2.0)  # the absent rank last
        return (draws.argsort(axis=1).argsort(axis=1) < self.k) & held


def make_activation(name: str, n_clients: int, *, p: float, threshold: float, k: int, seed: int,
                    l: int = 2, window: int = 500, explore: int = 10, padding: str = "mean",
                    embedding: int = 64) -> Activation:
    """The policy for ``activation.name`` (``topl``: :class:`fedstream.selection.online.TopLActivation`
    with ``activation.l``, ``.window``, ``.explore``, ``.padding`` and the clients' ``embedding`` width)."""
    if name == "full":
        return Full(n_clients, seed=seed)
    if name == "random":
        return RandomActivation(n_clients, p=p, seed=seed)
    if name == "event":
        return EventActivation(n_clients, threshold=threshold, seed=seed)
    if name == "fixed":
        return FixedCount(n_clients, k=k, seed=seed)
    if name == "topl":
        if not 1 <= l <= n_clients:
            raise ConfigError(f"activation.l must be in [1, vfl.clients={n_clients}], got {l!r}")
        return TopLActivation(
            n_clients, l=l, embedding=embedding, window=window, explore=explore, padding=padding, seed=seed
        )
    raise ConfigError(f"activation.name must be one of full, random, event, fixed, topl; got {name!r}")


def activation_from_config(config: dict) -> Activation:
    """The policy a resolved ``ovfl`` config asks for (``activation.*``, ``vfl.clients``, ``seed``,
    ``model.embedding``): the simulator's and a deployed party's are built here, so they are the same."""
    return make_activation(
        config["activation.name"],
        config["vfl.clients"],
        p=config["activation.p"],
        threshold=config["activation.threshold"],
        k=config["activation.k"],
        seed=config["seed"],
        l=config["activation.l"],
        window=config["activation.window"],
        explore=config["activation.explore"],
        padding=config["activation.padding"],
        embedding=config["model.embedding"],
    )
