"""Phase 1 (the radii) of the int8 path: the K smallest same-class distances with a threshold.

Same result as :func:`fedstream.selection._kernels.topk_dots` in int mode (the kernel the float32
``dots`` backend runs), with less work: the per-(row, group) insertion of the older kernel visits
nearly every column, because a row's top-K is still filling while it scans the ~n/C same-class
columns. Here each row's columns are split into n = ceil(C / STRETCH) disjoint sets, set s
holding columns s, s + n, s + 2n, ... (so the minima of all sets are ``STRETCH`` unit-stride,
vectorised element-wise minimums), the row's own column set aside, and ``u`` is the K-th
smallest of those minima: K distinct columns lie at or below u, so the K-th smallest distance is
<= u, and a column above u can change neither the K smallest nor the count of further zero
distances. Only sets whose minimum is <= u (and below the current K-th, or 0 once that is 0) are
scanned element by element.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from fedstream.selection._kernels import _apply_plan, _fill_dots, insert_sorted

STRETCH = 16
BIG = np.iinfo(np.int32).max


@njit(cache=True)
def _min_into(acc, x):  # pragma: no cover (jit)
    """acc[s] = min(acc[s], x[s]) (whole unit-stride arrays, so the loop vectorises)."""
    for s in range(acc.shape[0]):
        acc[s] = min(acc[s], x[s])


@njit(cache=True)
def _kth_of_minima(d, mins, k):  # pragma: no cover (jit)
    """Fill mins[s] = min(d[s::n]) for s < n = ceil(C / STRETCH) and return the k-th smallest of
    them (BIG when there are fewer than k sets)."""
    C = d.shape[0]
    n = (C + STRETCH - 1) // STRETCH
    mins[:n] = d[:n]
    for i in range(1, STRETCH):
        lo = i * n
        if lo >= C:
            break
        length = min(n, C - lo)
        _min_into(mins[:length], d[lo:lo + length])
    if n < k:
        return np.int32(BIG)
    best = np.full(k, BIG, dtype=np.int32)
    for s in range(n):
        if mins[s] < best[k - 1]:
            insert_sorted(best, mins[s])
    return best[k - 1]


@njit(cache=True)
def _topk_row_bounded(d, mins, top, zeros, g, a):  # pragma: no cover (jit)
    """Insert the columns of d (the row's own already set to BIG) into ``top``, the ascending K
    smallest; once the K-th is 0, count each further distance 0 in ``zeros[g, a]``."""
    k = top.shape[0]
    C = d.shape[0]
    u = _kth_of_minima(d, mins, k)
    worst = top[k - 1]
    n = (C + STRETCH - 1) // STRETCH
    for s in range(n):
        lo_val = mins[s]
        if lo_val > u or (worst > 0 and lo_val >= worst) or (worst <= 0 and lo_val > 0):
            continue
        for b in range(s, C, n):
            v = d[b]
            if v < worst:
                worst = insert_sorted(top, v)
            elif v <= 0:  # the K-th is 0: v ties at the zero radius
                zeros[g, a] += 1


@njit(nogil=True, cache=True)
def topk_int(dots, nr, nc, r0, c0, parent, client, grow, top, zeros, buf, mins):  # pragma: no cover (jit)
    """Update top (G, R, K) int32 and zeros (G, R) with the tile's exact int32 distances: dots
    (m, R, C) int32 dot products, nr (m, R) and nc (m, C) int32 squared norms, buf a flat work
    buffer, mins a (C // STRETCH + 1,) int32 scratch."""
    m, R, C = dots.shape
    work = buf[: (m + parent.shape[0]) * C].reshape((m + parent.shape[0], C))
    placeholder = np.zeros((1, 1), dtype=np.float32)
    offsets = np.zeros(1, dtype=np.int64)
    for a in range(R):
        _fill_dots(dots, nr, nc, a, work, True, placeholder, offsets, r0 + a, c0)
        _apply_plan(work, m, parent, client)
        own = r0 + a - c0
        for g in range(grow.shape[0]):
            d = work[grow[g]]
            if 0 <= own < C:
                d[own] = BIG  # the row's own sample: neither a neighbour nor a zero
            _topk_row_bounded(d, mins, top[g, a], zeros, g, a)
