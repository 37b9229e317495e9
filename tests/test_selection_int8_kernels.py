"""The int8 path's kernels count exactly what the generic kernel and the plain definition count,
also when a client's rows or columns are blank (its GEMM then covers only a part of the tile)."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fedstream.selection import _kernels as K
from fedstream.selection._engine import int8_side, int8_tile_dots, sum_plan
from fedstream.selection._int8_kernels import BIG, CHUNK, ROW_BLOCK, count_int, topk_int
from fedstream.selection._layout import int8_layout
from fedstream.selection._plan_kernels import CW, PACK, ROWS, count_kernel, plan_source
from fedstream.selection.group_testing import marginal_groups

WIDTHS = (3, 5, 2, 4)
GROUPS = [(0,), (1,), (2,), (3,), (1, 2, 3), (0, 2, 3), (0, 1, 3), (0, 1, 2), (0, 1, 2, 3), (1, 3)]
# the generated kernels serve the marginal design only (its plan depends on m alone); their tests
# use that plan, so that a fresh machine compiles one generated module for them, not two
MARGINAL = marginal_groups(4)


def _features(n, seed, blank_share):
    """Shifted int8 features (small values, many tied distances) with some samples blank (every
    feature at -128, the client's minimum) for clients 0 and 3, as the layout lays them out."""
    rng = np.random.default_rng(seed)
    feats = [rng.integers(-128, -124, (n, w)).astype(np.int8) for w in WIDTHS]
    blank = np.zeros((len(WIDTHS), n), dtype=bool)
    for j in (0, 3):
        blank[j] = rng.random(n) < blank_share
        feats[j][blank[j]] = -128
    for j in range(len(WIDTHS)):  # a sample can be blank without being marked so (the GEMM covers it)
        blank[j] &= rng.random(n) < 0.9
    return rng, feats, blank


def _tile(feats, blank, r0, r1, c0, c1):
    flat = np.empty(len(feats) * (r1 - r0) * (c1 - c0), np.int32)
    geo = np.zeros((len(feats), 5), np.int64)
    _, feats_t, norms, floor = int8_layout(feats, np.arange(feats[0].shape[0]), [0] * len(feats))
    rows, cols = int8_side(norms, floor, blank, r0, r1), int8_side(norms, floor, blank, c0, c1, feats_t)
    int8_tile_dots(feats, rows, cols, flat, geo)
    return flat, geo, rows.norms, cols.norms, rows.floor, cols.floor


@pytest.mark.parametrize("dtype,shift", [(np.uint8, 128), (np.int64, 3), (np.float64, -100)])
def test_int8_layout_is_the_gather_shift_and_transpose(dtype, shift):
    """The layout's one pass: rows in the given order, x - shift as int8, the transpose, the
    squared norms and the distances to the blank sample (every shifted feature at -128)."""
    rng = np.random.default_rng(7)
    lo = 0 if dtype is np.uint8 else shift - 128
    x = rng.integers(lo, lo + 256, (131, 70)).astype(dtype)  # 131 rows: blocks of 64 and a rest
    perm = rng.permutation(131)
    feats, feats_t, norms, floor = int8_layout([x, x[:, :1]], perm, [shift, shift])
    for j, b in enumerate((x, x[:, :1])):
        want = (b[perm].astype(np.int64) - shift).astype(np.int8)
        assert feats[j].dtype == np.int8 and np.array_equal(feats[j], want)
        assert feats_t[j].flags.c_contiguous and np.array_equal(feats_t[j], want.T)
        w = want.astype(np.int64)
        assert np.array_equal(norms[j], (w**2).sum(axis=1))
        assert np.array_equal(floor[j], ((w + 128) ** 2).sum(axis=1))


def _distances(feats, r0, r1, c0, c1):
    """(m, R, C) client distances by the definition."""
    return np.stack([((f[r0:r1, None, :].astype(np.int64) - f[None, c0:c1, :]) ** 2).sum(axis=2)
                     for f in feats])


@pytest.mark.parametrize(
    "rows,cols", [(ROWS * 3, CW + 37), (ROWS * 2 + 1, 19), (1, CW + 1), (ROWS * 5 + 1, 300)]
)
@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("blank_share", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("kernel", ["generated", "count_int"])
def test_int8_count_kernels_equal_generic_kernel(rows, cols, symmetric, blank_share, kernel):
    """Phase 2's int8 kernels, the one generated for the plan (marginal design) and ``count_int``
    (any other design): the counts of the generic kernel and of the definition, with rows left
    over after the blocks of ROWS (ROW_BLOCK), column chunks cut anywhere (CW + 37 columns: two
    of count_int's CHUNK and a part) and blank rows and columns (the three cases of each client's
    distance)."""
    rng, feats, blank = _features(rows + cols, seed=rows + cols, blank_share=blank_share)
    r0, r1, c0, c1 = 0, rows, rows, rows + cols
    tile = _tile(feats, blank, r0, r1, c0, c1)
    parent, client, grow = sum_plan(MARGINAL, 4)
    G = len(MARGINAL)
    row_bound = rng.integers(0, 30, (G, rows)).astype(np.int32)
    col_bound = rng.integers(0, 30, (G, cols)).astype(np.int32)
    d = _distances(feats, r0, r1, c0, c1)
    # the generic kernel, on dot products recovered from the definition
    norms = [np.stack([(f.astype(np.int64) ** 2).sum(axis=1) for f in feats])]
    nr, nc = norms[0][:, r0:r1].astype(np.int32), norms[0][:, c0:c1].astype(np.int32)
    dots = ((nr[:, :, None] + nc[:, None, :] - d) // 2).astype(np.int32)
    want_rows, want_cols = np.zeros((G, rows), np.int64), np.zeros((G, cols), np.int32)
    work = np.empty((4 + parent.shape[0]) * cols, np.int32)
    labels = (np.zeros(rows, np.int64), np.ones(cols, np.int64))  # rows and columns of two classes
    K.count_dots(dots, nr, nc, True, np.zeros((1, 1), np.float32), np.zeros(5, np.int64), 0, rows, *labels,
                 row_bound, col_bound, parent, client, grow, symmetric, want_rows, want_cols, work)
    got_rows, got_cols = np.zeros((G, rows), np.int64), np.zeros((G, cols), np.int32)
    if kernel == "generated":
        count_kernel(4, parent, client, grow)(*tile, row_bound, col_bound, symmetric, got_rows, got_cols)
    else:
        block = np.empty((ROW_BLOCK, 4 + parent.shape[0], CHUNK), np.int32)
        count_int(*tile, row_bound, col_bound, parent, client, grow, symmetric, got_rows, got_cols, block)
    np.testing.assert_array_equal(got_rows, want_rows)
    np.testing.assert_array_equal(got_cols, want_cols)
    for g, members in enumerate(MARGINAL):  # and the plain definition, summed over the group
        dg = d[list(members)].sum(axis=0)
        np.testing.assert_array_equal(got_rows[g], (dg <= row_bound[g][:, None]).sum(axis=1))
        if symmetric:
            np.testing.assert_array_equal(got_cols[g], (dg <= col_bound[g][None, :]).sum(axis=0))
    assert 0 < got_rows.sum() < G * rows * cols
    if not symmetric:
        assert not got_cols.any()


@pytest.mark.parametrize("symmetric", [True, False])
def test_generated_count_kernel_keeps_a_pair_of_rows_counts_apart(symmetric):
    """The generated loop counts a pair of rows in one int32 (the second row's hits PACK bits up): a
    row whose every column is within its bound beside one with none, over chunks of CW columns
    (the most one segment holds), and the reverse, give exactly C and 0."""
    rows, cols = ROWS * 2 + 1, 2 * CW + 37
    assert ROWS == 2 and CW < 1 << PACK  # the packing's premise: a half never carries into the other
    _, feats, blank = _features(rows + cols, seed=5, blank_share=0.0)
    tile = _tile(feats, blank, 0, rows, rows, rows + cols)
    parent, client, grow = sum_plan(MARGINAL, 4)
    G = len(MARGINAL)
    everything = np.iinfo(np.int32).max - 1
    row_bound = np.where(np.arange(rows) % 2 == np.arange(G)[:, None] % 2, everything, -1).astype(np.int32)
    col_bound = np.full((G, cols), everything, np.int32)
    got_rows, got_cols = np.zeros((G, rows), np.int64), np.zeros((G, cols), np.int32)
    count_kernel(4, parent, client, grow)(*tile, row_bound, col_bound, symmetric, got_rows, got_cols)
    np.testing.assert_array_equal(got_rows, np.where(row_bound > 0, cols, 0))
    np.testing.assert_array_equal(got_cols, np.full((G, cols), rows if symmetric else 0))


def test_generated_kernel_is_written_once_and_loaded_from_the_cache(tmp_path, monkeypatch):
    """The kernel's source goes to the cache folder (numba then caches its machine code beside it);
    the same plan gives the same function, another plan another file."""
    import fedstream.selection._plan_kernels as P

    monkeypatch.setenv("FEDSTREAM_KERNEL_CACHE", str(tmp_path))
    monkeypatch.setattr(P, "_LOADED", {})
    parent, client, grow = sum_plan(GROUPS, 4)
    first = count_kernel(4, parent, client, grow)
    assert count_kernel(4, parent, client, grow) is first
    files = sorted(tmp_path.glob("plan_*.py"))
    assert len(files) == 1 and files[0].read_text() == plan_source(4, parent, client, grow)
    count_kernel(2, *sum_plan([(0,), (1,), (0, 1)], 2))
    assert len(list(tmp_path.glob("plan_*.py"))) == 2


def test_generated_kernels_change_name_with_the_kernels_they_call(monkeypatch):
    """A kernel cache kept across versions: the generated text (hence its file) names the kernels
    it was built on, so numba's cache of an older file is never used with newer kernels."""
    import fedstream.selection._plan_kernels as P

    plan = sum_plan([(0,), (1,), (0, 1)], 2)
    before = plan_source(2, *plan)
    assert P._kernels_digest() in before
    monkeypatch.setattr(P, "_kernels_digest", lambda: "0" * 16)
    assert plan_source(2, *plan) != before


def test_an_unusable_kernel_cache_falls_back_with_a_warning(tmp_path, monkeypatch, caplog):
    import fedstream.selection._plan_kernels as P

    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    monkeypatch.setenv("FEDSTREAM_KERNEL_CACHE", str(not_a_folder))
    monkeypatch.setattr(P, "_LOADED", {})
    with caplog.at_level("WARNING", logger="fedstream.selection"):
        kernel = count_kernel(2, *sum_plan([(0,), (1,), (0, 1)], 2))
    assert callable(kernel)
    assert str(not_a_folder) in caplog.text and "FEDSTREAM_KERNEL_CACHE" in caplog.text
    written = [p.read_text() for p in P.private_dir().glob("plan_*.py")]
    assert plan_source(2, *sum_plan([(0,), (1,), (0, 1)], 2)) in written


def test_the_private_kernel_folder_is_removed_when_the_process_exits():
    """With an unwritable cache a process writes its kernels to a temporary folder of its own
    (the test above) and leaves nothing behind when it exits."""
    code = ("from fedstream.selection import _plan_kernels as P; d = P.private_dir(); "
            "(d / 'plan_x.py').write_text(''); print(d)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    folder = Path(out.stdout.strip())
    assert folder.name.startswith("fedstream-kernels-") and not folder.exists()


@pytest.mark.parametrize("blank_share", [0.0, 0.4, 1.0])
@pytest.mark.parametrize("cuts", [(0, 40, 0, 90), (10, 37, 0, 37), (50, 90, 20, 61)])
def test_topk_int_keeps_the_k_smallest(blank_share, cuts):
    """One tile of phase 1 (the row's own sample excluded): the K smallest group distances and
    the further zeros beyond K, against a sort of the definition."""
    k = 5
    _, feats, blank = _features(90, seed=7, blank_share=blank_share)
    r0, r1, c0, c1 = cuts
    parent, client, grow = sum_plan(GROUPS, 4)
    G, R, C = len(GROUPS), r1 - r0, c1 - c0
    top = np.full((G, R, k), BIG, np.int32)
    zeros = np.zeros((G, R), np.int64)
    buf = np.empty((4 + parent.shape[0]) * C, np.int32)
    topk_int(*_tile(feats, blank, r0, r1, c0, c1), r0, c0, parent, client, grow, top, zeros, buf,
             np.empty(C // 16 + 2, np.int32))
    d = _distances(feats, r0, r1, c0, c1)
    for g, members in enumerate(GROUPS):
        dg = d[list(members)].sum(axis=0)
        for a in range(R):
            own = r0 + a - c0
            v = np.sort(np.delete(dg[a], own) if 0 <= own < C else dg[a])
            want = np.concatenate([v[:k], np.full(max(0, k - v.size), BIG)])
            np.testing.assert_array_equal(top[g, a], want)
            assert zeros[g, a] == (max(0, int((v == 0).sum()) - k) if v.size >= k and v[k - 1] == 0 else 0)


@pytest.mark.parametrize("shares", [(0.5, 0.3, 0.0), (0.0, 0.0, 0.2), (0.0, 0.0, 0.0), (0.6, 0.1, 0.4)])
def test_blank_order_keeps_the_two_blankest_clients_non_blank_samples_contiguous(shares):
    from fedstream.selection._layout import blank_order

    rng = np.random.default_rng(3)
    blank = np.stack([rng.random(500) < s for s in shares])
    key = blank_order(blank)
    assert key.shape == (500,)
    order = np.argsort(key, kind="stable")
    ranked = np.argsort(-blank.mean(axis=1), kind="stable")[:2]
    for j in ranked:
        if not blank[j].any():
            continue
        nonblank = np.flatnonzero(~blank[j][order])
        assert nonblank.size == 0 or nonblank[-1] - nonblank[0] + 1 == nonblank.size


def test_the_marginal_design_counts_as_the_reference_through_the_engine():
    """Pixel strips with blank edge strips, the marginal design (the generated kernel) and another
    design (the generic one), tiles cut anywhere: the counts m_q are the reference's."""
    from fedstream.selection._engine import marginal_design
    from fedstream.selection.group_testing import marginal_groups
    from fedstream.selection.knn_mi import knn_counts
    from fedstream.selection.reference import reference_m_counts

    rng = np.random.default_rng(11)
    n = 260
    y = rng.integers(0, 3, n)
    rows = rng.integers(0, 256, (5, 28))[rng.integers(0, 5, n)] + rng.integers(-2, 3, (n, 28))
    rows = np.clip(rows, 0, 255).astype(np.uint8)
    rows[rng.random(n) < 0.4, :7] = 0  # blank edge strips: zero radii, blank rows and columns
    rows[rng.random(n) < 0.3, 21:] = 0
    blocks = [rows[:, 7 * j: 7 * j + 7] for j in range(4)]
    marginal = marginal_groups(4)
    other = [(0,), (1, 2), (0, 3), (0, 1, 2, 3)]
    assert marginal_design(marginal[::-1], 4) and not marginal_design(other, 4)
    for groups in (marginal, other):
        want = reference_m_counts(blocks, y, groups, k=4)
        for tile in (None, (13, 50), (64, 7)):
            got, _ = knn_counts(blocks, y, groups, k=4, backend="int8", tile=tile, workers=2)
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("blank_share", [0.0, 0.4, 1.0])
@pytest.mark.parametrize("cuts", [(0, 40, 0, 90), (10, 37, 0, 37), (50, 90, 20, 61), (0, 3, 0, 90)])
def test_generated_topk_kernel_equals_topk_int(blank_share, cuts):
    """Phase 1's kernel generated for the marginal plan: the K smallest and the further zeros of
    the generic int8 kernel, also when a row's K smallest come from an earlier tile."""
    from fedstream.selection._plan_kernels import topk_kernel
    from fedstream.selection.group_testing import marginal_groups

    k = 5
    _, feats, blank = _features(90, seed=9, blank_share=blank_share)
    r0, r1, c0, c1 = cuts
    groups = marginal_groups(4)
    parent, client, grow = sum_plan(groups, 4)
    G, R, C = len(groups), r1 - r0, c1 - c0
    kernel = topk_kernel(4, parent, client, grow)
    state = [(np.full((G, R, k), BIG, np.int32), np.zeros((G, R), np.int64)) for _ in range(2)]
    for lo, hi in ((c0, c0 + C // 2), (c0 + C // 2, c1)):  # the second tile starts from the first's top-K
        tile = _tile(feats, blank, r0, r1, lo, hi)
        mins, work = np.empty(C // 16 + 2, np.int32), np.empty((4 + parent.shape[0]) * C, np.int32)
        topk_int(*tile, r0, lo, parent, client, grow, *state[0], work, mins)
        kernel(*tile, r0, lo, *state[1], mins)
    np.testing.assert_array_equal(state[1][0], state[0][0])
    np.testing.assert_array_equal(state[1][1], state[0][1])


def test_generated_topk_kernel_takes_tiles_wider_than_a_count_chunk():
    """Phase 1's tiles are as wide as ``topk_width`` (wider than the count kernel's chunk): the
    generated top-K equals ``topk_int`` on a tile that wide (after an earlier tile's top-K), and
    refuses a wider one."""
    from fedstream.selection._plan_kernels import topk_kernel, topk_width

    k, G = 5, len(MARGINAL)
    C = topk_width(G)
    assert C > CW
    _, feats, blank = _features(C + 40, seed=12, blank_share=0.4)
    parent, client, grow = sum_plan(MARGINAL, 4)
    kernel = topk_kernel(4, parent, client, grow)
    r0, r1 = 20, 20 + ROWS * 2 + 1  # rows inside the wide tile: each row's own column is set aside
    state = [(np.full((G, r1 - r0, k), BIG, np.int32), np.zeros((G, r1 - r0), np.int64)) for _ in range(2)]
    mins = np.empty(C // 16 + 2, np.int32)
    work = np.empty((4 + parent.shape[0]) * C, np.int32)
    for lo, hi in ((C, C + 40), (0, C)):  # a narrow tile first, then one topk_width columns wide
        tile = _tile(feats, blank, r0, r1, lo, hi)
        topk_int(*tile, r0, lo, parent, client, grow, *state[0], work, mins)
        kernel(*tile, r0, lo, *state[1], mins)
    np.testing.assert_array_equal(state[1][0], state[0][0])
    np.testing.assert_array_equal(state[1][1], state[0][1])
    with pytest.raises(ValueError, match="C <="):
        kernel(*_tile(feats, blank, r0, r1, 0, C + 1), r0, 0, *state[1], np.empty(C // 16 + 3, np.int32))


def test_the_engine_runs_phase_1_on_whole_classes_as_with_narrow_tiles():
    """The marginal design with the default tiles takes phase 1's tiles ``topk_width`` wide (a
    class of more than a count chunk's columns in one tile): the same radii, same-class counts and
    m_q as tiles of the count chunk's width, as the float32 engine and, on a subset, as the reference."""
    from fedstream.selection._engine import Engine
    from fedstream.selection._layout import prepare
    from fedstream.selection._plan_kernels import topk_width
    from fedstream.selection.knn_mi import knn_counts
    from fedstream.selection.reference import reference_m_counts

    rng = np.random.default_rng(13)
    n = CW + 700
    y = (rng.random(n) < 0.15).astype(np.int64)  # class 0 wider than a count chunk
    rows = rng.integers(0, 256, (6, 28))[rng.integers(0, 6, n)] + rng.integers(-2, 3, (n, 28))
    rows = np.clip(rows, 0, 255).astype(np.uint8)
    rows[rng.random(n) < 0.4, :7] = 0  # blank edge strips: zero radii, blank rows and columns
    rows[rng.random(n) < 0.3, 21:] = 0
    blocks = [np.ascontiguousarray(rows[:, 7 * j: 7 * j + 7]) for j in range(4)]
    queries = np.arange(n)
    wide = Engine(prepare(blocks, y, queries, "int8", "auto"), MARGINAL, 10, None, 2)
    narrow = Engine(prepare(blocks, y, queries, "int8", "auto"), MARGINAL, 10, (wide.rows, CW), 2)
    assert wide.radii_cols == topk_width(len(MARGINAL)) > CW == narrow.radii_cols
    got, want = wide.radii(), narrow.radii()
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    counts, _ = knn_counts(blocks, y, MARGINAL, k=10, backend="int8")
    np.testing.assert_array_equal(counts, knn_counts(blocks, y, MARGINAL, k=10, backend="dots")[0])
    part = np.sort(rng.choice(n, 600, replace=False))  # the reference on a subset (its cost is n²)
    sub = [b[part] for b in blocks]
    np.testing.assert_array_equal(knn_counts(sub, y[part], MARGINAL, k=10, backend="int8")[0],
                                  reference_m_counts(sub, y[part], MARGINAL, k=10))


def test_engine_workers_run_the_int8_gemm_on_one_openmp_thread(monkeypatch):
    """A fresh worker thread starts with OpenMP's default team (the cores), which oneDNN's int8
    GEMM asks for: the engine's workers set their own to one (``torch.set_num_threads`` sets only
    the calling thread's). Seen from the thread of every int8 GEMM of a two-worker count."""
    import ctypes
    import os
    from pathlib import Path

    import torch  # loads the OpenMP runtime looked for below

    from fedstream.selection import _engine
    from fedstream.selection.knn_mi import knn_counts

    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one core: OpenMP's default team is one thread already")
    maps = Path("/proc/self/maps")
    # PyTorch's own runtime: another library's (scikit-learn bundles one) keeps counts of its own
    here = os.path.dirname(torch.__file__)
    found = maps.read_text().split() if maps.exists() else []
    lib = next((p for p in found if p.startswith(here) and ("libgomp" in p or "libiomp" in p)), None)
    if lib is None:
        pytest.skip("no OpenMP runtime of PyTorch's found in this process's maps")
    omp = ctypes.CDLL(lib)
    seen, matmul = [], _engine.int8_matmul

    def counted(a, b, out):
        seen.append(omp.omp_get_max_threads())
        matmul(a, b, out)

    monkeypatch.setattr(_engine, "int8_matmul", counted)
    x = np.random.default_rng(0).integers(0, 256, (300, 6)).astype(np.uint8)
    knn_counts([x[:, :3], x[:, 3:]], np.arange(300) % 2, [(0,), (1,)], k=3, backend="int8", tile=64,
               workers=2)
    assert len(seen) > 8 and set(seen) == {1}
