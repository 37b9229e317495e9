"""Vectorised VF-PS mutual-information score of groups of clients (eq. (1) of the Dynamic VF-PS report).

For a group G of clients the score is

    I(G) = (1/|Q|) Σ_{q∈Q} ( ψ(N) − ψ(N_q) + ψ(K) − ψ(m_q) )                              (1)

with N the number of samples, N_q the number of samples of q's class, r_q the *global* distance
from q to its K-th nearest neighbour of q's class, and m_q the number of samples of any class, q
included, strictly inside r_q, or at distance 0 when r_q = 0: the tie rule of Ross's estimator as
scikit-learn implements it (``_compute_mi_cd``), under which exact duplicates of q count against
it whatever their class (a constant client scores ψ(K) − mean ψ(N_q) < 0, not ln C). Without ties
m_q = K + #{other-class samples closer than r_q}. The global squared distance of two samples is the sum
over the group's clients of their *local* squared Euclidean distances, so each client only ever
contributes distances, never features; the query itself is left out of its own neighbours
(leave-one-out, as scikit-learn's KSG estimator does). This is Ross's (2014) estimator of the MI
between the group's features and the label.

How it is made fast (no Python loop per sample):

* one pass over the data scores *all* groups: per tile of query rows × candidate columns, each
  client's local distances are computed once and every group sums its members' rows (the batched
  group testing of VF-PS, which reuses neighbour computations across groups);
* samples are sorted by class. Phase 1 visits only same-class tiles (about 1/C of all pairs) and
  keeps, per group and query, the K smallest same-class distances: the K-th is the radius r_q
  (and counts the same-class samples at distance 0 beyond K when r_q = 0).
  Phase 2 visits cross-class tiles once per unordered pair and counts, for both samples, the
  other-class neighbours inside their radius;
* local distances come from one BLAS GEMM per client and tile (``backend="dots"``, for clients with
  many features) or from a fused numba loop over the features (``backend="direct"``, few features).
  ``precision="auto"`` runs the GEMM in float32, and the distance arithmetic in int32, only when
  that is exact (integer-valued features with d_j · max|x|² < 2²⁴, e.g. MNIST pixels), else in
  float64, recomputing directly every distance that the GEMM form loses to cancellation
  (near-duplicates; see ``_kernels``);
* tiles are spread over ``workers`` threads (default: the available cores), each running a
  single-threaded BLAS and numba kernels that release the GIL (see ``_engine`` and ``_kernels``).

A scipy ``cKDTree`` was measured as the alternative: on a 196-pixel MNIST client, 500 same-class
K-NN queries take 0.3 s (about 36 s for the same-class phase alone of 60,000 queries, before the
range counts), because trees degrade to brute force at that dimension; blocked GEMM is faster.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fedstream.errors import DataError
from fedstream.selection._engine import Engine
from fedstream.selection._layout import prepare
from fedstream.selection.digamma import check_psi
from fedstream.selection.digamma import (
    psi as digamma,  # the parameter name psi is the ψ variant
)
from fedstream.selection.validation import (
    check_blocks,
    check_groups,
    check_k,
    check_labels,
    check_queries,
)


@dataclass(frozen=True)
class GroupMI:
    """Result of :func:`knn_mi`: one score per group and the per-query counts behind it."""

    groups: list[tuple[int, ...]]
    scores: np.ndarray  # (G,) eq. (1) per group
    m_counts: np.ndarray  # (G, |Q|) m_q per group and query
    queries: np.ndarray  # (|Q|,) sorted sample indices the columns of m_counts refer to
    k: int
    psi: str


def knn_counts(blocks: Sequence[np.ndarray], labels, groups, *, k: int = 10, queries=None,
               backend: str = "auto", precision: str = "auto", tile=None,
               workers: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """m_q of eq. (1) for every group and query: ``(m_counts (G, |Q|), queries (|Q|,))``.

    ``blocks[j]`` is client j's (n, d_j) feature block, ``labels`` the n class ids (the server's),
    ``groups`` a list of client-index tuples, ``queries`` None (all samples) or sample indices.
    """
    blocks = check_blocks(blocks)
    y = check_labels(labels, blocks[0].shape[0])
    groups = check_groups(groups, len(blocks))
    q = check_queries(queries, y.shape[0])
    k = check_k(k, y, q)
    prep = prepare(blocks, y, q, backend, precision)
    engine = Engine(prep, groups, k, tile, workers)
    radius, same = engine.radii()
    inside = 1 + same + engine.counts(engine.bounds(radius))  # the query, its class, the others
    # rows follow the sorted order of the query prefix; map back to ascending indices
    return inside[:, prep.pos_of_query], q


def mi_from_counts(
    m_counts: np.ndarray, labels, queries: np.ndarray, k: int, psi: str = "approx"
) -> np.ndarray:
    """Eq. (1) per group from the counts m_q: mean over queries of ψ(N) − ψ(N_q) + ψ(K) − ψ(m_q).

    The mean is an exactly rounded sum (``math.fsum``), so it does not depend on the order of the
    queries or the layout of ``m_counts``; the reference uses the same expression.
    """
    y = np.unique(np.asarray(labels), return_inverse=True)[1]
    n, n_class = y.shape[0], np.bincount(y)[y[queries]]
    const = digamma(n, psi) - digamma(n_class, psi) + digamma(k, psi)
    terms = const - digamma(np.atleast_2d(m_counts), psi)
    return np.array([math.fsum(row) / row.size for row in terms])


def knn_mi(blocks: Sequence[np.ndarray], labels, groups, *, k: int = 10, queries=None, psi: str = "approx",
           backend: str = "auto", precision: str = "auto", tile=None, workers: int | None = None) -> GroupMI:
    """Eq. (1) for every group in one batched pass; see the module docstring for the method.

    Example::

        blocks = [X[:, 0:196], X[:, 196:392]]           # two clients' pixels
        res = knn_mi(blocks, y, [(0,), (1,), (0, 1)], k=10)
        res.scores                                       # one MI estimate per group
    """
    check_psi(psi)
    counts, q = knn_counts(blocks, labels, groups, k=k, queries=queries, backend=backend,
                           precision=precision, tile=tile, workers=workers)
    groups = check_groups(groups, len(blocks))
    return GroupMI(groups=groups, scores=mi_from_counts(counts, labels, q, k, psi), m_counts=counts,
                   queries=q, k=k, psi=psi)


DISTANCE_CHUNK = 256  # query rows per chunk of the distance-based count (bounds its temporaries)


def check_local_distances(local, m: int | None = None) -> np.ndarray:
    """(m, |Q|, n) float64 local squared distances; DataError unless finite and non-negative."""
    a = np.asarray(local, dtype=np.float64)
    if a.ndim != 3 or 0 in a.shape or (m is not None and a.shape[0] != m):
        raise DataError(
            f"local distances must be a (clients{'' if m is None else f' = {m}'}, queries, samples) "
            f"array, got shape {a.shape}"
        )
    if not np.isfinite(a).all() or (a < 0).any():
        raise DataError("local distances must be finite and non-negative (squared Euclidean distances)")
    return a


def counts_from_distances(dist: np.ndarray, y: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    """(|Q|,) m_q of eq. (1) from the global squared distances ``dist`` (|Q|, n) of each query to
    every sample.

    Vectorised :func:`~fedstream.selection.reference.m_from_distances` (same rule: r_q = distance of
    q's K-th same-class neighbour, the query itself left out; m_q = 1 + the other samples strictly
    inside r_q, or at distance 0 when r_q = 0). ``y``: class codes, ``queries``: sorted indices.
    """
    nq, out = queries.size, np.empty(queries.size, dtype=np.int64)
    for a in range(0, nq, DISTANCE_CHUNK):
        b = min(nq, a + DISTANCE_CHUNK)
        d, rows = dist[a:b], np.arange(b - a)
        same = y[None, :] == y[queries[a:b], None]
        same[rows, queries[a:b]] = False  # the query itself: neither a neighbour nor a candidate
        radius = np.partition(np.where(same, d, np.inf), k - 1, axis=1)[:, k - 1, None]
        inside = (d < radius) | ((radius <= 0) & (d <= 0))
        inside[rows, queries[a:b]] = False
        out[a:b] = 1 + inside.sum(axis=1)
    return out


def knn_mi_from_distances(
    local, labels, groups, *, k: int = 10, queries=None, psi: str = "approx"
) -> GroupMI:
    """Eq. (1) for every group from the clients' *local* squared distances, as the VF-PS server computes it.

    ``local[j]`` is client j's (|Q|, n) array: its local squared distance from each query (the rows,
    in the sorted order of ``queries``, None meaning every sample) to every sample. A group's global
    distance is the sum of its members' arrays; m_q comes from :func:`counts_from_distances` and the
    score from :func:`mi_from_counts`, so the result equals :func:`knn_mi` on the blocks whenever the
    local distances are exact (e.g. integer features in float32 below 2**24).
    """
    check_psi(psi)
    local = check_local_distances(local)
    m, n = local.shape[0], local.shape[2]
    y = check_labels(labels, n)
    groups = check_groups(groups, m)
    q = check_queries(queries, n)
    if q.size != local.shape[1]:
        raise DataError(
            f"local distances hold {local.shape[1]} query rows, expected one per query ({q.size})"
        )
    k = check_k(k, y, q)
    counts = np.stack([counts_from_distances(local[list(g)].sum(axis=0), y, q, k) for g in groups]) \
        if groups else np.zeros((0, q.size), dtype=np.int64)
    return GroupMI(
        groups=groups,
        scores=mi_from_counts(counts, labels, q, k, psi),
        m_counts=counts,
        queries=q,
        k=k,
        psi=psi,
    )


def knn_mi_scores(blocks: Sequence[np.ndarray], labels, groups, **kwargs) -> np.ndarray:
    """Just the (G,) scores of :func:`knn_mi`."""
    return knn_mi(blocks, labels, groups, **kwargs).scores
