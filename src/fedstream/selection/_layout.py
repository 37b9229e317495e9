"""The data layout of the tiled KNN-MI engine (:mod:`fedstream.selection._engine`).

:func:`prepare` puts the samples in class-sorted order, queries first, drops constant columns and
lays the features out for the backend :func:`choose` picks: ``dots`` (per-client GEMM dot
products and squared norms, exact int32 arithmetic where the features allow it), ``int8`` (the
same with the dot products from an int8 GEMM into int32, exact for integer features spanning at
most 256 values per client, e.g. pixels; ``auto`` picks it there) or ``direct`` (a fused loop over
column-major features, for clients with few features each).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from numba import njit

from fedstream.errors import ConfigError

BACKENDS = ("auto", "dots", "int8", "direct")
PRECISIONS = ("auto", "float32", "float64")
DIRECT_MAX_WIDTH = (
    8  # auto backend: fused feature loop when clients hold at most this many features on average
)


@dataclass
class Prepared:
    """The data in class-sorted order: queries first (by class), then the other samples (by class)."""

    labels: np.ndarray  # (n,) class codes, sorted order
    pos_of_query: np.ndarray  # (|Q|,) sorted position of each query (queries in ascending index order)
    n_queries: int
    n_clients: int
    mode: str  # "dots" or "direct"
    int_mode: bool = False  # dots mode with exact int32 distance arithmetic
    int8: bool = False  # int_mode with the dot products from an int8 GEMM (feats: int8, shifted)
    feats: list[np.ndarray] | None = None  # dots: per-client (n, d_j) in sorted order
    feats_t: list[np.ndarray] | None = None  # int8: per-client (d_j, n), the GEMM's column operand
    norms: np.ndarray | None = None  # dots: (m, n) squared norms (int32 in int_mode, else float64)
    blank: np.ndarray | None = None  # int8: (m, n) bool, the sample's features all at the client's minimum
    floor: np.ndarray | None = None  # int8: (m, n) int32 client j's squared distance to its blank sample
    rows: np.ndarray | None = None  # dots, float mode: (n, D) features (feats are views of its columns)
    XT: np.ndarray | None = None  # direct: (D, n) features, column-major (float32 or float64)
    offsets: np.ndarray | None = None  # (m+1,) feature offsets of the clients in XT (direct) / rows (dots)


def informative_columns(a: np.ndarray) -> np.ndarray:
    """Columns of ``a`` that are not constant (constant ones add zero to every distance)."""
    keep = np.flatnonzero(a.min(axis=0) != a.max(axis=0))
    if keep.size == a.shape[1]:
        return a
    # take, not a boolean mask: measured 3 against 20 ms on a 33,614 x 196 uint8 strip
    return a.take(keep, axis=1) if keep.size else np.zeros((a.shape[0], 1), dtype=a.dtype)


def _integer_valued(a: np.ndarray) -> bool:
    return bool(np.issubdtype(a.dtype, np.integer) or np.array_equal(a, np.round(a)))


def exact_in_int32(blocks: list[np.ndarray]) -> bool:
    """True when the features are integers small enough for an exact float32 GEMM and int32 sums.

    A client's dot products and norms are exact in float32 when d_j · max|x|² < 2²⁴; every global
    distance stays below 2³¹ when 2 Σ_j d_j · max_j|x|² < 2³¹.
    """
    total = 0.0
    for a in blocks:
        if not _integer_valued(a):
            return False
        big = float(np.abs(a).max()) if a.size else 0.0
        if a.shape[1] * big * big >= 2.0**24:
            return False
        total += 2.0 * a.shape[1] * big * big
    return total < 2.0**31


def exact_in_float32_direct(blocks: list[np.ndarray]) -> bool:
    """True when float32 (x_a − x_b)² sums are exact: integer features with Σ_f range_f² < 2²⁴."""
    if not all(_integer_valued(a) for a in blocks):
        return False
    span = sum(float(((a.max(axis=0) - a.min(axis=0)).astype(np.float64) ** 2).sum()) for a in blocks)
    return span < 2.0**24


def int8_shifts(blocks: list[np.ndarray]) -> list[int] | None:
    """Per-client shifts s_j with x - s_j in [-128, 127] for every feature, or None when some
    client's features are not integers spanning at most 256 values (distances do not change under
    a shift, so the int8 GEMM's int32 dot products give them exactly)."""
    shifts = []
    for a in blocks:
        if not _integer_valued(a) or a.size == 0:
            return None
        lo, hi = float(a.min()), float(a.max())
        if hi - lo > 255:
            return None
        shifts.append(int(lo) + 128)
    # int32 stays exact: a client's |a|² + |b|² (<= 2 d_j 128²) and a group's sum (<= Σ d_j 255²)
    widths = [a.shape[1] for a in blocks]
    if 2 * max(widths) * 128**2 >= 2**31 or sum(widths) * 255**2 >= 2**31:
        return None
    return shifts


def blank_order(blank: np.ndarray) -> np.ndarray:
    """A sort key (within a class) that makes each of the two clients with the most blank samples
    (every feature at the client's minimum) hold its non-blank samples in one contiguous run.

    The int8 engine skips a client's GEMM on blank rows and columns (its distance to a blank
    sample is a precomputed vector, ``Prepared.floor``), and takes the GEMM of the smallest
    rectangle of a tile that holds the non-blank rows and columns: with A and B the two clients,
    the order (A non-blank, B blank), (neither blank), (A blank, B non-blank), (both blank) keeps
    A's non-blank samples first and B's in the middle.
    """
    share = blank.mean(axis=1)
    top = [int(j) for j in np.argsort(-share, kind="stable")[:2] if share[j] > 0]
    if not top:
        return np.zeros(blank.shape[1], dtype=np.int64)
    a = blank[top[0]].astype(np.int64)
    if len(top) == 1:
        return a
    b = blank[top[1]]
    return np.where(a == 0, np.where(b, 0, 1), np.where(b, 3, 2))


@njit(nogil=True, cache=True)
def _int8_layout(x, perm, shift, feats, feats_t, norms, floor):  # pragma: no cover (jit)
    for i0 in range(0, perm.shape[0], 64):  # blocks of 64 rows: the transposed block stays in L1
        i1 = min(perm.shape[0], i0 + 64)
        for i in range(i0, i1):
            r = perm[i]
            s = np.int32(0)
            t = np.int32(0)
            for c in range(feats.shape[1]):
                v = np.int8(np.int64(x[r, c]) - shift)
                feats[i, c] = v
                w = np.int32(v)
                s += w * w
                t += (w + 128) * (w + 128)
            norms[i] = s
            floor[i] = t
        for c in range(feats.shape[1]):
            for i in range(i0, i1):
                feats_t[c, i] = feats[i, c]


def int8_layout(blocks: list[np.ndarray], perm: np.ndarray, shifts: list[int]):
    """Each client's features in the order ``perm``, shifted into int8 (``x - shift``; the caller
    checked the range, :func:`int8_shifts`), row-major and transposed (the GEMM's two operands),
    with the int32 squared norms of the shifted features and the squared distances to the client's
    blank sample (every shifted feature at −128): ``(feats, feats_t, norms (m, n), floor (m, n))``.

    One pass per client (measured 3.7 against 42 ms for a 33,614 x 154 pixel strip gathered,
    shifted, transposed and summed by NumPy in turn). int32 is exact: a norm is at most d_j 128²
    and a distance to the blank sample at most d_j 255² (:func:`int8_shifts` checks both).
    """
    n, m = perm.shape[0], len(blocks)
    norms, floor = np.empty((m, n), np.int32), np.empty((m, n), np.int32)
    feats, feats_t = [], []
    for j, (b, s) in enumerate(zip(blocks, shifts)):
        x = b if b.dtype == np.uint8 else b.astype(np.int64)  # uint8 (any layout) or int64: not one per dtype
        f, ft = np.empty((n, b.shape[1]), np.int8), np.empty((b.shape[1], n), np.int8)
        _int8_layout(x, perm, s, f, ft, norms[j], floor[j])
        feats.append(f)
        feats_t.append(ft)
    return feats, feats_t, norms, floor


class Choice(NamedTuple):
    """What :func:`choose` picked."""

    mode: str  # "dots" or "direct"
    dtype: type  # the features' dtype in the layout: np.int8, np.float32 or np.float64
    int_mode: bool  # exact int32 distance arithmetic
    shifts: list[int] | None = None  # int8: each client's shift into int8 (:func:`int8_shifts`)


def choose(blocks: list[np.ndarray], backend: str, precision: str) -> Choice:
    """The mode, feature dtype and int_mode for ``backend`` / ``precision`` (``"auto"`` resolved
    here; ``"int8"`` comes back as mode ``"dots"`` with an int8 feature dtype and its shifts).

    ``"auto"`` precision picks float32 only where it is exact (integer features that are small
    enough), so the result equals the float64 one; ``"float32"`` forces it (faster, approximate for
    real-valued features: distances that differ by less than float32 rounding may swap).
    """
    if backend not in BACKENDS:
        raise ConfigError(f"backend must be one of {', '.join(map(repr, BACKENDS))}, got {backend!r}")
    if precision not in PRECISIONS:
        raise ConfigError(f"precision must be one of {', '.join(map(repr, PRECISIONS))}, got {precision!r}")
    if backend == "int8":
        shifts = int8_shifts(blocks)
        if shifts is None:
            raise ConfigError("backend 'int8' needs integer features spanning at most 256 values per client")
        if precision == "float64":
            raise ConfigError("backend 'int8' computes exactly in integers; use precision 'auto'")
        return Choice("dots", np.int8, True, shifts)
    if backend == "auto":
        mean_width = sum(b.shape[1] for b in blocks) / len(blocks)
        backend = "direct" if mean_width <= DIRECT_MAX_WIDTH else "dots"
        shifts = int8_shifts(blocks) if backend == "dots" and precision != "float64" else None
        if shifts is not None:
            return Choice("dots", np.int8, True, shifts)
    exact = exact_in_int32(blocks) if backend == "dots" else exact_in_float32_direct(blocks)
    if precision == "auto":
        precision = "float32" if exact else "float64"
    int_mode = backend == "dots" and precision == "float32" and exact
    return Choice(backend, np.float32 if precision == "float32" else np.float64, int_mode)


def prepare(
    blocks: list[np.ndarray], y: np.ndarray, queries: np.ndarray, backend: str, precision: str
) -> Prepared:
    """Sort, drop constant columns, and lay the features out for the chosen backend."""
    n = y.shape[0]
    is_query = np.zeros(n, dtype=bool)
    is_query[queries] = True
    blocks = [informative_columns(b) for b in blocks]
    mode, dtype, int_mode, shifts = choose(blocks, backend, precision)
    blank = None
    if dtype is np.int8:  # blank samples last within their class (see blank_order)
        blank = np.stack([(b == b.min()).all(axis=1) for b in blocks])
        perm = np.lexsort((blank_order(blank), y, ~is_query))
    else:
        perm = np.lexsort((y, ~is_query))
    inv = np.empty(n, dtype=np.int64)
    inv[perm] = np.arange(n)
    prep = Prepared(labels=y[perm], pos_of_query=inv[queries], n_queries=queries.size, n_clients=len(blocks),
                    mode=mode, int_mode=int_mode, int8=dtype is np.int8)
    prep.offsets = np.cumsum([0] + [b.shape[1] for b in blocks]).astype(np.int64)
    if prep.int8:  # shifted into int8; exact integer norms of the shifted features
        prep.feats, prep.feats_t, prep.norms, prep.floor = int8_layout(blocks, perm, shifts)
        prep.blank = np.ascontiguousarray(blank[:, perm])
        prep.rows = np.zeros((1, 1), dtype=np.float32)  # exact: nothing to recompute
    elif mode == "dots":
        feats = []
        for b in blocks:
            f = b[perm].astype(np.float64)
            if not _integer_valued(b):
                f -= f.mean(axis=0)  # centring keeps distances and cuts cancellation in |a|²+|b|²−2a·b
            feats.append(np.ascontiguousarray(f, dtype=dtype))
        norms = np.stack([np.einsum("ij,ij->i", f.astype(np.float64), f.astype(np.float64)) for f in feats])
        prep.feats, prep.norms = feats, (norms.astype(np.int32) if int_mode else norms)
        if int_mode:  # exact: nothing to recompute, the kernels get a placeholder
            prep.rows = np.zeros((1, 1), dtype=dtype)
        else:  # one (n, D) array the kernels recompute small distances from; feats become its views
            prep.rows = np.ascontiguousarray(np.concatenate(feats, axis=1))
            prep.feats = [prep.rows[:, a:b] for a, b in zip(prep.offsets[:-1], prep.offsets[1:])]
    else:
        XT = np.concatenate([b[perm] for b in blocks], axis=1).T
        prep.XT = np.ascontiguousarray(XT, dtype=dtype)  # differences x_a - x_b need no centring
    return prep
