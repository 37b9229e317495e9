"""The tiled two-phase computation behind :func:`fedstream.selection.knn_mi.knn_mi`.

Data are put in class-sorted order, queries first: ``[queries by class | other samples by class]``
(:mod:`fedstream.selection._layout`, which also picks the backend and the precision).

* Phase 1 (:meth:`Engine.radii`) visits only same-class tiles (about 1/C of all pairs) and keeps,
  per group and query, the K smallest same-class distances; the K-th is the radius r_q. It also
  counts the same-class samples inside the radius (strictly inside, or at distance 0 when r_q = 0).
* Phase 2 (:meth:`Engine.counts`) visits each row block of queries (of one class) against (a) the
  later query columns, crediting both sides (each unordered pair once), (b) the non-query columns,
  row side only. Tiles are cut at class boundaries, so every same-class tile is skipped whole.

Each task (a row block) runs on a worker thread: one single-threaded BLAS GEMM per client and tile
for the dot products (or, with int8 features, one single-threaded int8 GEMM into int32 by
PyTorch's ``_int_mm``, VNNI where the CPU has it: about 6x an float32 SGEMM's speed and exact), then
a serial numba kernel that releases the GIL (see ``_kernels``).
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
from threadpoolctl import threadpool_limits

import fedstream.selection._kernels as K
from fedstream.errors import ConfigError
from fedstream.selection._int8_kernels import CHUNK, ROW_BLOCK, STRETCH, count_int, topk_int
from fedstream.selection._layout import Prepared
from fedstream.selection._plan_kernels import count_kernel, topk_kernel, topk_width

TILE_ROWS = 512
TILE_COLS = 2048
WORK_BYTES = 256 << 10  # one row's work buffer (client + group distances) stays in L2
TILE_BYTES = 16 << 20  # one worker's per-client dot products for a tile (two workers fit the shared L3)


def sum_plan(groups: list[tuple[int, ...]], m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """How the server forms every group's distance with one vector add per new subset.

    Buffer rows 0..m-1 hold the clients' local distances; row m + r is row ``parent[r]`` plus client
    ``client[r]``'s row. Groups are built smallest first, each from the largest subset already
    stored, adding its missing clients one at a time (every step a stored subset others can reuse).
    Returns ``(parent, client, grow)`` with ``grow[g]`` the row holding group g's distance.
    """
    rows: dict[frozenset, int] = {frozenset([j]): j for j in range(m)}
    parent: list[int] = []
    client: list[int] = []
    for g in sorted(set(groups), key=lambda t: (len(t), t)):
        key = frozenset(g)
        if key in rows:
            continue
        base = max((s for s in rows if s <= key), key=lambda s: (len(s), -rows[s]))
        current = set(base)
        for c in sorted(key - base):
            previous = rows[frozenset(current)]
            current.add(c)
            if frozenset(current) not in rows:
                parent.append(previous)
                client.append(c)
                rows[frozenset(current)] = m + len(parent) - 1
    return (np.array(parent, dtype=np.int64), np.array(client, dtype=np.int64),
            np.array([rows[frozenset(g)] for g in groups], dtype=np.int64))


def marginal_design(groups: list[tuple[int, ...]], m: int) -> bool:
    """True when ``groups`` are the marginal design's (each client alone, each leave-one-out group,
    the full set), in any order. Its plan depends on m and on that order: ``group_test`` passes them
    in :func:`~fedstream.selection.group_testing.marginal_groups`' order, so one plan per m (another
    order is exact too, and compiles a plan of its own)."""
    from fedstream.selection.group_testing import marginal_groups  # group_testing imports the engine

    return {tuple(sorted(g)) for g in groups} == set(marginal_groups(m))


def tile_shape(prep: Prepared, tile, plan_rows: int) -> tuple[int, int]:
    """(rows, cols) of a tile: ``tile`` if given (an int means square), else sized to the caches.

    Columns are limited so that one row's work buffer (clients + plan rows) stays in L2 and one
    worker's dot products for a tile stay in the shared L3.
    """
    if tile is not None:
        r, c = (tile, tile) if np.isscalar(tile) else tile
        if int(r) < 1 or int(c) < 1:
            raise ConfigError(f"tile must be positive (rows, cols), got {tile!r}")
        return int(r), int(c)
    itemsize = 4 if prep.int8 else (prep.XT if prep.mode == "direct" else prep.feats[0]).itemsize
    cols = WORK_BYTES // ((prep.n_clients + plan_rows) * max(itemsize, 4))
    if prep.mode == "dots":
        cols = min(cols, TILE_BYTES // (prep.n_clients * TILE_ROWS * itemsize))
    return TILE_ROWS, int(np.clip(cols // 64 * 64, 64, TILE_COLS))


def _spans(lo: int, hi: int, step: int) -> list[tuple[int, int]]:
    return [(s, min(hi, s + step)) for s in range(lo, hi, step)]


def _class_spans(labels: np.ndarray, lo: int, hi: int, step: int) -> list[tuple[int, int]]:
    """[lo, hi) of the label-sorted ``labels`` cut at every class boundary, then into pieces <= step.

    Single-class tiles let phase 2 skip every same-class tile whole.
    """
    part = labels[lo:hi]
    cuts = [lo, *(lo + np.flatnonzero(part[1:] != part[:-1]) + 1).tolist(), hi]
    return [span for a, b in zip(cuts[:-1], cuts[1:]) for span in _spans(a, b, step)]


def _class_range(labels: np.ndarray, lo: int, hi: int, c: int) -> tuple[int, int]:
    """[start, stop) of class c inside the label-sorted stretch labels[lo:hi]."""
    part = labels[lo:hi]
    return lo + int(np.searchsorted(part, c, "left")), lo + int(np.searchsorted(part, c, "right"))


def _c(a: np.ndarray) -> np.ndarray:
    """A C-contiguous copy of a tile's slice (numba vectorises unit-stride loops only)."""
    return np.ascontiguousarray(a)


@contextmanager
def single_threaded_blas(torch_too: bool = False):
    """Limit BLAS (and, with ``torch_too``, PyTorch's intra-op pool) to one thread per call while
    the tiles run.

    Measured on the shared 2-core machine: a 2-thread OpenBLAS on these tile-sized GEMMs spends
    most of its time synchronising; two single-threaded workers use about 3x less CPU.
    """
    with threadpool_limits(1, user_api="blas"):
        if not torch_too:
            yield
            return
        from fedstream.runs.threads import one_torch_thread  # imports torch: only on the int8 path

        with one_torch_thread():
            yield


def int8_matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """out = a @ b exactly: a (R, d) and b (d, C) int8, out (R, C) int32 (PyTorch's int8 GEMM).

    ``b`` must have strides of its own (made by ``.copy()``, as :func:`int8_side` does): a one-row
    slice counts as contiguous for NumPy and PyTorch while keeping its parent's row stride, which
    the int8 GEMM then misreads (measured: zeros for d = 1).
    """
    import torch

    torch._int_mm(torch.from_numpy(a), torch.from_numpy(b), out=torch.from_numpy(out))


def _nonblank_span(blank: np.ndarray) -> tuple[int, int]:
    """[first, end) of the non-blank entries of ``blank`` ((0, 0) when there are none)."""
    keep = ~blank
    if not keep.any():
        return 0, 0
    return int(keep.argmax()), int(keep.size - keep[::-1].argmax())


@dataclass(frozen=True, eq=False)
class Side:
    """What the int8 kernels read of a tile's rows (or columns) lo..hi, taken once and shared by
    every tile with the same rows (columns): a phase-2 column stretch is met by every earlier row
    block, so its GEMM operands are copied once instead of once per tile (measured: 0.08 CPU s of
    copies and spans per relaxed re-selection). The cost: a phase holds every column stretch's
    copy until it ends, one more copy of the int8 features and two int32 rows per client and sample
    (about 26 MB for the relaxed re-selection's 33,614 MNIST rows)."""

    lo: int
    norms: np.ndarray  # (m, hi - lo) int32 squared norms
    floor: np.ndarray  # (m, hi - lo) int32 squared distances to the blank sample
    spans: tuple[tuple[int, int], ...]  # per client, [first, end) of its non-blank samples, from lo
    operands: tuple[np.ndarray, ...] = ()  # columns: per client its GEMM operand (d_j, end - first)


def int8_side(norms, floor, blank, lo: int, hi: int, feats_t=None) -> Side:
    """The :class:`Side` of samples lo..hi; with ``feats_t`` (per client (d_j, n)), as columns."""
    spans = tuple(_nonblank_span(b[lo:hi]) for b in blank)
    operands = ()
    if feats_t is not None:  # copies, with strides of their own (see int8_matmul)
        operands = tuple(ft[:, lo + a:lo + e].copy() for ft, (a, e) in zip(feats_t, spans))
    return Side(lo, _c(norms[:, lo:hi]), _c(floor[:, lo:hi]), spans, operands)


def int8_tile_dots(feats, rows: Side, cols: Side, flat, geo) -> np.ndarray:
    """The int8 GEMMs of a tile, ``rows`` against ``cols``: for each client only the rectangle
    spanning its non-blank rows and columns (a blank sample's distance is known without one,
    ``_int8_kernels.form``). Fills ``geo`` (m, 5) with each rectangle's first row, end row, first
    column, end column (tile-relative) and offset in ``flat``; returns ``flat``.
    """
    off = 0
    for j, f in enumerate(feats):
        (lr, hr), (lc, hc) = rows.spans[j], cols.spans[j]
        geo[j] = (lr, hr, lc, hc, off)
        size = (hr - lr) * (hc - lc)
        if size:
            out = flat[off:off + size].reshape(hr - lr, hc - lc)
            int8_matmul(f[rows.lo + lr:rows.lo + hr], cols.operands[j], out)
        off += size
    return flat


def default_workers() -> int:
    """Worker threads: the cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


class Engine:
    """Runs the two phases over the tiles of one prepared data set for a list of groups."""

    def __init__(self, prep: Prepared, groups: list[tuple[int, ...]], k: int, tile, workers: int | None):
        self.prep, self.k = prep, k
        self.workers = default_workers() if workers is None else int(workers)
        self.parent, self.client, self.grow = sum_plan(groups, prep.n_clients)
        self.rows, self.cols = tile_shape(prep, tile, self.parent.shape[0])
        self.G = len(groups)
        if prep.mode == "direct":
            self.dtype = prep.XT.dtype.type
        else:
            self.dtype = np.int32 if prep.int_mode else np.float64
        self._local = threading.local()
        self._columns: dict[tuple[int, int], Side] = {}  # the column sides of the phase running
        # the int8 kernels generated for the plan (_plan_kernels) where their compilation is paid once
        # per machine: the marginal design's plan depends on m alone
        self._count_plan = self._topk_plan = None
        if prep.int8 and marginal_design(groups, prep.n_clients):
            self._count_plan = count_kernel(prep.n_clients, self.parent, self.client, self.grow)
            self._topk_plan = topk_kernel(prep.n_clients, self.parent, self.client, self.grow)
        # phase 1's tiles: as wide as the generated top-K takes (a whole class of the relaxed
        # re-selection in one tile: one GEMM per client and row block, and each row's bound u from
        # all its same-class columns; measured 0.73-0.82 -> 0.67-0.68 CPU s of phase 1, two workers)
        self.radii_cols = self.cols
        self._topk_cols = topk_width(self.G)  # the widest tile the generated top-K takes
        if tile is None and self._topk_plan is not None:
            self.radii_cols = max(self.cols, self._topk_cols)

    # ------------------------------------------------------------------ per-thread work buffers
    def _buffers(self):
        loc = self._local
        if not hasattr(loc, "work"):
            width = self.prep.n_clients + self.parent.shape[0]
            loc.work = np.empty(width * self.cols, dtype=self.dtype)
            if self.prep.mode == "dots":
                cols = max(self.cols, self.radii_cols)
                loc.dots = np.empty(self.prep.n_clients * self.rows * cols,
                                    dtype=np.int32 if self.prep.int8 else self.prep.feats[0].dtype)
        return loc

    def _row_side(self, r0, r1) -> Side | None:
        """The :class:`Side` of rows r0..r1 (a task's row block; None off the int8 path)."""
        p = self.prep
        return int8_side(p.norms, p.floor, p.blank, r0, r1) if p.int8 else None

    def _column_side(self, c0, c1) -> Side:
        """The :class:`Side` of columns c0..c1 with their GEMM operands, kept for the phase's other
        row blocks (two workers may both build one the first time: the same value)."""
        side = self._columns.get((c0, c1))
        if side is None:
            p = self.prep
            side = self._columns[c0, c1] = int8_side(p.norms, p.floor, p.blank, c0, c1, p.feats_t)
        return side

    def _int8_tile(self, rows: Side, c0, c1) -> tuple:
        """The int8 kernels' first arguments for a tile of ``rows`` and columns c0..c1: (dots, geo,
        row norms, column norms, row floor, column floor)."""
        p, loc = self.prep, self._buffers()
        if not hasattr(loc, "geo"):
            loc.geo = np.zeros((p.n_clients, 5), dtype=np.int64)
        cols = self._column_side(c0, c1)
        int8_tile_dots(p.feats, rows, cols, loc.dots, loc.geo)
        return loc.dots, loc.geo, rows.norms, cols.norms, rows.floor, cols.floor

    def _dots(self, r0, r1, c0, c1) -> np.ndarray:
        feats, loc = self.prep.feats, self._buffers()
        R, C = r1 - r0, c1 - c0
        dots = loc.dots[: len(feats) * R * C].reshape(len(feats), R, C)
        for j, f in enumerate(feats):  # float features (int8 ones take _int8_tile)
            np.matmul(f[r0:r1], f[c0:c1].T, out=dots[j])
        return dots

    def _run(self, fn, tasks, consume) -> None:
        """consume(task, fn(task)) for every task, fn on the worker threads, results taken in order.

        Results are consumed as they come (not collected), so at most a few tasks' outputs are held.
        The column sides built on the way (:meth:`_column_side`) are dropped at the end.
        """
        try:
            with single_threaded_blas(torch_too=self.prep.int8):
                if self.workers == 1 or len(tasks) <= 1:
                    for t in tasks:
                        consume(t, fn(t))
                    return
                init = None
                if self.prep.int8:  # the workers' int8 GEMMs on one thread each, as the caller's
                    from fedstream.runs.threads import one_torch_thread_here as init
                with ThreadPoolExecutor(self.workers, initializer=init) as ex:
                    for t, out in zip(tasks, ex.map(fn, tasks)):
                        consume(t, out)
        finally:
            self._columns.clear()

    # ------------------------------------------------------------------ phase 1
    def radii(self) -> tuple[np.ndarray, np.ndarray]:
        """(G, |Q|) squared distance r_q of each query's K-th same-class neighbour, and (G, |Q|) the
        other same-class samples inside it (< r_q, or = 0 when r_q = 0); sorted query order."""
        p, nq, n = self.prep, self.prep.n_queries, self.prep.labels.shape[0]
        tasks = []
        for c in np.unique(p.labels[:nq]):
            q0, q1 = _class_range(p.labels, 0, nq, c)
            s0, s1 = _class_range(p.labels, nq, n, c)
            cols = _spans(q0, q1, self.radii_cols) + _spans(s0, s1, self.radii_cols)
            tasks += [(r0, r1, cols) for r0, r1 in _spans(q0, q1, self.rows)]
        radius = np.empty((self.G, nq), dtype=self.dtype)
        same = np.empty((self.G, nq), dtype=np.int64)

        def store(task, out):
            radius[:, task[0]:task[1]], same[:, task[0]:task[1]] = out

        self._run(self._radii_task, tasks, store)
        return radius, same

    def _radii_task(self, task) -> tuple[np.ndarray, np.ndarray]:
        r0, r1, cols = task
        p, loc = self.prep, self._buffers()
        big = np.iinfo(np.int32).max if self.dtype == np.int32 else np.inf
        top = np.full((self.G, r1 - r0, self.k), big, dtype=self.dtype)
        zeros = np.zeros((self.G, r1 - r0), dtype=np.int64)
        mins = np.empty(self.radii_cols // STRETCH + 2, dtype=np.int32) if p.int8 else None
        rows = self._row_side(r0, r1)
        for c0, c1 in cols:
            if p.int8:
                tile = (*self._int8_tile(rows, c0, c1), r0, c0)
                if self._topk_plan is not None and c1 - c0 <= self._topk_cols:  # generated for the plan
                    self._topk_plan(*tile, top, zeros, mins)
                else:
                    topk_int(*tile, self.parent, self.client, self.grow, top, zeros, loc.work, mins)
            elif p.mode == "dots":
                K.topk_dots(self._dots(r0, r1, c0, c1), _c(p.norms[:, r0:r1]), _c(p.norms[:, c0:c1]), r0, c0,
                            p.int_mode, p.rows, p.offsets, self.parent, self.client, self.grow, top, zeros,
                            loc.work)
            else:
                K.topk_direct(p.XT, p.offsets, r0, c0, c1 - c0, self.parent, self.client, self.grow, top,
                              zeros, loc.work)
        radius = top[:, :, self.k - 1]
        # same-class samples inside the radius: those of the K below it, or, for a zero radius,
        # all K and every further one at distance 0
        below = (top < radius[:, :, None]).sum(axis=2)
        return radius, np.where(radius > 0, below, self.k + zeros)

    def bounds(self, radius: np.ndarray) -> np.ndarray:
        """The inclusive bound of each radius for phase 2: d <= bound iff d < r (r > 0) or d = 0 (r = 0)."""
        if self.dtype == np.int32:
            return np.where(radius > 0, radius - 1, 0).astype(np.int32)
        return np.nextafter(radius, np.zeros((), dtype=radius.dtype))

    # ------------------------------------------------------------------ phase 2
    def counts(self, radius: np.ndarray) -> np.ndarray:
        """(G, |Q|) other-class samples within each query's bound (d <= bound; :meth:`bounds`), sorted
        query order."""
        nq = self.prep.n_queries
        cnt = np.zeros((self.G, nq), dtype=np.int64)

        def add(task, out):
            (r0, r1), (row_cnt, col_cnt) = task, out
            cnt[:, r0:r1] += row_cnt
            if col_cnt is not None:
                cnt[:, r1:] += col_cnt

        rows = _class_spans(self.prep.labels, 0, nq, self.rows)
        self._run(lambda t: self._counts_task(t, radius), rows, add)
        return cnt

    def _counts_task(self, task, radius):
        r0, r1 = task
        nq, n = self.prep.n_queries, self.prep.labels.shape[0]
        row_cnt = np.zeros((self.G, r1 - r0), dtype=np.int64)
        row_rad = _c(radius[:, r0:r1])
        col_cnt = np.zeros((self.G, nq - r1), dtype=np.int32) if r1 < nq else None
        lab = self.prep.labels  # the rows are of one class (_class_spans): their own block has no pair
        rows = self._row_side(r0, r1)
        for c0, c1 in _class_spans(lab, r1, nq, self.cols):  # later queries: both sides
            credit = np.zeros((self.G, c1 - c0), dtype=np.int32)
            if self._count_tile(row_cnt, row_rad, _c(radius[:, c0:c1]), credit, (r0, r1, rows), c0, c1):
                col_cnt[:, c0 - r1: c1 - r1] += credit
        for c0, c1 in _class_spans(lab, nq, n, self.cols):  # samples that are not queries: row side
            self._count_tile(row_cnt, row_rad, None, None, (r0, r1, rows), c0, c1)
        return row_cnt, col_cnt

    def _count_tile(self, row_cnt, row_rad, col_rad, credit, block, c0, c1) -> bool:
        """Count a tile of the rows ``block`` (r0, r1, their :class:`Side`) and columns c0..c1 into
        ``row_cnt`` and, when ``credit`` is given, the columns' ``credit``; whether it credited them."""
        (r0, r1, rows), lab, p = block, self.prep.labels, self.prep
        if lab[r0] == lab[r1 - 1] == lab[c0] == lab[c1 - 1]:
            return False  # a single-class tile holds no other-class pair
        symmetric = credit is not None
        if not symmetric:  # placeholders the kernel does not read
            col_rad = np.zeros((self.G, 1), dtype=self.dtype)
            credit = np.zeros((self.G, 1), dtype=np.int32)
        loc = self._buffers()
        if p.int8:  # rows of one class, columns of another (_class_spans)
            tile = (*self._int8_tile(rows, c0, c1), row_rad, col_rad)
            if self._count_plan is not None:
                self._count_plan(*tile, symmetric, row_cnt, credit)
            else:
                if not hasattr(loc, "block"):
                    width = p.n_clients + self.parent.shape[0]
                    loc.block = np.empty((ROW_BLOCK, width, CHUNK), dtype=np.int32)
                count_int(*tile, self.parent, self.client, self.grow, symmetric, row_cnt, credit, loc.block)
            return symmetric
        args = (lab[r0:r1], lab[c0:c1], row_rad, col_rad, self.parent, self.client, self.grow, symmetric,
                row_cnt, credit, loc.work)
        if p.mode == "dots":
            K.count_dots(self._dots(r0, r1, c0, c1), _c(p.norms[:, r0:r1]), _c(p.norms[:, c0:c1]), p.int_mode,
                         p.rows, p.offsets, r0, c0, *args)
        else:
            K.count_direct(p.XT, p.offsets, r0, c0, c1 - c0, *args)
        return symmetric
