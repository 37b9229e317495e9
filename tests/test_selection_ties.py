"""Tied distances (issue 20): m_q counts ties as the Ross / KSG estimator of scikit-learn does.

Radius r_q = distance of q's K-th same-class neighbour; m_q = the points of the whole set (q
included) strictly inside r_q, or at distance 0 when r_q = 0. Before the fix a query with K exact
same-class duplicates got m_q = K, the largest possible score, so a constant client scored ln C.
"""

import numpy as np
import pytest

from fedstream.selection.fagin import fagin_group_mi
from fedstream.selection.knn_mi import counts_from_distances, knn_counts, knn_mi
from fedstream.selection.reference import local_sq_distances, reference_m_counts, reference_mi


def sklearn_mi_cd(x: np.ndarray, y: np.ndarray, k: int) -> float:
    from sklearn.feature_selection._mutual_info import _compute_mi_cd

    return float(_compute_mi_cd(x.astype(np.float64).ravel(), y, k))


def few_valued(n=600, classes=10, seed=0):
    """1-feature clients: constant, 3-valued noise, 3-valued informative, two integer-rounded
    signals (about 50 and 125 values: ties at distance 0 and at the radius), integer noise."""
    rng = np.random.default_rng(seed)
    y = rng.permutation(np.arange(n) % classes)
    blocks = [
        np.zeros((n, 1)),
        rng.integers(0, 3, (n, 1)).astype(float),
        (y[:, None] % 3).astype(float),
        np.rint(4 * (y[:, None] + rng.normal(size=(n, 1)))),
        np.rint(3 * rng.normal(size=(n, 1))),
        np.rint(10 * (y[:, None] + rng.normal(size=(n, 1)))),
    ]
    return blocks, y


@pytest.mark.parametrize("k", [3, 10])
def test_equals_sklearn_ross_estimator_with_duplicates(k):
    blocks, y = few_valued()
    ours = knn_mi(blocks, y, [(j,) for j in range(len(blocks))], k=k, psi="exact").scores
    sk = np.array([sklearn_mi_cd(b, y, k) for b in blocks])
    np.testing.assert_allclose(np.maximum(ours, 0.0), sk, atol=1e-6)
    assert (sk[[3, 5]] > 0.5).all()  # informative clients, compared unclipped


def test_constant_and_few_valued_noise_clients_score_about_zero():
    """As MI estimates (clipped at 0, as scikit-learn does) both are 0; unclipped they are below 0
    (every duplicate counts against the query), so they rank last."""
    blocks, y = few_valued()
    scores = knn_mi(blocks, y, [(0,), (1,)], k=10).scores
    assert (scores < 0.0).all(), scores  # before the fix: ln 10 - 1/20 + 1/(2 * 60) = 2.26 for both


@pytest.mark.parametrize("backend", ["dots", "int8", "direct"])
@pytest.mark.parametrize("tile,workers", [(None, None), ((37, 50), 2), ((16, 7), 1)])
def test_fast_path_counts_ties_like_the_reference(backend, tile, workers):
    blocks, y = few_valued(n=300, classes=3, seed=2)
    blocks = [np.hstack([b, b[::-1]]) for b in blocks]  # 2 features, still few-valued
    groups = [(0,), (1,), (2,), (3,), (1, 2), (0, 1, 4), (0, 1, 2, 3, 4)]
    ref = reference_m_counts(blocks, y, groups, k=4)
    got, _ = knn_counts(blocks, y, groups, k=4, backend=backend, tile=tile, workers=workers)
    np.testing.assert_array_equal(got, ref)
    assert (ref[0] == y.size).all()  # the constant client: every sample is at distance 0


def test_distances_path_and_fagin_count_ties_like_the_reference():
    blocks, y = few_valued(n=120, classes=3, seed=3)
    q = np.arange(0, 120, 5)
    for g in [(0,), (1,), (1, 2), (0, 3)]:
        dist = np.stack([sum(local_sq_distances(blocks[j], int(i)) for j in g) for i in q])
        want = reference_m_counts(blocks, y, [g], k=4, queries=q)[0]
        np.testing.assert_array_equal(counts_from_distances(dist, y, q, 4), want)
        score, _, _ = fagin_group_mi(blocks, y, g, k=4, queries=q, batch=7)
        assert score == reference_mi(blocks, y, g, k=4, queries=q)


@pytest.mark.parametrize("backend", ["dots", "direct"])
def test_real_valued_duplicates_count_at_distance_zero(backend):
    """Exact duplicates of real-valued rows are at distance 0 in the fast path too (the GEMM form
    would leave them at ±1e-17, its cancellation error, and miss the zero radius)."""
    rng = np.random.default_rng(5)
    y = np.arange(200) % 4
    rows = rng.normal(size=(20, 6)) * 100.0
    blocks = [rows[rng.integers(0, 20, 200)], np.full((200, 2), 3.7), rows[rng.integers(0, 3, 200), :2]]
    groups = [(0,), (1,), (2,), (0, 1), (1, 2)]
    ref = reference_m_counts(blocks, y, groups, k=3)
    got, _ = knn_counts(blocks, y, groups, k=3, backend=backend, precision="float64")
    np.testing.assert_array_equal(got, ref)
