"""Plain per-sample VF-PS MI estimate: the obviously-correct oracle of the tests and of the bench.

One Python iteration per query sample and group, written straight from eq. (1) and the protocol:
each client j of the group computes its local squared Euclidean distances from the query to every
sample, the server adds them up, takes the radius r_q = the distance of the query's K-th nearest
same-class sample, and counts m_q = the samples (the query included) strictly inside r_q, or at
distance 0 when r_q = 0: the tie rule of Ross's estimator as scikit-learn implements it
(``_compute_mi_cd``). No tiling, no
sorting by class, no GEMM, no numba — slow on purpose, so that the fast path has something simple
to agree with.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from fedstream.selection.digamma import (
    psi as digamma,  # the parameter name psi is the ψ variant
)
from fedstream.selection.validation import (
    check_blocks,
    check_group_inputs,
    check_groups,
    check_k,
    check_labels,
    check_queries,
)


def local_sq_distances(block: np.ndarray, query: int) -> np.ndarray:
    """One client's share: squared Euclidean distances from sample ``query`` to every sample of its block."""
    diff = block.astype(np.float64) - block[query].astype(np.float64)
    return (diff * diff).sum(axis=1)


def reference_m(blocks: list[np.ndarray], y: np.ndarray, group: tuple[int, ...], query: int, k: int) -> int:
    """m_q of eq. (1) for one group and query (see :func:`m_from_distances`)."""
    return m_from_distances(sum(local_sq_distances(blocks[j], query) for j in group), y, query, k)


def m_from_distances(dist: np.ndarray, y: np.ndarray, query: int, k: int) -> int:
    """m_q from the global distances ``dist`` (n,) of ``query`` to every sample (its own is ignored).

    r_q = the K-th smallest distance to another sample of q's class; m_q = 1 (the query) + the other
    samples, of any class, with distance < r_q, or with distance 0 when r_q = 0. So duplicates of
    the query count against it whatever their class: a constant client gets m_q = N.
    """
    others = np.delete(np.arange(y.shape[0]), query)
    d = dist[others]
    radius = np.sort(d[y[others] == y[query]])[k - 1]
    inside = d < radius if radius > 0 else d <= 0
    return 1 + int(np.count_nonzero(inside))


def reference_mi(blocks: Sequence[np.ndarray], labels, group, *, k: int = 10, queries=None,
                 psi: str = "approx") -> float:
    """Eq. (1) for one group, with a Python loop over the query samples."""
    blocks, y, group, q, k = check_group_inputs(blocks, labels, group, k, queries, psi)
    n, class_count = y.shape[0], np.bincount(y)
    terms = []
    for i in q:
        m = reference_m(blocks, y, group, int(i), k)
        terms.append(float(digamma(n, psi) - digamma(class_count[y[i]], psi) + digamma(k, psi)
                           - digamma(m, psi)))
    return math.fsum(terms) / len(terms)  # exactly rounded, like mi_from_counts


def reference_m_counts(
    blocks: Sequence[np.ndarray], labels, groups, *, k: int = 10, queries=None
) -> np.ndarray:
    """(G, |Q|) m_q for every group and query, by the per-sample loop (for comparison with knn_counts)."""
    blocks = check_blocks(blocks)
    y = check_labels(labels, blocks[0].shape[0])
    groups = check_groups(groups, len(blocks))
    q = check_queries(queries, y.shape[0])
    k = check_k(k, y, q)
    return np.array([[reference_m(blocks, y, g, int(i), k) for i in q] for g in groups], dtype=np.int64)


def reference_scores(blocks: Sequence[np.ndarray], labels, groups, *, k: int = 10, queries=None,
                     psi: str = "approx") -> np.ndarray:
    """(G,) eq. (1) for each group, one :func:`reference_mi` call per group."""
    return np.array([reference_mi(blocks, labels, g, k=k, queries=queries, psi=psi) for g in groups])
