"""The int8 path's kernels (exact int32 distances from an int8 GEMM's dot products).

**Phase 1 (the radii), ``topk_int``**: the K smallest same-class distances with a threshold.
Same result as :func:`fedstream.selection._kernels.topk_dots` in int mode (the kernel the float32
``dots`` backend runs), with less work: the per-(row, group) insertion of the older kernel visits
nearly every column, because a row's top-K is still filling while it scans the ~n/C same-class
columns. Here each row's columns are split into n = ceil(C / STRETCH) disjoint sets, set s
holding columns s, s + n, s + 2n, ... (so the minima of all sets are ``STRETCH`` unit-stride,
vectorised element-wise minimums), the row's own column set aside, and ``u`` is the K-th
smallest of those minima: K distinct columns lie at or below u, so the K-th smallest distance is
<= u, and a column above u can change neither the K smallest nor the count of further zero
distances. Only sets whose minimum is <= u (and below the current K-th, or 0 once that is 0) are
scanned element by element. The insertion itself is :func:`~fedstream.selection._kernels.insert_sorted`,
shared with the other kernels.

**Phase 2 (the counts), ``count_int``**: same counts as
:func:`fedstream.selection._kernels.count_dots` in int mode on a tile whose rows are of one class
and columns of another (the engine cuts tiles at class boundaries), blocked over rows and columns.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from fedstream.selection._kernels import _credit, _n_within, apply_plan, insert_sorted

STRETCH = 16
BIG = np.iinfo(np.int32).max
U = np.uint64  # an unsigned index: numba skips the wrap-around of negative indices, loops vectorise


@njit(cache=True)
def _kth_of_minima(d, mins, best, cap):  # pragma: no cover (jit)
    """Fill mins[s] = min(d[s::n]) for s < n = ceil(C / STRETCH) and return the k-th smallest of
    them (BIG when there are fewer than k sets; k = best.shape[0], ``best`` a scratch), or ``cap``
    without selecting when cap < BIG (the row's K-th so far, from an earlier tile: already a bound
    as good)."""
    k = best.shape[0]
    C = d.shape[0]
    n = (C + STRETCH - 1) // STRETCH
    for b in range(n):
        mins[U(b)] = d[U(b)]
    for i in range(1, STRETCH):
        lo = i * n
        if lo >= C:
            break
        u0 = U(lo)
        for b in range(min(n, C - lo)):
            mins[U(b)] = min(mins[U(b)], d[u0 + U(b)])
    if n < k or cap < BIG:
        return cap
    best[:] = BIG
    for s in range(n):
        if mins[s] < best[k - 1]:
            insert_sorted(best, mins[s])
    return best[k - 1]


@njit(cache=True)
def _topk_row_bounded(d, mins, best, top, zeros, g, a):  # pragma: no cover (jit)
    """Insert the columns of d (the row's own already set to BIG) into ``top``, the ascending K
    smallest; once the K-th is 0, count each further distance 0 in ``zeros[g, a]``. ``mins`` and
    ``best`` (K,) are scratch."""
    k = top.shape[0]
    C = d.shape[0]
    worst = top[k - 1]
    u = _kth_of_minima(d, mins, best, worst)
    if worst <= 0 or u <= 0:  # the radius is 0 (already, or K columns of this tile are at 0)
        z = _n_within(d, 0)  # the zero distances, vectorised (the own column holds BIG)
        if worst > 0:  # the K smallest become zeros; the zeros beyond K are counted
            for i in range(k):
                if top[i] > 0:
                    z -= 1
                    top[i] = 0
        zeros[g, a] += z
        return
    n = (C + STRETCH - 1) // STRETCH
    for s in range(n):
        lo_val = mins[s]
        if lo_val > u or (worst > 0 and lo_val >= worst) or (worst <= 0 and lo_val > 0):
            continue
        for b in range(s, C, n):
            v = d[b]
            if v < worst and v <= u:  # above u a column cannot be among the K smallest
                worst = insert_sorted(top, v)
            elif v <= 0:  # the K-th is 0: v ties at the zero radius
                zeros[g, a] += 1


@njit(cache=True, inline="always")
def form(dots, geo, nr, nc, fr, fc, j, a, s, w, out):  # pragma: no cover (jit)
    """out[j, b] = client j's exact squared distance from tile row a to tile column s + b, b < w.

    Client j's dot products cover only the rectangle of the tile that holds its non-blank rows
    and columns (``geo[j]`` = first row, end row, first column, end column, offset in ``dots``;
    rows of the rectangle are ``end column − first column`` long). Outside it, a row or a column
    is blank (every feature at the client's minimum) and the distance is the other sample's
    squared distance to the blank sample: ``fc`` (m, C) for a blank row, ``fr`` (m, R) for a
    blank column. Inside, it is |x_a|² + |x_b|² − 2 x_a·x_b from the norms ``nr``/``nc``.
    Indices are unsigned (:data:`U`): numba then drops its negative-index check, and the loops
    vectorise without slicing (a slice costs more than a short loop here).
    """
    lr, hr, lc, hc, off = geo[j, 0], geo[j, 1], geo[j, 2], geo[j, 3], geo[j, 4]
    uj, us = U(j), U(s)
    if a < lr or a >= hr:  # a blank row
        for b in range(w):
            out[uj, U(b)] = fc[uj, us + U(b)]
        return
    x0 = min(max(lc, s), s + w)
    x1 = max(max(min(hc, s + w), s), x0)
    ea = fr[uj, U(a)]
    for b in range(x0 - s):
        out[uj, U(b)] = ea
    base = nr[uj, U(a)]
    o, c, d = U(x0 - s), U(x0), U(off + (a - lr) * (hc - lc) + x0 - lc)
    for b in range(x1 - x0):
        i = U(b)
        out[uj, o + i] = base + nc[uj, c + i] - np.int32(2) * dots[d + i]
    for b in range(x1 - s, w):
        out[uj, U(b)] = ea


@njit(nogil=True, cache=True)
def topk_int(dots, geo, nr, nc, fr, fc, r0, c0, parent, client, grow, top, zeros, buf,
             mins):  # pragma: no cover (jit)
    """Update top (G, R, K) int32 and zeros (G, R) with the tile's exact int32 distances: dots and
    geo the clients' int32 dot products (see :func:`form`), nr (m, R) and nc (m, C) int32 squared
    norms, fr (m, R) and fc (m, C) the distances to the blank sample, buf a flat work buffer, mins
    a (C // STRETCH + 1,) int32 scratch."""
    m, R, C = geo.shape[0], top.shape[1], nc.shape[1]
    work = buf[: (m + parent.shape[0]) * C].reshape((m + parent.shape[0], C))
    best = np.empty(top.shape[2], dtype=np.int32)  # the K smallest minima, reused by every row
    for a in range(R):
        for j in range(m):
            form(dots, geo, nr, nc, fr, fc, j, a, 0, C, work)
        apply_plan(work, m, parent, client, C)
        own = r0 + a - c0
        for g in range(grow.shape[0]):
            d = work[grow[g]]
            if 0 <= own < C:
                d[own] = BIG  # the row's own sample: neither a neighbour nor a zero
            _topk_row_bounded(d, mins, best, top[g, a], zeros, g, a)


ROW_BLOCK = 4  # rows whose distances are formed before the columns' credits are taken (one load of each)
CHUNK = 1024  # columns per step: the block's work rows, (ROW_BLOCK, m + plan rows, CHUNK) int32, stay in L2


@njit(cache=True)
def _count4(d0, d1, d2, d3, b0, b1, b2, b3, bound, cnt):  # pragma: no cover (jit)
    """Four rows' distances d0..d3 against one chunk's columns, each element read once: returns
    #{b: d_r[b] <= b_r} for each row r (the rows' counts) and adds to cnt[b] the rows within
    bound[b] (the columns' credits)."""
    n0 = n1 = n2 = n3 = np.int32(0)
    for b in range(cnt.shape[0]):
        t, x0, x1, x2, x3 = bound[b], d0[b], d1[b], d2[b], d3[b]
        n0 += np.int32(x0 <= b0)
        n1 += np.int32(x1 <= b1)
        n2 += np.int32(x2 <= b2)
        n3 += np.int32(x3 <= b3)
        cnt[b] += np.int32(x0 <= t) + np.int32(x1 <= t) + np.int32(x2 <= t) + np.int32(x3 <= t)
    return n0, n1, n2, n3


@njit(nogil=True, cache=True)
def count_int(dots, geo, nr, nc, fr, fc, row_bound, col_bound, parent, client, grow, symmetric, row_cnt,
              col_cnt, work):  # pragma: no cover (jit)
    """Phase 2 of the int8 path on one tile whose rows and columns are of different classes: add to
    row_cnt (G, R) the columns within each row's bound (d <= row_bound (G, R)) and, when
    ``symmetric``, to col_cnt (G, C) the rows within each column's bound (col_bound (G, C)).

    Same counts as :func:`fedstream.selection._kernels.count_dots` in int mode, in another order:
    the exact int32 distances of ``ROW_BLOCK`` rows are formed ``CHUNK`` columns at a time
    (|x_a|² + |x_b|² − 2 x_a·x_b per client, then the sum plan), so they are read back from L2
    (~140 KB for 4 clients and 9 groups), and each group's distance is read once for the rows'
    counts and the columns' credits, each column's bound and credit once per block of rows.
    ``work`` is a (ROW_BLOCK, m + plan rows, CHUNK) int32 scratch.
    """
    m, R, C = geo.shape[0], row_cnt.shape[1], nc.shape[1]
    G = grow.shape[0]
    for a0 in range(0, R, ROW_BLOCK):
        nb = min(ROW_BLOCK, R - a0)
        for s in range(0, C, CHUNK):
            w = min(CHUNK, C - s)
            for r in range(nb):
                a = a0 + r
                buf = work[r]
                for j in range(m):
                    form(dots, geo, nr, nc, fr, fc, j, a, s, w, buf)
                apply_plan(buf, m, parent, client, w)
            for g in range(G):
                h = grow[g]
                if symmetric and nb == ROW_BLOCK:
                    n0, n1, n2, n3 = _count4(work[0, h, :w], work[1, h, :w], work[2, h, :w], work[3, h, :w],
                                             row_bound[g, a0], row_bound[g, a0 + 1], row_bound[g, a0 + 2],
                                             row_bound[g, a0 + 3], col_bound[g, s:s + w], col_cnt[g, s:s + w])
                    row_cnt[g, a0] += n0
                    row_cnt[g, a0 + 1] += n1
                    row_cnt[g, a0 + 2] += n2
                    row_cnt[g, a0 + 3] += n3
                    continue
                for r in range(nb):
                    row_cnt[g, a0 + r] += _n_within(work[r, h, :w], row_bound[g, a0 + r])
                    if symmetric:
                        _credit(work[r, h, :w], col_bound[g, s:s + w], col_cnt[g, s:s + w])
