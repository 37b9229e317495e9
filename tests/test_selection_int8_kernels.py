"""The int8 path's phase-2 kernel (``count_int``) counts exactly what the generic kernel counts."""

import numpy as np
import pytest

from fedstream.selection import _kernels as K
from fedstream.selection._engine import sum_plan
from fedstream.selection._int8_kernels import CHUNK, ROW_BLOCK, count_int


def _tile(rows, cols, seed):
    """Int32 dot products and norms of small integer features (many tied distances), and bounds
    drawn around the distances so that counts are neither 0 nor everything."""
    rng = np.random.default_rng(seed)
    widths = (3, 5, 2, 4)
    a = [rng.integers(-3, 4, (rows, w)) for w in widths]
    b = [rng.integers(-3, 4, (cols, w)) for w in widths]
    dots = np.stack([x @ z.T for x, z in zip(a, b)]).astype(np.int32)
    nr = np.stack([(x * x).sum(axis=1) for x in a]).astype(np.int32)
    nc = np.stack([(z * z).sum(axis=1) for z in b]).astype(np.int32)
    return rng, dots, nr, nc


@pytest.mark.parametrize(
    "rows,cols", [(ROW_BLOCK * 3, CHUNK * 2 + 37), (ROW_BLOCK * 2 + 3, 19), (1, CHUNK + 1)]
)
@pytest.mark.parametrize("symmetric", [True, False])
def test_count_int_equals_generic_kernel(rows, cols, symmetric):
    rng, dots, nr, nc = _tile(rows, cols, seed=rows + cols)
    groups = [(0,), (1,), (2,), (3,), (1, 2, 3), (0, 2, 3), (0, 1, 3), (0, 1, 2), (0, 1, 2, 3), (1, 3)]
    parent, client, grow = sum_plan(groups, 4)
    G = len(groups)
    row_bound = rng.integers(0, 60, (G, rows)).astype(np.int32)
    col_bound = rng.integers(0, 60, (G, cols)).astype(np.int32)
    want_rows, want_cols = np.zeros((G, rows), np.int64), np.zeros((G, cols), np.int32)
    work = np.empty((4 + parent.shape[0]) * cols, np.int32)
    labels = (np.zeros(rows, np.int64), np.ones(cols, np.int64))  # rows and columns of two classes
    K.count_dots(dots, nr, nc, True, np.zeros((1, 1), np.float32), np.zeros(5, np.int64), 0, rows, *labels,
                 row_bound, col_bound, parent, client, grow, symmetric, want_rows, want_cols, work)
    got_rows, got_cols = np.zeros((G, rows), np.int64), np.zeros((G, cols), np.int32)
    block = np.empty((ROW_BLOCK, 4 + parent.shape[0], CHUNK), np.int32)
    count_int(dots, nr, nc, row_bound, col_bound, parent, client, grow, symmetric, got_rows, got_cols, block)
    np.testing.assert_array_equal(got_rows, want_rows)
    np.testing.assert_array_equal(got_cols, want_cols)
    # and the plain definition: d = |a|² + |b|² − 2 a·b per client, summed over the group
    d = nr[:, :, None] + nc[:, None, :] - 2 * dots.astype(np.int64)
    for g, members in enumerate(groups):
        dg = d[list(members)].sum(axis=0)
        np.testing.assert_array_equal(got_rows[g], (dg <= row_bound[g][:, None]).sum(axis=1))
        if symmetric:
            np.testing.assert_array_equal(got_cols[g], (dg <= col_bound[g][None, :]).sum(axis=0))
    assert 0 < got_rows.sum() < G * rows * cols
