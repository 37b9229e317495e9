"""Fused per-sample kernels of the dense layers (numba), writing into preallocated buffers.

Each kernel states its formula; the plain numpy/PyTorch versions they must equal are exercised by
``tests/test_models_kernels.py`` and by the reference-equivalence tests of the engine.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, fastmath=True)
def dense_forward(X, W, b, relu, out):  # pragma: no cover (jit)
    """out = X @ W.T + b, then max(out, 0) if ``relu``.  X (n, in), W (out, in), out (n, out)."""
    n, n_in = X.shape
    n_out = W.shape[0]
    for r in range(n):
        x = X[r]
        for i in range(n_out):
            w = W[i]
            acc = b[i]
            for j in range(n_in):
                acc += w[j] * x[j]
            out[r, i] = max(acc, 0.0) if relu else acc


@njit(cache=True, fastmath=True)
def dense_backward(G, Z, W, relu, delta, grad_in, need_input_grad):  # pragma: no cover (jit)
    """delta = G * (Z > 0) if ``relu`` else G;  grad_in = delta @ W if ``need_input_grad``.

    G, Z, delta (n, out); W (out, in); grad_in (n, in). ``Z`` is the layer's (post-ReLU) output.
    """
    n, n_out = G.shape
    n_in = W.shape[1]
    for r in range(n):
        for i in range(n_out):
            delta[r, i] = G[r, i] if (not relu or Z[r, i] > 0) else 0.0
        if need_input_grad:
            gi = grad_in[r]
            gi[:] = 0.0
            for i in range(n_out):
                d = delta[r, i]
                if d != 0.0:
                    w = W[i]
                    for j in range(n_in):
                        gi[j] += d * w[j]


@njit(cache=True, fastmath=True)
def _dot(a, b):  # pragma: no cover (jit)
    """sum_j a[j] * b[j] (a loop, so numba needs no BLAS)."""
    acc = a.dtype.type(0.0)
    for j in range(a.shape[0]):
        acc += a[j] * b[j]
    return acc


@njit(cache=True, fastmath=True)
def dense_forward_deferred(X, W, b, relu, out, U, V, A):  # pragma: no cover (jit)
    """As :func:`dense_forward` with the weight W_eff = W - sum_s A[s] * outer(U[s], V[s]).

    U (r, out), V (r, in), A (r,): a low-rank update not yet folded into W (see
    :class:`fedstream.models.mlp.Deferred`). Costs n * r * (in + out) more than the plain kernel.
    """
    dense_forward(X, W, b, False, out)
    n = X.shape[0]
    r_count, n_out = U.shape
    for r in range(n):
        x = X[r]
        for s in range(r_count):
            if A[s] != 0.0:
                q = A[s] * _dot(V[s], x)
                u = U[s]
                for i in range(n_out):
                    out[r, i] -= q * u[i]
        if relu:
            for i in range(n_out):
                out[r, i] = max(out[r, i], 0.0)


@njit(cache=True, fastmath=True)
def deferred_input_grad(delta, U, V, A, grad_in):  # pragma: no cover (jit)
    """grad_in -= delta @ (sum_s A[s] * outer(U[s], V[s])): the deferred part of delta @ W_eff."""
    n = delta.shape[0]
    r_count, n_in = V.shape
    for r in range(n):
        gi = grad_in[r]
        for s in range(r_count):
            if A[s] != 0.0:
                q = A[s] * _dot(U[s], delta[r])
                v = V[s]
                for j in range(n_in):
                    gi[j] -= q * v[j]


@njit(cache=True)
def _max(z):  # pragma: no cover (jit)
    """z.max() of a 1-D float array (NaN if any entry is NaN), as a loop: numba's ``max``
    compiles its empty-array error message too."""
    m = z[0]
    for k in range(1, z.shape[0]):
        v = z[k]
        if v > m:
            m = v
        elif np.isnan(v):
            return v
    return m


@njit(cache=True)
def argmax(z):  # pragma: no cover (jit)
    """np.argmax of a 1-D float array (the first maximum; the first NaN if there is one), as a loop."""
    best, m = 0, z[0]
    if np.isnan(m):
        return 0
    for k in range(1, z.shape[0]):
        v = z[k]
        if v > m:
            best, m = k, v
        elif np.isnan(v):
            return k
    return best


@njit(cache=True)
def softmax_cross_entropy_into(logits, y, losses, grad):  # pragma: no cover (jit)
    """Per row: loss = logsumexp(z) - z[y];  grad = softmax(z) - onehot(y). Numerically stable."""
    n, c = logits.shape
    for r in range(n):
        z = logits[r]
        m = _max(z)
        s = 0.0
        for k in range(c):
            e = np.exp(z[k] - m)
            grad[r, k] = e
            s += e
        for k in range(c):
            grad[r, k] /= s
        grad[r, y[r]] -= 1.0
        losses[r] = np.log(s) + m - z[y[r]]
