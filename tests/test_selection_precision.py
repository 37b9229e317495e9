"""The ``dots`` backend agrees with the direct distances on near-duplicates (issue 20).

|a|² + |b|² − 2a·b cancels when a and b nearly coincide: before the fix, MNIST strip 0 with 1e-10
noise had m counts different from the reference on about half of 200 queries.
"""

import numpy as np
import pytest

from fedstream.selection.knn_mi import knn_counts, knn_mi
from fedstream.selection.reference import reference_m_counts, reference_scores


def near_duplicates(n=300, d=40, seed=0):
    """Rows of large norm, each drawn a few times with noise far below float64's cancellation error."""
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 256, (n // 3, d)).astype(np.float64)
    pick = rng.integers(0, n // 3, n)
    blocks = [base[pick] + 1e-9 * rng.normal(size=(n, d)), rng.normal(size=(n, 5)) * 1e3]
    return blocks, rng.integers(0, 3, n)  # duplicates of one row in different classes


@pytest.mark.parametrize("tile", [None, (32, 64)])
def test_dots_counts_equal_reference_on_near_duplicates(tile):
    blocks, y = near_duplicates()
    groups = [(0,), (1,), (0, 1)]
    ref = reference_m_counts(blocks, y, groups, k=3)
    got, _ = knn_counts(blocks, y, groups, k=3, backend="dots", tile=tile)
    np.testing.assert_array_equal(got, ref)


def test_mnist_strip_with_tiny_noise_dots_equals_direct_and_reference(data_root):
    from fedstream.bench.selection import mnist_blocks

    blocks, y = mnist_blocks(data_root, 2000)
    strip = blocks[0] + 1e-10 * np.random.default_rng(0).normal(size=blocks[0].shape)
    q = np.arange(200)
    ref = reference_m_counts([strip], y, [(0,)], k=10, queries=q)
    for backend in ("dots", "direct"):
        got, _ = knn_counts([strip], y, [(0,)], k=10, queries=q, backend=backend)
        np.testing.assert_array_equal(got, ref, err_msg=backend)
    score = knn_mi([strip], y, [(0,)], k=10, queries=q, backend="dots").scores
    assert score[0] == reference_scores([strip], y, [(0,)], k=10, queries=q)[0]
