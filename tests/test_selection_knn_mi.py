"""The vectorised VF-PS MI estimate equals the per-sample reference, and agrees with scikit-learn's KSG."""

import numpy as np
import pytest

from fedstream.errors import ConfigError
from fedstream.selection._engine import sum_plan
from fedstream.selection._layout import choose
from fedstream.selection.digamma import psi
from fedstream.selection.knn_mi import knn_counts, knn_mi, mi_from_counts
from fedstream.selection.reference import (
    reference_m_counts,
    reference_mi,
    reference_scores,
)
from fedstream.selection.synthetic import informative_clients

GROUPS = [(0,), (1,), (2,), (3,), (0, 1, 2, 3), (1, 3), (1, 3), (0, 2, 3)]


def float_data(n=240, seed=0):
    return informative_clients(n, [0.0, 0.5, 1.0, 2.0], dims=3, classes=3, seed=seed)


def int_data(n=240, seed=1, width=30):
    """Small integers: many exactly tied distances, the hard case for tie handling."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, n)
    return [rng.integers(0, 4, (n, width)) + y[:, None] * s for s in (0, 1, 1, 2)], y


@pytest.mark.parametrize("data", [float_data, int_data])
@pytest.mark.parametrize("backend", ["dots", "int8", "direct"])
@pytest.mark.parametrize("tile,workers", [(None, None), ((37, 50), 2), ((240, 7), 1), (16, 2)])
def test_counts_equal_reference(data, backend, tile, workers):
    if backend == "int8" and data is float_data:
        pytest.skip("the int8 backend takes integer features only (test_int8_needs_small_integers)")
    blocks, y = data()
    ref = reference_m_counts(blocks, y, GROUPS, k=5)
    got, q = knn_counts(blocks, y, GROUPS, k=5, backend=backend, tile=tile, workers=workers)
    np.testing.assert_array_equal(q, np.arange(y.size))
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("backend", ["dots", "int8", "direct"])
def test_query_subset_equals_reference(backend):
    blocks, y = int_data(seed=4)
    queries = np.random.default_rng(0).choice(y.size, 41, replace=False)
    ref = reference_m_counts(blocks, y, GROUPS, k=4, queries=queries)
    got, q = knn_counts(blocks, y, GROUPS, k=4, backend=backend, tile=(8, 33), queries=queries)
    np.testing.assert_array_equal(q, np.sort(queries))
    np.testing.assert_array_equal(got, ref)


def test_int_data_runs_exactly_in_int8_or_float32():
    blocks, y = int_data()
    got = choose([np.asarray(b) for b in blocks], "auto", "auto")
    assert got[:3] == ("dots", np.int8, True)
    assert got.shifts == [int(np.asarray(b).min()) + 128 for b in blocks]  # each client's minimum to -128
    assert choose([np.asarray(b) for b in blocks], "dots", "auto")[:3] == ("dots", np.float32, True)
    wide = [np.asarray(b) * 40 for b in blocks]  # integers spanning more than 256 values: float32 GEMM
    assert choose(wide, "auto", "auto") == ("dots", np.float32, True, None)
    assert choose([np.asarray(b) for b in blocks], "direct", "auto")[:2] == ("direct", np.float32)
    real, _ = float_data()
    assert choose(real, "auto", "auto") == ("direct", np.float64, False, None)


def test_int8_needs_small_integers():
    blocks, y = int_data()
    with pytest.raises(ConfigError, match="needs integer features spanning at most 256 values"):
        knn_mi([b * 40 for b in blocks], y, GROUPS, k=5, backend="int8")
    with pytest.raises(ConfigError, match="backend 'int8' needs integer"):
        knn_mi(float_data()[0], float_data()[1], GROUPS, k=5, backend="int8")


def test_int8_equals_float32_gemm_on_pixels():
    """Pixel-like strips (0..255, blank rows, near-duplicates): the int8 path's counts are the
    float32 GEMM path's (the implementation before it) and the reference's."""
    rng = np.random.default_rng(3)
    y = rng.integers(0, 4, 300)
    base = rng.integers(0, 256, (6, 40))
    rows = base[rng.integers(0, 6, 300)] + rng.integers(-3, 4, (300, 40)) * (rng.random((300, 1)) < 0.7)
    rows = np.clip(rows, 0, 255).astype(np.uint8)
    rows[rng.random(300) < 0.2] = 0  # blank rows: zero radii
    blocks = [rows[:, :10], rows[:, 10:25], rows[:, 25:]]
    groups = [(0,), (1,), (2,), (1, 2), (0, 2), (0, 1), (0, 1, 2)]
    ref = reference_m_counts(blocks, y, groups, k=6)
    for tile in (None, (32, 70), (300, 17)):
        got8, _ = knn_counts(blocks, y, groups, k=6, backend="int8", tile=tile, workers=2)
        got32, _ = knn_counts(blocks, y, groups, k=6, backend="dots", tile=tile, workers=2)
        np.testing.assert_array_equal(got8, ref)
        np.testing.assert_array_equal(got32, ref)


def test_forced_float32_is_close_on_real_data():
    blocks, y = float_data(seed=5)
    exact = knn_mi(blocks, y, GROUPS, k=5).scores
    fast = knn_mi(blocks, y, GROUPS, k=5, precision="float32").scores
    np.testing.assert_allclose(fast, exact, atol=1e-3)


@pytest.mark.parametrize("psi_name", ["approx", "exact"])
def test_scores_equal_reference(psi_name):
    blocks, y = float_data(seed=2)
    res = knn_mi(blocks, y, GROUPS, k=5, psi=psi_name)
    np.testing.assert_array_equal(res.scores, reference_scores(blocks, y, GROUPS, k=5, psi=psi_name))
    assert res.groups == [tuple(sorted(g)) for g in GROUPS] and res.k == 5
    assert (res.m_counts >= 5).all()


def test_eq1_by_hand():
    """Two well-separated classes in 1-D: every m_q = K, so eq. (1) is ψ(N) − ψ(N_q) (+ ψ(K) − ψ(K))."""
    x = np.array([[0.0], [0.1], [0.3], [10.0], [10.1], [10.3], [10.7]])  # no tie at any radius
    y = np.array([0, 0, 0, 1, 1, 1, 1])
    res = knn_mi([x], y, [(0,)], k=2, psi="exact")
    np.testing.assert_array_equal(res.m_counts, 2)
    expected = np.mean([psi(7, "exact") - psi(3 if c == 0 else 4, "exact") for c in y])
    assert res.scores[0] == pytest.approx(expected, abs=1e-12)


def test_mi_from_counts_matches_formula():
    y = np.array([0, 0, 0, 1, 1, 1])
    counts = np.array([[2, 3, 2, 4, 2, 2]])
    expect = np.mean([psi(6) - psi(3) + psi(2) - psi(c) for c in counts[0]])
    assert mi_from_counts(counts, y, np.arange(6), 2)[0] == pytest.approx(expect)


def test_digamma_variants():
    from scipy.special import digamma

    n = np.arange(1, 200)
    np.testing.assert_allclose(psi(n, "exact"), digamma(n), rtol=1e-12, atol=1e-12)
    assert abs(psi(100, "approx") - digamma(100)) < 1e-4  # ln x − 1/(2x) is close for large x


def test_sum_plan_rows_are_group_sums():
    rng = np.random.default_rng(0)
    m = 9
    groups = [tuple(sorted(rng.choice(m, rng.integers(1, m + 1), replace=False).tolist())) for _ in range(25)]
    parent, client, grow = sum_plan(groups, m)
    rows = [np.eye(m)[j] for j in range(m)]
    for p, c in zip(parent, client):
        rows.append(rows[p] + rows[c])
    for g, r in zip(groups, grow):
        np.testing.assert_array_equal(rows[r], np.isin(np.arange(m), g).astype(float))
    assert len(parent) < sum(len(g) - 1 for g in groups)  # subsets shared between groups


def test_sklearn_ksg_agrees_exactly_in_one_dimension():
    """With one feature per client and exact ψ, eq. (1) is scikit-learn's estimator (clipped at 0)."""
    from sklearn.feature_selection import mutual_info_classif

    blocks, y = informative_clients(1200, [0.0, 0.3, 0.7, 1.2, 2.0, 0.5], dims=1, classes=4, seed=3)
    sk = mutual_info_classif(np.hstack(blocks), y, n_neighbors=5, random_state=0)
    ours = knn_mi(blocks, y, [(j,) for j in range(6)], k=5, psi="exact").scores
    np.testing.assert_allclose(np.maximum(ours, 0.0), sk, atol=1e-9)


def test_rank_order_agrees_with_sklearn_for_known_informative_clients():
    from sklearn.feature_selection import mutual_info_classif

    strengths = [0.0, 0.3, 0.7, 1.2, 2.0, 0.5]
    blocks, y = informative_clients(1500, strengths, dims=3, classes=4, seed=3)
    sk = np.array([mutual_info_classif(b, y, n_neighbors=5, random_state=0).sum() for b in blocks])
    ours = knn_mi(blocks, y, [(j,) for j in range(len(blocks))], k=5).scores
    np.testing.assert_array_equal(np.argsort(ours), np.argsort(sk))
    np.testing.assert_array_equal(np.argsort(ours), np.argsort(strengths))


def test_mnist_columns_equal_reference(data_root):
    from fedstream.bench.selection import mnist_blocks

    blocks, y = mnist_blocks(data_root, 1500)
    queries = np.arange(0, 1500, 7)
    groups = [(0,), (1,), (1, 2), (0, 1, 2, 3)]
    got = knn_mi(blocks, y, groups, k=10, queries=queries, tile=(64, 256))
    for g, score in zip(groups, got.scores):
        assert score == reference_mi(blocks, y, g, k=10, queries=queries)
    assert got.scores[1] > got.scores[0]  # the central columns carry more of the digit than the left edge
