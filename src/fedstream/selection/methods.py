"""Selection methods: choose l of m clients (VF-PS, random picking, all; brute force for comparison).

A selector is a small object with one method, ``select(blocks, labels) -> Selection``, so a VFL
trainer can hold one and call it whenever its training data change (the dynamic settings of
:mod:`fedstream.selection.dynamic` say when)::

    selector = make_selector("vfps", l=3, seed=0)      # or "random", "all"
    sel = selector.select(blocks, y)                   # blocks: per-client (n, d_j) arrays
    sel.clients                                        # e.g. (1, 2, 3); pad the others' embeddings

:func:`brute_force` is not a selector: it trains with every l-subset through a callable the
trainer supplies and keeps the best (and the worst, for comparison, as in the report's Table 2).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from fedstream.errors import ConfigError
from fedstream.selection.group_testing import (
    DEFAULT_AGGREGATE,
    DEFAULT_GROUPS,
    DEFAULT_K,
    DEFAULT_SEED,
    check_aggregate,
    group_test,
    group_test_from_distances,
    plan_tests,
)
from fedstream.selection.knn_mi import check_local_distances
from fedstream.selection.validation import check_blocks, check_l, check_queries

SELECTORS = ("vfps", "random", "all")


@dataclass(frozen=True)
class Selection:
    """The clients chosen (sorted), their scores where the method has any, and how long it took."""

    clients: tuple[int, ...]
    method: str
    scores: np.ndarray | None = None  # (m,) per-client score (VF-PS), else None
    seconds: float = 0.0
    details: dict = field(default_factory=dict)

    def mask(self, m: int) -> np.ndarray:
        """(m,) bool: True for the selected clients."""
        out = np.zeros(m, dtype=bool)
        out[list(self.clients)] = True
        return out


class Selector:
    """Base class: ``select(blocks, labels)`` returns a :class:`Selection` of ``l`` clients."""

    name = "base"

    def __init__(self, l: int | None):
        self.l = l

    def select(self, blocks: Sequence[np.ndarray], labels) -> Selection:
        blocks = check_blocks(blocks)
        t0 = time.perf_counter()
        sel = self._select(blocks, labels)
        return Selection(sel.clients, sel.method, sel.scores, time.perf_counter() - t0, sel.details)

    def _select(self, blocks: list[np.ndarray], labels) -> Selection:
        raise NotImplementedError


class VFPSSelector(Selector):
    """VF-PS: group testing with the KNN MI estimate of eq. (1); the l best-scoring clients.

    ``queries=None`` makes every sample a query (exact; about 50 CPU-seconds for MNIST's 60,000
    samples and 4 clients); an int draws that many, the report's subsampling (§4.4), for frequent
    re-selection in dynamic settings. ``aggregate``: how client scores come from group scores
    (``"marginal"``, the default, on its fixed design; ``"mean"`` / ``"sum"`` on random groups, fresh
    at each call: seed + call number); see :mod:`~fedstream.selection.group_testing`. Extra
    keywords go to :func:`~fedstream.selection.group_testing.group_test` (``fagin_batch``,
    ``workers``, ``backend``, ...).
    """

    name = "vfps"

    def __init__(self, l: int, *, k: int = DEFAULT_K, n_groups: int = DEFAULT_GROUPS, queries=None,
                 seed: int = DEFAULT_SEED, psi: str = "approx", aggregate: str = DEFAULT_AGGREGATE,
                 **knn_kwargs):
        super().__init__(l)
        self.k, self.n_groups, self.queries, self.seed, self.psi = k, n_groups, queries, seed, psi
        self.aggregate = check_aggregate(aggregate)
        self.knn_kwargs = knn_kwargs
        self.calls = 0

    def plan(self, m: int, n: int) -> tuple[list[tuple[int, ...]], np.ndarray]:
        """The next call's groups and (sorted) query samples for m clients and n samples; draws only.

        The distance-based path: the server sends the queries to the clients, gets back their local
        distances and calls :meth:`select_distances` with the same groups and queries.
        """
        groups, q = plan_tests(
            m, n, n_groups=self.n_groups, queries=self.queries, seed=self.seed + self.calls,
            aggregate=self.aggregate,
        )
        return groups, check_queries(q, n)

    def _select(self, blocks, labels) -> Selection:
        l = check_l(self.l, len(blocks))
        groups, q = plan_tests(len(blocks), blocks[0].shape[0], n_groups=self.n_groups, queries=self.queries,
                               seed=self.seed + self.calls, aggregate=self.aggregate)
        res = group_test(blocks, labels, groups=groups, k=self.k, queries=q, psi=self.psi,
                         aggregate=self.aggregate, **self.knn_kwargs)
        return self._chosen(res, l)

    def select_distances(self, local, labels, groups, queries) -> Selection:
        """VF-PS from the clients' local distances (m, |Q|, n) for :meth:`plan`'s groups and queries:
        the same Selection :meth:`select` gives from the blocks (exact distances)."""
        t0 = time.perf_counter()
        local = check_local_distances(local)
        l = check_l(self.l, local.shape[0])
        res = group_test_from_distances(local, labels, groups, queries=queries, k=self.k, psi=self.psi,
                                        aggregate=self.aggregate)
        sel = self._chosen(res, l)
        return Selection(sel.clients, sel.method, sel.scores, time.perf_counter() - t0, sel.details)

    def _chosen(self, res, l: int) -> Selection:
        self.calls += 1
        chosen = tuple(sorted(int(c) for c in res.ranking()[:l]))
        return Selection(chosen, self.name, res.client_scores,
                         details={"groups": res.groups, "group_scores": res.group_scores.tolist()})


class RandomSelector(Selector):
    """Random picking: l of m uniformly, a fresh draw at every call (call it when the data change)."""

    name = "random"

    def __init__(self, l: int, *, seed: int = 0):
        super().__init__(l)
        self.rng = np.random.default_rng(seed)

    def _select(self, blocks, labels) -> Selection:
        l = check_l(self.l, len(blocks))
        return Selection(random_pick(len(blocks), l, self.rng), self.name)


class AllSelector(Selector):
    """Every client (the upper reference of the report's Tables 1-2)."""

    name = "all"

    def __init__(self, l: int | None = None):
        super().__init__(l)

    def _select(self, blocks, labels) -> Selection:
        return Selection(tuple(range(len(blocks))), self.name)


def random_pick(m: int, l: int, rng: np.random.Generator | int | None = None) -> tuple[int, ...]:
    """l distinct clients of m, uniformly at random, sorted."""
    l = check_l(l, m)
    rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    return tuple(sorted(int(c) for c in rng.choice(m, size=l, replace=False)))


def make_selector(name: str, *, l: int | None = None, seed: int = 0, **kwargs) -> Selector:
    """Selector by name: ``"vfps"`` (VF-PS), ``"random"`` (random picking) or ``"all"``."""
    if name == "vfps":
        return VFPSSelector(l, seed=seed, **kwargs)
    if name == "random":
        return RandomSelector(l, seed=seed)
    if name == "all":
        return AllSelector(l)
    raise ConfigError(f"selection method must be one of {', '.join(map(repr, SELECTORS))}, got {name!r}")


@dataclass(frozen=True)
class BruteForceResult:
    """Every l-subset's score, with the best and the worst subset."""

    best: tuple[int, ...]
    worst: tuple[int, ...]
    scores: dict[tuple[int, ...], float]


def brute_force(m: int, l: int, train_and_score: Callable[[tuple[int, ...]], float], *,
                higher_is_better: bool = True) -> BruteForceResult:
    """Train with every l-subset of the m clients via ``train_and_score(subset) -> score``; keep best
    and worst.

    ``train_and_score`` is the trainer's: e.g. train a batch VFL model on those clients' features
    and return the validation accuracy (``higher_is_better=True``) or loss (False). Ties go to the
    first subset in lexicographic order.
    """
    l = check_l(l, m)
    if not callable(train_and_score):
        raise ConfigError(
            f"train_and_score must be callable (subset -> score), got {type(train_and_score).__name__}"
        )
    scores: dict[tuple[int, ...], float] = {}
    for subset in itertools.combinations(range(m), l):
        value = float(train_and_score(subset))
        if not np.isfinite(value):
            raise ConfigError(f"train_and_score{subset} returned {value}; expected a finite score")
        scores[subset] = value
    sign = 1.0 if higher_is_better else -1.0
    best = max(scores, key=lambda s: sign * scores[s])
    worst = min(scores, key=lambda s: sign * scores[s])
    return BruteForceResult(best=best, worst=worst, scores=scores)
