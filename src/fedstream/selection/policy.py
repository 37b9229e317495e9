"""The base class of an activation policy: which clients an event activates in each round.

It sits below :mod:`fedstream.ovfl.activation` (the paper's policies and ``make_activation``) and
:mod:`fedstream.selection.online` (``topl``, selection as a policy), which both subclass it.
"""

from __future__ import annotations

import numpy as np


class Activation:
    """Base class. ``block_means`` (rounds, clients) is each client's mean standardised feature."""

    name = "base"

    def __init__(self, n_clients: int, *, seed: int = 0):
        self.n_clients, self.seed = n_clients, seed
        self._drawn: tuple[int, tuple, np.ndarray] | None = None  # the last chunk's uniform draws

    def mask(self, chunk: int, block_means: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def mask_among(self, chunk: int, block_means: np.ndarray, held: np.ndarray | None) -> np.ndarray:
        """The chunk's mask with each round's choice made among the clients that hold its id
        (``held``: (rounds, clients) bool, from per-party files; None: every client holds every
        row). A policy that draws each client on its own (random, event, full) keeps its own
        choice among the holders; one that picks a number of clients (fixed, topl) overrides this."""
        mask = self.mask(chunk, block_means)
        return mask if held is None else mask & held

    def queried(self, mask: np.ndarray) -> np.ndarray | None:
        """Of a chunk's passive clients (``~mask``), which the server queries for their embedding:
        (rounds, clients) bool, or None for all of them (the paper's protocol). A client neither
        activated nor queried sends nothing; the server's stand-in pads it (``topl``)."""
        return None

    def observe(self, blocks: list[np.ndarray], labels: np.ndarray) -> None:
        """Called once per complete chunk, once played, outside the round loop (per-client blocks,
        labels); a policy that learns (``topl``) overrides this."""

    def _rng(self, chunk: int) -> np.random.Generator:
        return np.random.default_rng([self.seed, 3, chunk])

    def _uniform(self, chunk: int, shape: tuple) -> np.ndarray:
        """``self._rng(chunk).random(shape)``, kept for the chunk (read-only): a deployed client
        asks for its event's mask once per event, and drawing a whole chunk's numbers (4096 x
        clients) each time cost 80 us, more than the client's embedding."""
        if self._drawn is None or self._drawn[:2] != (chunk, shape):
            draws = self._rng(chunk).random(shape)
            draws.flags.writeable = False
            self._drawn = (chunk, shape, draws)
        return self._drawn[2]
