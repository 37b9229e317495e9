"""Sources: standardisation, index -> base item, file lookup by name, caching."""

import os
from pathlib import Path

import numpy as np
import pytest

from fedstream.data import sources
from fedstream.data.sources import ImageSource, Source, TabularSource, load_source
from fedstream.errors import DataError
from tests.helpers.data import DATA, uci_text, write, write_idx


def write_csv(path: Path, n: int, d: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng([d, seed])
    X = rng.standard_normal((n, d)).astype(np.float32)
    y = rng.integers(0, 2, n)
    write(path, uci_text(X, y))
    return X


def test_image_source_standardisation() -> None:
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 256, (10, 28, 28), dtype=np.uint8), rng.integers(0, 10, 10)
    s = ImageSource(x, y, name="mnist", deform=False)
    assert isinstance(s, Source) and (s.n_base, s.n_features, s.n_classes) == (10, 784, 10)
    f = s.features(np.array([3, 13, 0]))
    assert f.dtype == np.float32 and f.shape == (3, 784)
    expect = ((x[[3, 3, 0]].reshape(3, -1) / 255.0 - 0.1307) / 0.3081).astype(np.float32)
    np.testing.assert_allclose(f, expect, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(s.labels(np.array([3, 13])), [y[3], y[3]])
    d = ImageSource(x, y, name="imnist", deform=True, seed=0)
    assert (d.features(np.array([3])) != d.features(np.array([13]))).any()
    np.testing.assert_array_equal(d.labels(np.array([3, 13])), [y[3], y[3]])


def test_image_source_features_are_the_float32_formula() -> None:
    """The lookup-table path gives exactly (x / 255 - 0.1307) / 0.3081 cast to float32."""
    rng = np.random.default_rng(1)
    x = rng.integers(0, 256, (7, 28, 28), dtype=np.uint8)
    x[0].ravel()[:256] = np.arange(256)  # every grey level
    y = rng.integers(0, 10, 7)
    idx = np.array([0, 6, 7, 13, 3, 10**12 + 5])

    def formula(img: np.ndarray) -> np.ndarray:
        z = (img.reshape(len(img), -1) / 255.0 - sources.MNIST_MEAN) / sources.MNIST_STD
        return z.astype(np.float32)

    s = ImageSource(x, y, name="mnist", deform=False)
    np.testing.assert_array_equal(s.features(idx), formula(x[idx % 7]))
    d = ImageSource(x, y, name="imnist", deform=True, seed=2)
    f = d.features(idx)
    assert f.dtype == np.float32 and f.flags.c_contiguous
    np.testing.assert_array_equal(f, formula(d._gen.images(idx)))
    assert s.features(np.array([], dtype=np.int64)).shape == (0, 784)
    assert d.features(np.array([], dtype=np.int64)).shape == (0, 784)


def test_tabular_source_standardisation() -> None:
    rng = np.random.default_rng(0)
    X = (rng.standard_normal((300, 4)) * [1, 5, 0, 2] + [0, 3, 7, -1]).astype(np.float32)
    X_copy = X.copy()
    y = rng.integers(0, 2, 300)
    s = TabularSource(X, y, name="t", stats_rows=100)
    assert isinstance(s, Source) and s.n_classes == 2 and s.base_labels.dtype == np.int64
    f = s.features(np.arange(100))
    np.testing.assert_allclose(f[:, [0, 1, 3]].mean(0), 0, atol=1e-5)
    np.testing.assert_allclose(f[:, [0, 1, 3]].std(0), 1, atol=1e-4)
    np.testing.assert_allclose(f[:, 2], 0, atol=1e-6)  # constant column: std 0 -> 1
    np.testing.assert_array_equal(s.features(np.array([305])), s.features(np.array([5])))
    np.testing.assert_array_equal(X, X_copy)  # the raw array is not modified
    np.testing.assert_array_equal(s.labels(np.array([0, 300])), [y[0], y[0]])


@pytest.mark.parametrize("layout,gz", [("mnist", True), ("", True), ("mnist", False), ("MNIST/raw", True)])
def test_load_mnist_layouts(tmp_path: Path, layout: str, gz: bool) -> None:
    x, y = write_idx(tmp_path / layout, 30, gz=gz)
    s = load_source("mnist", tmp_path, seed=0)
    assert (s.name, s.n_base) == ("mnist", 30)
    np.testing.assert_array_equal(s.base_labels, y)
    i = load_source("imnist", tmp_path, seed=0)
    assert i.name == "imnist" and i.n_base == 30


@pytest.mark.parametrize("folder", ["fashion_mnist", "fashion-mnist"])
def test_load_fashion(tmp_path: Path, folder: str) -> None:
    write_idx(tmp_path / folder, 20, seed=3)
    assert load_source("fashion-mnist", tmp_path, seed=0).n_base == 20


def test_missing_files_are_explained(tmp_path: Path) -> None:
    with pytest.raises(DataError) as e:
        load_source("mnist", tmp_path, seed=0)
    assert str(tmp_path / "mnist" / "train-images-idx3-ubyte.gz") in str(e.value)
    assert "lecun" in str(e.value).lower()
    for name, site in [("higgs", "dataset/280"), ("susy", "dataset/279")]:
        with pytest.raises(DataError, match=site):
            load_source(name, tmp_path, seed=0)
    x_dir = tmp_path / "mnist"
    write_idx(x_dir, 5)
    (x_dir / "train-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(DataError, match="train-labels-idx1-ubyte"):
        load_source("mnist", tmp_path, seed=0)
    with pytest.raises(ValueError, match="source name"):
        load_source("cifar", tmp_path, seed=0)


def test_load_tabular_order_and_max_rows(tmp_path: Path) -> None:
    sub = write_csv(tmp_path / "higgs_subset" / "higgs_first10k_h2o_3sigdigits.csv.gz", 40, 28)
    s = load_source("higgs", tmp_path, seed=0, stats_rows=10)
    assert (s.n_base, s.n_features, s.n_classes) == (40, 28, 2)
    full = write_csv(tmp_path / "HIGGS.csv", 60, 28, seed=1)  # preferred over the subset
    s = load_source("higgs", tmp_path, seed=0, max_rows=50)
    assert s.n_base == 50
    np.testing.assert_array_equal(s._X, full[:50])
    assert not np.array_equal(sub[:40], full[:40])
    write_csv(tmp_path / "susy" / "SUSY.csv.gz", 25, 18)
    s = load_source("susy", tmp_path, seed=0)
    assert (s.n_base, s.n_features) == (25, 18)


def test_cache_keyed_by_path_and_mtime(tmp_path: Path) -> None:
    sources.clear_cache()
    write_idx(tmp_path / "mnist", 10)
    a = load_source("mnist", tmp_path, seed=0)
    b = load_source("imnist", tmp_path, seed=1)
    assert a._images is b._images  # read once
    assert not a._images.flags.writeable
    write_idx(tmp_path / "mnist", 12, seed=1)
    os.utime(tmp_path / "mnist" / "train-images-idx3-ubyte.gz", ns=(1, 10**18))
    os.utime(tmp_path / "mnist" / "train-labels-idx1-ubyte.gz", ns=(1, 10**18))
    assert load_source("mnist", tmp_path, seed=0).n_base == 12
    sources.clear_cache()


@pytest.mark.skipif(not (DATA / "mnist").is_dir() or not (DATA / "higgs_subset").is_dir(),
                    reason=f"real data not found under {DATA} (set FEDSTREAM_DATA)")
def test_real_sources() -> None:
    m = load_source("mnist", DATA, seed=0)
    assert (m.n_base, m.n_features, m.n_classes) == (60000, 784, 10)
    f = m.features(np.arange(2000))
    assert abs(float(f.mean())) < 0.05 and abs(float(f.std()) - 1) < 0.05  # the MNIST constants
    h = load_source("higgs", DATA, seed=0)
    assert (h.n_base, h.n_features) == (10000, 28)
    assert np.abs(h.features(np.arange(10000)).mean(0)).max() < 1e-4
    if (DATA / "fashion_mnist").is_dir():
        assert load_source("fashion-mnist", DATA, seed=0).n_base == 60000
