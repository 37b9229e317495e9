"""numba kernels of the vectorised VF-PS MI estimate (used by :mod:`fedstream.selection.knn_mi`).

A kernel handles one tile: query rows r0.. against candidate columns c0..c0+C-1 (positions in the
class-sorted order). For each row it fills rows 0..m-1 of a work buffer with ``buf[j, b]``, client
j's local squared Euclidean distance between the row sample and column sample b — exactly what
client j would share — either

* from precomputed dot products (``*_dots``: ``|x_a|² + |x_b|² − 2 x_a·x_b``, the dot products from
  one BLAS GEMM per client and tile; exact integers in int32 when the features are small integers,
  ``int_mode``). In floating point that difference cancels for near-duplicates (a distance far
  below the norms keeps few correct bits), so every distance below ``RECOMPUTE`` × (|x_a|² + |x_b|²)
  is recomputed directly from the features: small distances are then as exact as the direct
  path's, and the others keep a relative error below ~d_j · 2⁻⁵³ / RECOMPUTE; or
* directly from the features (``*_direct``, for clients with few features, where a GEMM would be
  memory-bound).

Group distances (the server's sums of its members' rows) then follow a sum plan
(``_engine.sum_plan``): buffer row ``m + r`` is ``buf[parent[r]] + buf[client[r]]``, so a group
costs one vector add per client it has beyond the largest subset already stored, and singletons
cost nothing; group g reads row ``grow[g]``. Then

* ``topk_*`` keeps the K smallest same-class distances per (group, row), the row's own sample
  excluded: the K-th is the radius r_q of eq. (1). Once all K are 0 it counts the further
  same-class samples at distance 0 in ``zeros`` (all of them lie inside a zero radius);
* ``count_*`` counts the columns within ``bound`` (d <= bound) outside the row's own class (whose
  columns form one contiguous range [lo, hi) because the samples are sorted by class); the driver
  passes bound = the largest value below r_q, or 0 when r_q = 0, which is the tie rule of eq. (1)
  (``reference.m_from_distances``). In a symmetric tile each column also gets credit for the rows
  within its bound, so every unordered pair is evaluated once.

The kernels are serial and release the GIL (``nogil``): the driver runs one tile per worker thread,
each with a single-threaded BLAS, which keeps both cores busy even when the machine is shared
(a 2-thread BLAS on small tiles loses most of its time synchronising under load).
"""

from __future__ import annotations

import numpy as np
from numba import njit

RECOMPUTE = 2.0**-10  # float dots: recompute distances below this share of |x_a|² + |x_b|² directly


@njit(cache=True)
def _fill_dots(dots, nr, nc, a, buf, int_mode, F, offsets, ra, c0):  # pragma: no cover (jit)
    """buf[j, b] = nr[j, a] + nc[j, b] - 2 dots[j, a, b] (client j's squared distance).

    In float mode a result below RECOMPUTE · (nr + nc) lost bits to cancellation: it is recomputed
    as Σ_f (F[ra, f] - F[c0 + b, f])² over client j's features (F: (n, D) rows in sorted order,
    client j's columns offsets[j]..offsets[j+1]-1; ra = the row's position).
    """
    m, _, C = dots.shape
    for j in range(m):
        base = nr[j, a]
        row = buf[j]
        if int_mode:
            for b in range(C):
                row[b] = base + nc[j, b] - np.int32(2) * np.int32(dots[j, a, b])
        else:
            for b in range(C):
                row[b] = base + nc[j, b] - 2.0 * dots[j, a, b]
            for b in range(C):
                if row[b] < RECOMPUTE * (base + nc[j, b]):
                    s = 0.0
                    for f in range(offsets[j], offsets[j + 1]):
                        t = np.float64(F[ra, f]) - np.float64(F[c0 + b, f])
                        s += t * t
                    row[b] = s


@njit(cache=True)
def _fill_direct(XT, offsets, a, c0, buf):  # pragma: no cover (jit)
    """buf[j, b] = Σ_{f of client j} (XT[f, c0 + b] - XT[f, a])² (features stored column-major)."""
    m = offsets.shape[0] - 1
    C = buf.shape[1]
    for j in range(m):
        row = buf[j]
        for b in range(C):
            row[b] = 0.0
        for f in range(offsets[j], offsets[j + 1]):
            xa = XT[f, a]
            col = XT[f, c0:c0 + C]
            for b in range(C):
                t = col[b] - xa
                row[b] += t * t


@njit(cache=True, inline="always")
def apply_plan(buf, m, parent, client, w):  # pragma: no cover (jit)
    """buf[m + r, :w] = buf[parent[r], :w] + buf[client[r], :w]: the groups' global distances,
    prefix by prefix. Indices are unsigned: numba then drops its negative-index check and the loop
    vectorises without slicing. The one sum-plan loop of the float, int8 and direct kernels."""
    for r in range(parent.shape[0]):
        o, x, y = np.uint64(m + r), np.uint64(parent[r]), np.uint64(client[r])
        for b in range(w):
            i = np.uint64(b)
            buf[o, i] = buf[x, i] + buf[y, i]


@njit(cache=True)
def _n_below(x, radius):  # pragma: no cover (jit)
    """#{b: x[b] < radius}, with an int32 accumulator over a whole (unit-stride) array: vectorises."""
    cnt = np.int32(0)
    for b in range(x.shape[0]):
        cnt += np.int32(x[b] < radius)
    return cnt


@njit(cache=True)
def _n_within(x, bound):  # pragma: no cover (jit)
    """#{b: x[b] <= bound}, vectorised like :func:`_n_below`."""
    cnt = np.int32(0)
    for b in range(x.shape[0]):
        cnt += np.int32(x[b] <= bound)
    return cnt


@njit(cache=True)
def _credit(x, rad, cnt):  # pragma: no cover (jit)
    """cnt[b] += x[b] <= rad[b] (whole arrays, so the loop vectorises)."""
    for b in range(x.shape[0]):
        cnt[b] += np.int32(x[b] <= rad[b])


@njit(cache=True, inline="always")
def insert_sorted(top, v):  # pragma: no cover (jit)
    """Insert v into ``top``, the ascending K smallest so far (the caller checked v < top[K-1]):
    the K-th drops out. Returns the new K-th. The one top-K insertion of every kernel."""
    i = top.shape[0] - 1
    while i > 0 and top[i - 1] > v:
        top[i] = top[i - 1]
        i -= 1
    top[i] = v
    return top[top.shape[0] - 1]


@njit(cache=True)
def _topk_row(d, c0, self_pos, top, zeros, g, a):  # pragma: no cover (jit)
    """Insert d[b] (column position c0 + b != self_pos) into ``top``, the ascending K smallest;
    once the K-th is 0, count each further distance-0 column in ``zeros[g, a]`` instead.

    A vectorised count skips each 64-column stretch holding nothing below the current K-th value,
    so the branchy insertion only runs where a new neighbour can be.
    """
    k = top.shape[0]
    worst = top[k - 1]
    C = d.shape[0]
    for s in range(0, C, 64):
        x = d[s:min(C, s + 64)]
        if worst <= 0:  # the radius is 0: only count the further samples at distance 0
            p = self_pos - c0 - s
            own = 1 if 0 <= p < x.shape[0] and x[p] <= 0 else 0
            zeros[g, a] += _n_within(x, 0) - own
            continue
        if _n_below(x, worst) == 0:
            continue
        for b in range(x.shape[0]):
            v = x[b]
            if c0 + s + b == self_pos:
                continue
            if v < worst:
                worst = insert_sorted(top, v)
            elif v <= 0:  # worst became 0 in this stretch: v ties at the zero radius
                zeros[g, a] += 1


@njit(cache=True)
def _count_within(d, lo, hi, bound):  # pragma: no cover (jit)
    """#{b outside [lo, hi): d[b] <= bound} (the row's own class occupies columns lo..hi-1)."""
    return _n_within(d[:lo], bound) + _n_within(d[hi:], bound)


@njit(cache=True)
def _credit_columns(d, lo, hi, col_rad, col_cnt):  # pragma: no cover (jit)
    """col_cnt[b] += d[b] <= col_rad[b] for b outside [lo, hi): the row is within column b's bound."""
    _credit(d[:lo], col_rad[:lo], col_cnt[:lo])
    _credit(d[hi:], col_rad[hi:], col_cnt[hi:])


@njit(nogil=True, cache=True)
def topk_dots(dots, nr, nc, r0, c0, int_mode, F, offsets, parent, client, grow, top, zeros,
              buf):  # pragma: no cover (jit)
    """Update top (G, R, K) and zeros (G, R) with the tile's distances; dots (m, R, C), nr (m, R),
    nc (m, C), F and offsets the features for recomputation (float mode), buf a flat work buffer."""
    m, R, C = dots.shape
    work = buf[: (m + parent.shape[0]) * C].reshape((m + parent.shape[0], C))
    for a in range(R):
        _fill_dots(dots, nr, nc, a, work, int_mode, F, offsets, r0 + a, c0)
        apply_plan(work, m, parent, client, C)
        for g in range(grow.shape[0]):
            _topk_row(work[grow[g]], c0, r0 + a, top[g, a], zeros, g, a)


@njit(nogil=True, cache=True)
def topk_direct(XT, offsets, r0, c0, C, parent, client, grow, top, zeros, buf):  # pragma: no cover (jit)
    """As :func:`topk_dots`, from the features XT (D, n): rows r0..r0+R-1 against columns c0..c0+C-1."""
    m = offsets.shape[0] - 1
    work = buf[: (m + parent.shape[0]) * C].reshape((m + parent.shape[0], C))
    for a in range(top.shape[1]):
        _fill_direct(XT, offsets, r0 + a, c0, work)
        apply_plan(work, m, parent, client, C)
        for g in range(grow.shape[0]):
            _topk_row(work[grow[g]], c0, r0 + a, top[g, a], zeros, g, a)


@njit(nogil=True, cache=True)
def count_dots(dots, nr, nc, int_mode, F, offsets, r0, c0, row_lab, col_lab, row_rad, col_rad, parent, client,
               grow, symmetric, row_cnt, col_cnt, buf):  # pragma: no cover (jit)
    """Add to row_cnt (G, R) the other-class columns within row_rad (G, R), the rows' bounds;
    col_cnt (G, C) likewise."""
    m, R, C = dots.shape
    work = buf[: (m + parent.shape[0]) * C].reshape((m + parent.shape[0], C))
    for a in range(R):
        _fill_dots(dots, nr, nc, a, work, int_mode, F, offsets, r0 + a, c0)
        apply_plan(work, m, parent, client, C)
        _count_groups(work, a, row_lab, col_lab, row_rad, col_rad, grow, symmetric, row_cnt, col_cnt)


@njit(nogil=True, cache=True)
def count_direct(XT, offsets, r0, c0, C, row_lab, col_lab, row_rad, col_rad, parent, client, grow, symmetric,
                 row_cnt, col_cnt, buf):  # pragma: no cover (jit)
    """As :func:`count_dots`, from the features XT (D, n): rows r0.. against columns c0..c0+C-1."""
    m = offsets.shape[0] - 1
    work = buf[: (m + parent.shape[0]) * C].reshape((m + parent.shape[0], C))
    for a in range(row_cnt.shape[1]):
        _fill_direct(XT, offsets, r0 + a, c0, work)
        apply_plan(work, m, parent, client, C)
        _count_groups(work, a, row_lab, col_lab, row_rad, col_rad, grow, symmetric, row_cnt, col_cnt)


@njit(cache=True)
def _count_groups(
    work, a, row_lab, col_lab, row_rad, col_rad, grow, symmetric, row_cnt, col_cnt
):  # pragma: no cover
    """Row a's other-class counts for every group (and the columns' credits in a symmetric tile)."""
    s = np.searchsorted(col_lab, row_lab[a], "left")
    e = np.searchsorted(col_lab, row_lab[a], "right")
    for g in range(grow.shape[0]):
        d = work[grow[g]]
        row_cnt[g, a] += _count_within(d, s, e, row_rad[g, a])
        if symmetric:
            _credit_columns(d, s, e, col_rad[g], col_cnt[g])
