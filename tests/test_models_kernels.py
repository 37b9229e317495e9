"""The fused numba kernels equal the plain numpy formulas they replace."""

import numpy as np
import pytest

from fedstream.models.kernels import (
    dense_backward,
    dense_forward,
    softmax_cross_entropy_into,
)
from fedstream.optim.dlr import dlr_layer_update
from fedstream.optim.ogd import low_rank_descent

rng = np.random.default_rng(0)
TOL = dict(rtol=1e-5, atol=1e-5)


def arr(*shape):
    return rng.normal(size=shape).astype(np.float32)


@pytest.mark.parametrize("n,relu", [(1, True), (7, False)])
def test_dense_forward_and_backward(n, relu):
    X, W, b, G = arr(n, 13), arr(5, 13), arr(5), arr(n, 5)
    out = np.empty((n, 5), np.float32)
    dense_forward(X, W, b, relu, out)
    Z = X @ W.T + b
    Z = np.maximum(Z, 0) if relu else Z
    np.testing.assert_allclose(out, Z, **TOL)
    delta, grad_in = np.empty((n, 5), np.float32), np.empty((n, 13), np.float32)
    dense_backward(G, out, W, relu, delta, grad_in, True)
    D = G * (Z > 0) if relu else G
    np.testing.assert_allclose(delta, D, **TOL)
    np.testing.assert_allclose(grad_in, D @ W, **TOL)


def test_softmax_cross_entropy():
    z, y = arr(6, 10) * 5, rng.integers(0, 10, size=6)
    losses, grad = np.empty(6), np.empty((6, 10), np.float32)
    softmax_cross_entropy_into(z, y, losses, grad)
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    np.testing.assert_allclose(losses, -np.log(p[np.arange(6), y]), rtol=1e-5)
    p[np.arange(6), y] -= 1
    np.testing.assert_allclose(grad, p, **TOL)


@pytest.mark.parametrize("n", [1, 4])
def test_low_rank_descent(n):
    W, b, D, X = arr(5, 9), arr(5), arr(n, 5), arr(n, 9)
    W0, b0 = W.copy(), b.copy()
    low_rank_descent(W, b, D, X, 0.1)
    np.testing.assert_allclose(W, W0 - 0.1 * D.T @ X, **TOL)
    np.testing.assert_allclose(b, b0 - 0.1 * D.sum(0), **TOL)


@pytest.mark.parametrize("scale", [0.0, 0.05])
def test_dlr_layer_update(scale):
    W, b, S, Sb = arr(4, 6), arr(4), arr(4, 6), arr(4)
    U, V, D, X, pos = arr(3, 4), arr(3, 6), arr(1, 4), arr(1, 6), 1  # ring of 3; slot 1 leaves
    d, x, od0, ox0 = D[0], X[0], U[pos].copy(), V[pos].copy()
    W0, b0, S0, Sb0 = W.copy(), b.copy(), S.copy(), Sb.copy()
    dlr_layer_update(W, b, S, Sb, U, V, pos, D, X, 0.9, 0.9**3, scale)
    S_want = 0.9 * S0 + np.outer(d, x) - 0.9**3 * np.outer(od0, ox0)
    Sb_want = 0.9 * Sb0 + d - 0.9**3 * od0
    np.testing.assert_allclose(S, S_want, **TOL)
    np.testing.assert_allclose(Sb, Sb_want, **TOL)
    np.testing.assert_allclose(W, W0 - scale * S_want, **TOL)
    np.testing.assert_allclose(b, b0 - scale * Sb_want, **TOL)
    np.testing.assert_array_equal(U[pos], d)  # the newest factors take the leaving slot
    np.testing.assert_array_equal(V[pos], x)
