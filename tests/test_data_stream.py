"""The round stream: stateless determinism, class-prior drift, stationary order."""


import numpy as np
import pytest

from fedstream.data import stream as stream_mod
from fedstream.data.sources import ImageSource, TabularSource, load_source
from fedstream.data.stream import Stream
from tests.helpers.data import DATA, HAVE_MNIST


@pytest.fixture(scope="module")
def tab() -> TabularSource:
    rng = np.random.default_rng(0)
    y = rng.integers(0, 5, 997)
    y[y == 3] = 4  # class 3 has no base item
    return TabularSource(rng.standard_normal((997, 6)), y, name="t", stats_rows=500, n_classes=5)


@pytest.fixture(scope="module")
def img() -> ImageSource:
    rng = np.random.default_rng(1)
    return ImageSource(rng.integers(0, 256, (120, 28, 28), dtype=np.uint8), rng.integers(0, 10, 120),
                       name="img", deform=True, seed=2)


def fetch_in_chunks(s: Stream, t0: int, n: int, cuts: list[int]):
    edges = [t0, *sorted(c for c in cuts if t0 < c < t0 + n), t0 + n]
    parts = [s.batch(a, b - a) for a, b in zip(edges[:-1], edges[1:])]
    return tuple(np.concatenate(p) for p in zip(*parts))


@pytest.mark.parametrize("drift", ["none", "class-prior"])
@pytest.mark.parametrize("which", ["tab", "img"])
def test_same_rows_whatever_the_chunking(drift: str, which: str, request) -> None:
    src = request.getfixturevalue(which)
    s = Stream(src, drift=drift, drift_every=7, seed=5)
    t0, n = 4000, 300 if which == "img" else 9000  # crosses the 4096-round random chunks
    X, y, idx = s.batch(t0, n)
    assert X.dtype == np.float32 and X.shape == (n, src.n_features)
    assert y.dtype == np.int64 and idx.dtype == np.int64
    rng = np.random.default_rng(0)
    for _ in range(3):
        cuts = rng.integers(t0, t0 + n, 6).tolist() + [4096, 8192]
        X2, y2, idx2 = fetch_in_chunks(Stream(src, drift=drift, drift_every=7, seed=5), t0, n, cuts)
        np.testing.assert_array_equal(idx2, idx)
        np.testing.assert_array_equal(y2, y)
        np.testing.assert_array_equal(X2, X)
    np.testing.assert_array_equal(y, src.base_labels[idx % src.n_base])
    if drift == "none":
        np.testing.assert_array_equal(idx, np.arange(t0, t0 + n))
    else:
        np.testing.assert_array_equal(idx // src.n_base, np.arange(t0, t0 + n))  # i = a + n_base*t
        other = Stream(src, drift=drift, drift_every=7, seed=6).indices(t0, n)
        assert (other != idx).mean() > 0.5


def test_class_probabilities_change_every_block(tab: TabularSource) -> None:
    s = Stream(tab, drift="class-prior", drift_every=10, seed=1)
    p = np.array([s.class_probabilities(t) for t in range(40)])
    np.testing.assert_allclose(p.sum(axis=1), 1.0)
    assert (p[:, 3] == 0).all()  # no base item of class 3
    for b in range(4):
        assert (p[b * 10 : (b + 1) * 10] == p[b * 10]).all()
    assert all((p[b * 10] != p[(b + 1) * 10]).any() for b in range(3))
    none = Stream(tab, drift="none", seed=1).class_probabilities(123)
    np.testing.assert_allclose(none, np.bincount(tab.base_labels, minlength=5) / tab.n_base)


def test_empirical_class_frequencies_follow_the_prior(tab: TabularSource) -> None:
    n = 20000
    s = Stream(tab, drift="class-prior", drift_every=n, seed=3)
    for b in range(3):
        y = tab.labels(s.indices(b * n, n))
        freq = np.bincount(y, minlength=5) / n
        p = s.class_probabilities(b * n)
        assert np.all(np.abs(freq - p) <= 5 * np.sqrt(p * (1 - p) / n) + 1e-12), (freq, p)
    # within a class, base items are drawn uniformly
    a = s.indices(0, n) % tab.n_base
    members = np.flatnonzero(tab.base_labels == 0)
    counts = np.bincount(a, minlength=tab.n_base)[members]
    assert counts.sum() > 0 and (counts > 0).mean() > 0.9


def test_vectorised_many_blocks(tab: TabularSource) -> None:
    s = Stream(tab, drift="class-prior", drift_every=1, seed=0)
    idx = s.indices(10**6, 5000)
    assert idx.shape == (5000,) and (idx // tab.n_base == np.arange(10**6, 10**6 + 5000)).all()


def test_bad_arguments(tab: TabularSource) -> None:
    with pytest.raises(ValueError, match="drift"):
        Stream(tab, drift="covariate", seed=0)
    with pytest.raises(ValueError, match="drift_every"):
        Stream(tab, drift="class-prior", drift_every=0, seed=0)
    s = Stream(tab, seed=0)
    with pytest.raises(ValueError, match="t0"):
        s.batch(-1, 5)
    with pytest.raises(ValueError, match="n:"):
        s.batch(0, -5)
    with pytest.raises(ValueError, match="overflow"):
        Stream(tab, drift="class-prior", seed=0).indices(2**62, 10)
    X, y, idx = s.batch(3, 0)
    assert X.shape == (0, 6) and y.shape == (0,) and idx.shape == (0,)
    assert stream_mod.RNG_CHUNK == 4096  # changing it changes every class-prior stream


@pytest.mark.skipif(not HAVE_MNIST, reason=f"real MNIST not found under {DATA} (set FEDSTREAM_DATA)")
def test_stationary_imnist_follows_mnist_train_order() -> None:
    from fedstream.data.idx import read_idx_labels

    y_train = read_idx_labels(DATA / "mnist" / "train-labels-idx1-ubyte.gz")
    s = Stream(load_source("imnist", DATA, seed=0), drift="none", seed=0)
    np.testing.assert_array_equal(s.source.labels(s.indices(0, 60000)), y_train)
    X, y, idx = s.batch(59990, 20)
    np.testing.assert_array_equal(y, np.concatenate([y_train[59990:], y_train[:10]]))
    assert X.shape == (20, 784) and np.isfinite(X).all()
    # the second pass shows new deformations of the same digits
    assert (s.batch(5, 1)[0] != s.batch(60005, 1)[0]).any()
