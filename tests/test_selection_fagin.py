"""Fagin / threshold algorithm: exact global K nearest from per-client sorted lists, with the reads
counted."""

import numpy as np
import pytest

from fedstream.errors import ConfigError, DataError
from fedstream.selection.fagin import fagin_group_mi, fagin_knn, fagin_m, threshold_knn
from fedstream.selection.reference import (
    local_sq_distances,
    m_from_distances,
    reference_mi,
)
from fedstream.selection.synthetic import informative_clients


def brute_force(local, k, exclude=None):
    dist = local.sum(axis=0)
    ids = np.arange(dist.size)
    if exclude is not None:
        ids = ids[ids != exclude]
    order = np.lexsort((ids, dist[ids]))[:k]
    return ids[order], dist[ids][order]


def correlated_local(m, n, seed, shared=1.0):
    """Local distances sharing a common component, as clients seeing the same objects do."""
    rng = np.random.default_rng(seed)
    base = rng.random(n) * shared
    return base[None, :] + rng.random((m, n))


@pytest.mark.parametrize("m,n,k,batch", [(1, 50, 5, 1), (3, 200, 10, 1), (4, 300, 1, 7), (5, 120, 30, 100)])
def test_threshold_and_fagin_equal_brute_force(m, n, k, batch):
    local = correlated_local(m, n, seed=m * n)
    for exclude in (None, 3):
        want_ids, want_dist = brute_force(local, k, exclude)
        for method in (threshold_knn, fagin_knn):
            res = method(local, k, exclude=exclude, batch=batch)
            np.testing.assert_array_equal(res.ids, want_ids)
            np.testing.assert_allclose(res.distances, want_dist)
            assert res.sorted_reads == m * res.depth <= m * (n - (exclude is not None))


def test_reads_are_counted_exactly_when_lists_agree():
    """Identical orders in every list: TA must read K entries per list, then one more to see τ exceed
    the K-th."""
    order = np.random.default_rng(0).permutation(100)
    local = np.zeros((3, 100))
    local[:, order] = np.arange(100, dtype=float)[None, :] * np.array([[1.0], [2.0], [0.5]])
    res = threshold_knn(local, 8)
    np.testing.assert_array_equal(res.ids, order[:8])
    assert res.depth == 9 and res.sorted_reads == 27
    assert res.random_reads == 2 * 9  # each new id fetched from the two other lists
    fa = fagin_knn(local, 8, batch=1)
    assert fa.depth == 8 and fa.sorted_reads == 24 and fa.random_reads == 0


def test_correlated_lists_are_read_only_partly():
    local = correlated_local(4, 5000, seed=1, shared=20.0)
    res = threshold_knn(local, 10, batch=10)
    assert res.sorted_reads < 0.2 * local.size
    np.testing.assert_array_equal(res.ids, brute_force(local, 10)[0])


def test_fagin_m_equals_reference_scan_with_ties():
    rng = np.random.default_rng(5)
    y = rng.integers(0, 3, 150)
    local = rng.integers(0, 4, (3, 150)).astype(float)  # many tied global distances
    for query in range(0, 150, 13):
        want = m_from_distances(local.sum(axis=0), y, query, 4)
        for batch in (1, 5, 200):
            m_q, reads, _ = fagin_m(local, y, query, 4, batch=batch)
            assert m_q == want
            assert reads <= 3 * 149


def test_fagin_group_mi_equals_reference():
    blocks, y = informative_clients(200, [0.2, 1.0, 2.0], dims=2, classes=3, seed=0)
    for group in [(0,), (1, 2), (0, 1, 2)]:
        score, reads, random_reads = fagin_group_mi(blocks, y, group, k=5, batch=10)
        assert score == reference_mi(blocks, y, group, k=5)
        assert 0 < reads < len(group) * 200 * 199
        assert (random_reads > 0) == (len(group) > 1)  # a single list needs no random access


def test_local_distances_match_a_client_share():
    x = np.array([[0.0, 1.0], [3.0, 5.0]])
    np.testing.assert_array_equal(local_sq_distances(x, 0), [0.0, 25.0])


def test_bad_inputs():
    with pytest.raises(DataError, match="2-D"):
        threshold_knn(np.zeros(5), 1)
    with pytest.raises(DataError, match="non-negative"):
        threshold_knn(-np.ones((2, 5)), 1)
    with pytest.raises(ConfigError, match="k=9 exceeds the 4 candidates"):
        threshold_knn(np.ones((2, 5)), 9, exclude=0)
    with pytest.raises(ConfigError, match="batch must be an integer >= 1"):
        fagin_knn(np.ones((2, 5)), 1, batch=0)
    with pytest.raises(ConfigError, match="exclude must be a candidate index"):
        fagin_knn(np.ones((2, 5)), 1, exclude=7)
