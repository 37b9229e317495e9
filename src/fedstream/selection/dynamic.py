"""Dynamic settings of the Dynamic VF-PS report (§3.2, §4.3): when the data change, when to re-select.

* :class:`DiscreteSchedule` — the available training subset is redrawn from scratch (each sample
  kept with probability ``keep``) at epoch 0 and then at each epoch with probability
  ``update_prob`` (the report's "frequency of dataset update", 20 % in its experiments). Selection
  re-runs whenever :meth:`~DiscreteSchedule.changed` is true. Stateless: the subset of any epoch
  follows from ``(seed, epoch)``.
* :class:`RelaxedSchedule` — the data change gradually: the initial subset is drawn as above, every
  present sample gets a random lifespan (epochs), is removed when it runs out, and every absent
  sample arrives with probability ``arrival`` per epoch (with a fresh lifespan).
* :class:`PessimisticScores` — between full re-selections in the relaxed setting, clients' scores
  are moved pessimistically: as if the changed share f of the data had taken eq. (1)'s worst
  per-query value for the selected clients and its best for the others. Once an unselected
  client's optimistic score passes a selected client's pessimistic one, the optimal selection may
  have changed and group testing must run again (§4.3).

A trainer's loop, relaxed setting::

    sched = RelaxedSchedule(n, keep=0.5, arrival=0.05, lifespan=(5, 20), seed=0)
    sel = selector.select([b[sched.mask] for b in blocks], y[sched.mask])
    pess = PessimisticScores(sel.scores, sel.clients, y[sched.mask], k=10)
    for epoch in range(1, epochs):
        step = sched.step()
        pess.update(step.changed, y[step.mask])
        if pess.needs_reselection():
            sel = selector.select([b[step.mask] for b in blocks], y[step.mask])
            pess.reset(sel.scores, sel.clients, y[step.mask])
        ...  # train an epoch on step.mask with sel.clients, padding the others
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fedstream.errors import ConfigError
from fedstream.selection.digamma import check_psi
from fedstream.selection.digamma import (
    psi as digamma,  # the parameter name psi is the ψ variant
)
from fedstream.selection.validation import check_positive_int, check_probability


class DiscreteSchedule:
    """Subset redrawn from scratch at epoch 0 and then each epoch with probability ``update_prob``."""

    def __init__(self, n: int, *, keep: float = 0.5, update_prob: float = 0.2, seed: int = 0):
        self.n = check_positive_int("n (samples)", n)
        self.keep = check_probability("keep", keep, allow_zero=False)
        self.update_prob = check_probability("update_prob", update_prob)
        self.seed = int(seed)

    def _check_epoch(self, epoch: int) -> int:
        return check_positive_int("epoch", epoch, minimum=0)

    def changed(self, epoch: int) -> bool:
        """True if the subset is (re)drawn at ``epoch`` (always at epoch 0): re-run selection then."""
        epoch = self._check_epoch(epoch)
        return epoch == 0 or bool(np.random.default_rng([self.seed, 1, epoch]).random() < self.update_prob)

    def last_redraw(self, epoch: int) -> int:
        """The latest epoch <= ``epoch`` at which the subset was redrawn."""
        epoch = self._check_epoch(epoch)
        while not self.changed(epoch):
            epoch -= 1
        return epoch

    def mask(self, epoch: int) -> np.ndarray:
        """(n,) bool: the samples available at ``epoch``."""
        return np.random.default_rng([self.seed, 2, self.last_redraw(epoch)]).random(self.n) < self.keep


@dataclass(frozen=True)
class RelaxedStep:
    """One epoch of the relaxed setting: the samples present, and those that arrived or left."""

    epoch: int
    mask: np.ndarray  # (n,) bool, present after the step
    arrived: np.ndarray  # sample indices that arrived at this step
    departed: np.ndarray  # sample indices whose lifespan ran out at this step

    @property
    def changed(self) -> int:
        """Number of samples that arrived or left."""
        return int(self.arrived.size + self.departed.size)


class RelaxedSchedule:
    """Samples with random lifespans (uniform integers in ``lifespan``) and gradual arrivals."""

    def __init__(
        self,
        n: int,
        *,
        keep: float = 0.5,
        arrival: float = 0.05,
        lifespan: tuple[int, int] = (5, 20),
        seed: int = 0,
    ):
        self.n = check_positive_int("n (samples)", n)
        self.keep = check_probability("keep", keep, allow_zero=False)
        self.arrival = check_probability("arrival", arrival)
        lo, hi = (
            check_positive_int("lifespan[0]", lifespan[0]),
            check_positive_int("lifespan[1]", lifespan[1]),
        )
        if lo > hi:
            raise ConfigError(f"lifespan must be (min, max) epochs with min <= max, got {tuple(lifespan)}")
        self.lifespan = (lo, hi)
        self.rng = np.random.default_rng(seed)
        self.epoch = 0
        self.mask = self.rng.random(self.n) < self.keep
        self.life = np.where(self.mask, self._draw_life(self.n), 0)

    def _draw_life(self, size: int) -> np.ndarray:
        return self.rng.integers(self.lifespan[0], self.lifespan[1] + 1, size=size)

    def step(self) -> RelaxedStep:
        """Advance one epoch: lifespans tick down (0 = removed), absent samples arrive with ``arrival``."""
        absent = np.flatnonzero(~self.mask)
        self.life[self.mask] -= 1
        departed = np.flatnonzero(self.mask & (self.life <= 0))
        self.mask[departed] = False
        arrived = absent[self.rng.random(absent.size) < self.arrival]
        self.mask[arrived] = True
        self.life[arrived] = self._draw_life(arrived.size)
        self.epoch += 1
        return RelaxedStep(self.epoch, self.mask.copy(), arrived, departed)


def term_bounds(labels, k: int, psi: str = "approx") -> tuple[float, float]:
    """(lo, hi): the range of one query's term ψ(N) − ψ(N_q) + ψ(K) − ψ(m_q) of eq. (1).

    m_q runs from 1 (the K same-class neighbours tie at the radius, nothing strictly inside) to N
    (every sample at distance 0, e.g. a constant client), the tie rule of eq. (1): hi is the largest
    class-prior term with m_q = 1, lo the smallest with m_q = N. Classes with fewer than 2 samples
    are ignored.
    """
    check_psi(psi)
    counts = np.bincount(np.unique(np.asarray(labels), return_inverse=True)[1])
    counts = counts[counts >= 2]
    if counts.size == 0:
        raise ConfigError("term_bounds needs a class with at least 2 samples")
    n = int(np.asarray(labels).shape[0])
    base = digamma(n, psi) - digamma(counts, psi) + digamma(k, psi)
    return float((base - digamma(n, psi)).min()), float((base - digamma(1, psi)).max())


def score_bounds(lo: float, hi: float, aggregate: str = "mean") -> tuple[float, float]:
    """The range of a client's score when each group score lies in [lo, hi]: the same for a mean
    of groups; for ``"marginal"``, ½ (I({j}) + I(N) − I(N ∖ {j})), it is [lo − hi/2, hi − lo/2]."""
    if aggregate == "marginal":
        return lo - hi / 2, hi - lo / 2
    return lo, hi


class PessimisticScores:
    """Per-client scores moved pessimistically as data change, until a full re-selection (§4.3).

    ``aggregate``: how the scores came from group scores (``"mean"``, or ``"marginal"``, whose
    wider range :func:`score_bounds` gives; a summed score is compared as a mean by the caller)."""

    def __init__(self, scores: Sequence[float], selected: Sequence[int], labels, *, k: int = 10,
                 psi: str = "approx", aggregate: str = "mean"):
        self.k, self.psi, self.aggregate = check_positive_int("k", k), psi, aggregate
        self.reset(scores, selected, labels)

    def reset(self, scores: Sequence[float], selected: Sequence[int], labels) -> None:
        """Start again from a full selection's scores on the data described by ``labels``."""
        self.base = np.asarray(scores, dtype=np.float64)
        if self.base.ndim != 1 or not np.isfinite(self.base).all():
            raise ConfigError("scores must be a finite 1-D array with one score per client")
        self.selected = np.zeros(self.base.size, dtype=bool)
        self.selected[list(selected)] = True
        self.changed = 0
        self.n = int(np.asarray(labels).shape[0])
        self.lo, self.hi = score_bounds(*term_bounds(labels, self.k, self.psi), self.aggregate)

    def update(self, changed: int, labels) -> None:
        """Record ``changed`` samples that arrived or left; ``labels`` are the current data's labels."""
        self.changed += check_positive_int("changed", changed, minimum=0)
        self.n = int(np.asarray(labels).shape[0])
        lo, hi = score_bounds(*term_bounds(labels, self.k, self.psi), self.aggregate)
        self.lo, self.hi = min(self.lo, lo), max(self.hi, hi)

    @property
    def fraction(self) -> float:
        """Share f of the current data that changed since the last full selection (capped at 1)."""
        return min(1.0, self.changed / max(self.n, 1))

    def current(self) -> np.ndarray:
        """(m,) scores now: (1 − f)·s + f·lo for selected clients, (1 − f)·s + f·hi for the others."""
        f = self.fraction
        return np.where(self.selected, (1 - f) * self.base + f * self.lo, (1 - f) * self.base + f * self.hi)

    def needs_reselection(self) -> bool:
        """True once some unselected client's optimistic score exceeds a selected client's pessimistic one."""
        if self.selected.all() or not self.selected.any():
            return False
        s = self.current()
        return bool(s[~self.selected].max() > s[self.selected].min())
