"""VF-PS group testing: score groups of clients by eq. (1), derive a score per client.

VF-PS (§2.1.2 of the Dynamic VF-PS report) draws random subsets of the m clients, estimates each
subset's MI with the label by eq. (1), and scores a client from the tests it took part in; the l
best-scoring clients are selected. Three ways to turn group scores into client scores
(``aggregate``):

* ``"marginal"`` (default): a fixed design, no random groups — every client alone, every
  leave-one-out group and the full set N (2m + 1 tests) — and client j's score is the mean of its
  two extreme marginal contributions, ½ [I({j}) + I(N) − I(N ∖ {j})] (joining nobody, joining
  everybody; the Shapley value's strata of sizes 0 and m − 1, the Shapley value itself for
  m = 2). Every client faces the same partners, so if j adds at least as much as i to every
  coalition, j scores at least as high; neither the draw of groups nor the number of tests a
  client sits in can change the order;
* ``"mean"``: random groups (below), the mean of a client's groups (the report's wording); a client
  drawn with strong partners gains, and with many clients the random groups are large, their MI
  near its ceiling ln C, and the ranking mostly noise;
* ``"sum"``: random groups, the sum of a client's groups (the VF-PS reference code), which also
  rewards sitting in more groups: on MNIST's four column strips it ranks an edge strip first.

Random groups follow the VF-PS reference scripts: 10 random non-empty groups plus the full set (so
every client is tested at least once), K = 10, seed 100.

Three ways to run the tests, with identical results:

* ``batched=True`` (default): all distinct groups in one pass of :func:`knn_mi`, which computes each
  client's local distances once per tile and forms every group's distance from them — the
  batched variant of VF-PS, reusing neighbour computations across groups;
* ``batched=False``: one :func:`knn_mi` call per distinct group, recomputing the local distances
  each time (what a straightforward implementation does; kept for comparison in the bench);
* ``fagin_batch=b``: the Fagin-inspired variant, per query and group, counting list entries read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fedstream.errors import ConfigError
from fedstream.selection.fagin import fagin_group_mi
from fedstream.selection.knn_mi import (
    check_local_distances,
    knn_mi,
    knn_mi_from_distances,
)
from fedstream.selection.validation import (
    check_blocks,
    check_groups,
    check_positive_int,
    check_queries,
)

DEFAULT_GROUPS = 10
DEFAULT_K = 10
DEFAULT_SEED = 100


@dataclass(frozen=True)
class GroupTestResult:
    """Groups tested, their eq. (1) scores, and the per-client mean scores."""

    groups: list[tuple[int, ...]]
    group_scores: np.ndarray  # (len(groups),)
    client_scores: np.ndarray  # (m,) the clients' aggregate of their groups (NaN for a client in none)
    queries: np.ndarray  # sample indices used as queries
    list_reads: int | None = None  # Fagin-inspired estimator only: list entries read over all groups

    def ranking(self) -> np.ndarray:
        """Client indices from best to worst score (ties by lower index)."""
        return np.lexsort(
            (np.arange(self.client_scores.size), -np.nan_to_num(self.client_scores, nan=-np.inf))
        )


def random_groups(
    m: int,
    n_groups: int = DEFAULT_GROUPS,
    *,
    rng: np.random.Generator | int | None = DEFAULT_SEED,
    include_full: bool = True,
) -> list[tuple[int, ...]]:
    """``n_groups`` random non-empty subsets of ``range(m)`` (+ the full set if ``include_full``).

    Each subset takes every client independently with probability 1/2, redrawn while empty, i.e.
    uniform over the 2^m - 1 non-empty subsets. Repeats are kept: each draw is one test.
    """
    m = check_positive_int("m (clients)", m)
    n_groups = check_positive_int("n_groups", n_groups, minimum=0)
    rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    groups = []
    while len(groups) < n_groups:
        pick = rng.random(m) < 0.5
        if pick.any():
            groups.append(tuple(int(i) for i in np.flatnonzero(pick)))
    if include_full:
        groups.append(tuple(range(m)))
    if not groups:
        raise ConfigError("n_groups=0 without include_full leaves no group to test; expected n_groups >= 1")
    return groups


AGGREGATES = ("marginal", "mean", "sum")
DEFAULT_AGGREGATE = "marginal"


def check_aggregate(aggregate: str) -> str:
    if aggregate not in AGGREGATES:
        raise ConfigError(f"aggregate = {aggregate!r}: expected one of {', '.join(AGGREGATES)}")
    return aggregate


def marginal_groups(m: int) -> list[tuple[int, ...]]:
    """The ``"marginal"`` design: each client alone, each leave-one-out group, then the full set
    (each distinct group once: 2m + 1 tests for m >= 3, 3 for m = 2, 1 for m = 1)."""
    m = check_positive_int("m (clients)", m)
    everyone = tuple(range(m))
    alone = [(j,) for j in range(m)]
    left_out = [everyone[:j] + everyone[j + 1:] for j in range(m)] if m > 1 else []
    return list(dict.fromkeys(alone + left_out + [everyone]))


def marginal_scores(groups: Sequence[tuple[int, ...]], group_scores: np.ndarray, m: int) -> np.ndarray:
    """(m,) ½ [I({j}) + I(N) − I(N ∖ {j})] from the scores of the groups (I(∅) = 0)."""
    by_group = dict(zip(check_groups(groups, m), np.asarray(group_scores, dtype=np.float64)))
    by_group[()] = 0.0
    everyone = tuple(range(m))
    need = marginal_groups(m)
    missing = [g for g in need if g not in by_group]
    if missing:
        raise ConfigError(
            f"aggregate = 'marginal' needs every client alone, every leave-one-out group and the full "
            f"set (marginal_groups({m})); missing {missing[:3]}{' ...' if len(missing) > 3 else ''}"
        )
    return np.array([0.5 * (by_group[(j,)] + by_group[everyone] - by_group[everyone[:j] + everyone[j + 1:]])
                     for j in range(m)])


def client_scores(groups: Sequence[tuple[int, ...]], group_scores: np.ndarray, m: int,
                  aggregate: str = DEFAULT_AGGREGATE) -> np.ndarray:
    """(m,) each client's score from the groups it belongs to (NaN for a client in none).

    ``marginal``: :func:`marginal_scores` (the groups must hold :func:`marginal_groups`);
    ``sum``: the VF-PS reference accumulates the MI of every group a party is in
    (``reference-facts.md``), which also rewards being in many groups; ``mean``: the dynamic
    VF-PS report's wording (section 2.1.2), which does not, but still depends on who a client was
    grouped with. See the module docstring.
    """
    check_aggregate(aggregate)
    if aggregate == "marginal":
        return marginal_scores(groups, group_scores, m)
    groups = check_groups(groups, m)
    total, count = np.zeros(m), np.zeros(m)
    for g, s in zip(groups, np.asarray(group_scores, dtype=np.float64)):
        total[list(g)] += s
        count[list(g)] += 1
    if aggregate == "sum":
        return np.where(count > 0, total, np.nan)
    return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def subsample_queries(n: int, queries, rng: np.random.Generator) -> np.ndarray | None:
    """None/array pass through; an int draws that many distinct query samples (all if >= n)."""
    if queries is None or not np.isscalar(queries):
        return queries
    size = check_positive_int("queries", queries)
    return None if size >= n else np.sort(rng.choice(n, size=size, replace=False))


def group_test(blocks: Sequence[np.ndarray], labels, *, groups: Sequence[tuple[int, ...]] | None = None,
               n_groups: int = DEFAULT_GROUPS, k: int = DEFAULT_K, queries=None, seed: int = DEFAULT_SEED,
               batched: bool = True, psi: str = "approx", fagin_batch: int | None = None,
               aggregate: str = DEFAULT_AGGREGATE, **knn_kwargs) -> GroupTestResult:
    """Score ``groups`` (default: :func:`marginal_groups` for ``aggregate="marginal"``, else
    :func:`random_groups` from ``seed``) and derive per-client scores.

    ``queries``: None (every sample), an int (that many random samples, drawn from ``seed``) or
    explicit sample indices. Extra keywords (``backend``, ``precision``, ``tile``, ``workers``) go to
    :func:`knn_mi`. ``fagin_batch=b`` scores the groups with the Fagin-inspired variant instead
    (:func:`~fedstream.selection.fagin.fagin_group_mi`, slices of b list entries; a Python loop per
    query, so for few queries): the same scores, with the list entries read in ``list_reads``.
    """
    blocks = check_blocks(blocks)
    m, n = len(blocks), blocks[0].shape[0]
    groups, q = plan_tests(m, n, groups=groups, n_groups=n_groups, queries=queries, seed=seed,
                           aggregate=aggregate)
    distinct = list(dict.fromkeys(groups))
    reads = None
    if fagin_batch is not None:  # the Fagin-inspired estimator: same scores, list entries counted
        by_group, reads = {}, 0
        for g in distinct:
            by_group[g], r, _ = fagin_group_mi(blocks, labels, g, k=k, queries=q, batch=fagin_batch, psi=psi)
            reads += r
        q_used = check_queries(q, n)
    elif batched:
        res = knn_mi(blocks, labels, distinct, k=k, queries=q, psi=psi, **knn_kwargs)
        by_group, q_used = dict(zip(distinct, res.scores)), res.queries
    else:
        by_group = {}
        for g in distinct:
            res = knn_mi(blocks, labels, [g], k=k, queries=q, psi=psi, **knn_kwargs)
            by_group[g], q_used = res.scores[0], res.queries
    return _result(groups, by_group, m, aggregate, q_used, reads)


def _result(
    groups, by_group: dict, m: int, aggregate: str, queries: np.ndarray, reads=None
) -> GroupTestResult:
    """Per-test scores (one per drawn group, repeats included) and the clients' aggregate."""
    scores = np.array([by_group[g] for g in groups])
    return GroupTestResult(
        groups=groups,
        group_scores=scores,
        client_scores=client_scores(groups, scores, m, aggregate),
        queries=queries,
        list_reads=reads,
    )


def plan_tests(
    m: int,
    n: int,
    *,
    groups: Sequence[tuple[int, ...]] | None = None,
    n_groups: int = DEFAULT_GROUPS,
    queries=None,
    seed: int = DEFAULT_SEED,
    aggregate: str = DEFAULT_AGGREGATE,
) -> tuple[list[tuple[int, ...]], np.ndarray | None]:
    """The groups and query samples :func:`group_test` uses for ``seed``: ``(groups, queries)``.

    Unless given, the groups are :func:`marginal_groups` (``aggregate="marginal"``, no draw) or
    drawn first by :func:`random_groups`; then the query subsample, from one generator; ``queries``
    comes back None (every sample), or as sorted indices. A VF-PS server calls this before asking
    the clients for their local distances from those queries (:func:`group_test_from_distances`).
    """
    rng = np.random.default_rng(seed)
    if groups is None:
        marginal = check_aggregate(aggregate) == "marginal"
        groups = marginal_groups(m) if marginal else random_groups(m, n_groups, rng=rng)
    return check_groups(groups, m), subsample_queries(n, queries, rng)


def group_test_from_distances(
    local,
    labels,
    groups: Sequence[tuple[int, ...]],
    *,
    queries=None,
    k: int = DEFAULT_K,
    psi: str = "approx",
    aggregate: str = DEFAULT_AGGREGATE,
) -> GroupTestResult:
    """:func:`group_test` from the clients' local squared distances instead of their blocks.

    ``local``: (m, |Q|, n), client j's distances from each query (sorted ``queries``; None: every
    sample) to every sample; ``groups`` and ``queries`` from :func:`plan_tests`. Each distinct group
    is scored once by :func:`~fedstream.selection.knn_mi.knn_mi_from_distances`; with exact distances
    the result equals ``group_test(blocks, ...)`` for the same groups and queries.
    """
    local = check_local_distances(local)
    m = local.shape[0]
    groups = check_groups(groups, m)
    distinct = list(dict.fromkeys(groups))
    res = knn_mi_from_distances(local, labels, distinct, k=k, queries=queries, psi=psi)
    return _result(groups, dict(zip(distinct, res.scores)), m, aggregate, res.queries)
