"""Sources: labelled base sets addressed by an integer index, as standardised float32 features.

A :class:`Source` maps any index ``i >= 0`` to a sample (features, label). Index ``i`` belongs to
base item ``i mod n_base``; an image source with deformation (i-MNIST) gives a different image
for every ``i``, the others repeat their base items. The stream (:mod:`fedstream.data.stream`)
decides which indices a run sees; a source only computes them.

Standardisation:
* images: ``(x / 255 - 0.1307) / 0.3081`` per pixel, the usual MNIST mean and std. The same
  constants are used for Fashion-MNIST (whose own are 0.2860 / 0.3530) so that every image source
  is transformed alike; the models do not care about the small offset.
* tabular: per-feature mean and std of the first ``stats_rows`` rows (what an online learner could
  have seen at the start), std 0 -> 1, applied per batch so the raw array is never copied.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np
from numba import njit

from fedstream.data.idx import read_idx_images, read_idx_labels
from fedstream.data.imnist import InfiniteMNIST, check_indices
from fedstream.data.paths import find_file
from fedstream.data.table_source import TableSource, TableSpec
from fedstream.data.tabular import read_uci_csv
from fedstream.errors import DataError

MNIST_MEAN = 0.1307
MNIST_STD = 0.3081

SOURCE_NAMES = ("imnist", "mnist", "fashion-mnist", "higgs", "susy", "table")


@runtime_checkable
class Source(Protocol):
    """A finite or endless labelled base set addressed by integer index (see module doc)."""

    name: str
    n_base: int
    n_features: int
    n_classes: int
    base_labels: np.ndarray  # int64 (n_base,): label of base item a; index i -> item i mod n_base

    def features(self, indices: np.ndarray) -> np.ndarray:
        """float32 (len(indices), n_features), standardised."""
        ...

    def labels(self, indices: np.ndarray) -> np.ndarray:
        """int64 (len(indices),)."""
        ...

    def standardise(self, raw) -> np.ndarray:
        """float32 (n, n_features): new raw rows encoded and standardised as :meth:`features` gives
        the source's own (images: pixel values 0-255; tabular: the file's columns; a table: a
        :class:`~fedstream.data.table.Table` with the clients' columns by name, categorical ones
        one-hot). What a finished run's parties apply to the rows they predict."""
        ...


class ImageSource:
    """28x28 uint8 images as 784 standardised features; ``deform=True`` makes it i-MNIST."""

    def __init__(
        self, images: np.ndarray, labels: np.ndarray, *, name: str, deform: bool, seed: int = 0,
        n_classes: int = 10,
    ) -> None:
        images = np.asarray(images)
        labels = np.asarray(labels)
        if images.dtype != np.uint8 or images.ndim != 3 or images.shape[0] == 0:
            raise ValueError(f"images: expected uint8 (n > 0, rows, cols), found {images.dtype} "
                             f"{images.shape}")
        if labels.shape != (images.shape[0],):
            raise ValueError(f"labels: expected shape ({images.shape[0]},), found {labels.shape}")
        self.name = name
        self.n_base = int(images.shape[0])
        self.n_features = int(images.shape[1] * images.shape[2])
        self.n_classes = int(n_classes)
        self.base_labels = labels.astype(np.int64)
        self.deform = bool(deform)
        self._images = np.ascontiguousarray(images)  # no copy if already contiguous
        self._gen = InfiniteMNIST(images, labels, seed=seed) if deform else None
        # Lookup table pixel value -> standardised float32, (v / 255 - MNIST_MEAN) / MNIST_STD.
        self._lut = ((np.arange(256) / 255.0 - MNIST_MEAN) / MNIST_STD).astype(np.float32)

    def features(self, indices: np.ndarray) -> np.ndarray:
        """float32 (len(indices), n_features): ``(x / 255 - 0.1307) / 0.3081`` of each pixel x.

        Computed as ``lut[x]`` (same float32 values as the formula cast to float32), by a numba
        loop that gathers the rows and looks the pixels up in one pass.
        """
        idx = check_indices(indices)
        if self._gen is not None:
            img = self._gen.images(idx).reshape(idx.size, self.n_features)
            rows = np.arange(idx.size, dtype=np.int64)
        else:
            img = self._images.reshape(self.n_base, self.n_features)
            rows = idx % self.n_base
        out = np.empty((idx.size, self.n_features), np.float32)
        _lookup_rows(self._lut, img, rows, out)
        return out

    def labels(self, indices: np.ndarray) -> np.ndarray:
        return self.base_labels[check_indices(indices) % self.n_base]

    def standardise(self, raw) -> np.ndarray:
        """float32 (n, n_features) of raw pixel values 0-255, (n, 28, 28) or flattened."""
        return standardise_pixels(raw, self.n_features)


def standardise_pixels(raw, n_features: int) -> np.ndarray:
    """``(x / 255 - 0.1307) / 0.3081`` of raw pixels (n, ...) holding ``n_features`` values a row."""
    X = np.asarray(raw)
    if not isinstance(raw, np.ndarray) or X.ndim < 2 or int(np.prod(X.shape[1:])) != n_features:
        raise DataError(f"expected raw images, an array (n, ...) of {n_features} pixel values a row, "
                        f"found {type(raw).__name__} {getattr(X, 'shape', '')}")
    if X.size and (X.min() < 0 or X.max() > 255):
        raise DataError("expected raw pixel values in 0..255")
    rows = X.reshape(len(X), n_features).astype(np.float64)
    return ((rows / 255.0 - MNIST_MEAN) / MNIST_STD).astype(np.float32)


@njit(cache=True)
def _lookup_rows(lut, images, rows, out):  # pragma: no cover
    """out[j, i] = lut[images[rows[j], i]] (uint8 pixels -> float32 via a 256-entry table)."""
    for j in range(rows.shape[0]):
        img = images[rows[j]]
        o = out[j]
        for i in range(img.shape[0]):
            o[i] = lut[img[i]]


class TabularSource:
    """Rows of X (n, d) with labels y; index i -> row i mod n, standardised on the first rows."""

    def __init__(
        self, X: np.ndarray, y: np.ndarray, *, name: str, stats_rows: int = 10000,
        n_classes: int | None = None,
    ) -> None:
        X = np.asarray(X, dtype=np.float32)
        y = np.asarray(y)
        if X.ndim != 2 or X.shape[0] == 0:
            raise ValueError(f"X: expected a 2-D array with at least one row, found {X.shape}")
        if y.shape != (X.shape[0],):
            raise ValueError(f"y: expected shape ({X.shape[0]},), found {y.shape}")
        if stats_rows < 1:
            raise ValueError(f"stats_rows: expected >= 1, found {stats_rows}")
        self.name = name
        self.n_base = int(X.shape[0])
        self.n_features = int(X.shape[1])
        self.base_labels = y.astype(np.int64)
        self.n_classes = int(n_classes) if n_classes is not None else int(self.base_labels.max()) + 1
        head = X[:stats_rows].astype(np.float64)
        std = head.std(axis=0)
        self.mean = head.mean(axis=0).astype(np.float32)
        self.std = np.where(std > 0, std, 1.0).astype(np.float32)
        self._X = X

    def features(self, indices: np.ndarray) -> np.ndarray:
        rows = self._X[check_indices(indices) % self.n_base]
        rows -= self.mean
        rows /= self.std
        return rows

    def standardise(self, raw) -> np.ndarray:
        """float32 (n, n_features): ``(x - mean) / std`` of raw rows (n, n_features), the file's columns."""
        X = np.asarray(raw) if isinstance(raw, np.ndarray) else None
        if X is None or X.ndim != 2 or X.shape[1] != self.n_features:
            raise DataError(f"expected raw rows, an array (n, {self.n_features}) of {self.name}'s columns in "
                            f"file order, found {type(raw).__name__} {getattr(X, 'shape', '')}")
        rows = np.array(X, dtype=np.float32)
        rows -= self.mean
        rows /= self.std
        return rows

    def labels(self, indices: np.ndarray) -> np.ndarray:
        return self.base_labels[check_indices(indices) % self.n_base]


# --- loading by name ---------------------------------------------------------------------------

_CACHE: OrderedDict[tuple, tuple[np.ndarray, np.ndarray]] = OrderedDict()
_CACHE_MAX = 4


def clear_cache() -> None:
    """Forget the arrays kept by :func:`load_source`."""
    _CACHE.clear()


def cached_load(key_paths: list[Path], extra: tuple, load) -> tuple[np.ndarray, np.ndarray]:
    """load() once per (resolved path, mtime, size) of each file; keeps the last _CACHE_MAX."""
    key = tuple((str(p.resolve()), p.stat().st_mtime_ns, p.stat().st_size) for p in key_paths) + extra
    if key in _CACHE:
        _CACHE.move_to_end(key)
        return _CACHE[key]
    value = load()
    for arr in value:
        arr.flags.writeable = False  # shared between runs: nobody may modify it
    _CACHE[key] = value
    while len(_CACHE) > _CACHE_MAX:
        _CACHE.popitem(last=False)
    return value


MNIST_HINT = ("Get the four IDX files (train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, ...) "
              "from http://yann.lecun.com/exdb/mnist/ or a torchvision mirror such as "
              "https://ossci-datasets.s3.amazonaws.com/mnist/ and put them in <data root>/mnist/.")
FASHION_HINT = ("Get the IDX files from https://github.com/zalandoresearch/fashion-mnist "
                "(data/fashion/) and put them in <data root>/fashion_mnist/.")
HIGGS_HINT = ("Download HIGGS.csv.gz from the UCI repository, https://archive.ics.uci.edu/dataset/280/higgs "
              "(dataset id 280), and put it in the data root.")
SUSY_HINT = ("Download SUSY.csv.gz from the UCI repository, https://archive.ics.uci.edu/dataset/279/susy "
             "(dataset id 279), and put it in the data root.")


def _idx_candidates(dirs: list[str], stem: str) -> list[str]:
    return [f"{d}{stem}{ext}" for d in dirs for ext in (".gz", "")]


def load_mnist_like(root: Path, dataset: str) -> tuple[np.ndarray, np.ndarray]:
    """Training images uint8 (60000, 28, 28) and labels of ``mnist`` or ``fashion-mnist`` (cached).

    The label file is looked up in the folder where the image file was found.
    """
    if dataset == "mnist":
        dirs, hint = ["mnist/", "", "MNIST/raw/"], MNIST_HINT
    else:
        dirs, hint = ["fashion_mnist/", "fashion-mnist/", "FashionMNIST/raw/"], FASHION_HINT
    img_path = find_file(root, _idx_candidates(dirs, "train-images-idx3-ubyte"),
                         dataset=dataset, hint=hint)
    lab_path = find_file(img_path.parent, _idx_candidates([""], "train-labels-idx1-ubyte"),
                         dataset=dataset, hint=hint)

    def load() -> tuple[np.ndarray, np.ndarray]:
        images = read_idx_images(img_path)
        labels = read_idx_labels(lab_path)
        if images.shape[1:] != (28, 28):
            raise DataError(f"{img_path}: expected 28x28 images, found {images.shape[1]}x"
                            f"{images.shape[2]}")
        if labels.shape[0] != images.shape[0]:
            raise DataError(f"{lab_path}: expected {images.shape[0]} labels to match {img_path}, "
                            f"found {labels.shape[0]}")
        return images, labels

    return cached_load([img_path, lab_path], (), load)


def load_source(
    name: str, root: str | os.PathLike[str], *, seed: int, stats_rows: int = 10000,
    max_rows: int | None = None, table: TableSpec | None = None,
) -> Source:
    """The source called ``name`` (one of SOURCE_NAMES) from files under ``root``.

    * ``imnist``: MNIST training set through :class:`InfiniteMNIST` (field bank from ``seed``).
    * ``mnist``, ``fashion-mnist``: the 60,000 training images as they are.
    * ``higgs``: first of ``HIGGS.csv.gz``, ``HIGGS.csv``, ``higgs/HIGGS.csv.gz``,
      ``higgs_subset/higgs_first10k_h2o_3sigdigits.csv.gz``. The last is only the first 10,000
      rows of HIGGS with every value rounded to 3 significant digits: fine for smoke tests, not
      for reproducing results.
    * ``susy``: first of ``SUSY.csv.gz``, ``SUSY.csv``, ``susy/SUSY.csv.gz``.

    * ``table``: the user's own file(s) as ``table`` says (:mod:`fedstream.data.table_source`).

    ``max_rows`` limits the rows read from the tabular CSVs (the full HIGGS has 11M rows).
    """
    root = Path(root)
    if name == "table":
        if table is None:
            raise ValueError('load_source("table", ...) needs table=TableSpec(...)')
        return TableSource(table)
    if name in ("imnist", "mnist"):
        images, labels = load_mnist_like(root, "mnist")
        return ImageSource(images, labels, name=name, deform=(name == "imnist"), seed=seed)
    if name == "fashion-mnist":
        images, labels = load_mnist_like(root, "fashion-mnist")
        return ImageSource(images, labels, name=name, deform=False, seed=seed)
    if name == "higgs":
        cands = ["HIGGS.csv.gz", "HIGGS.csv", "higgs/HIGGS.csv.gz",
                 "higgs_subset/higgs_first10k_h2o_3sigdigits.csv.gz"]
        path = find_file(root, cands, dataset="higgs", hint=HIGGS_HINT)
        X, y = cached_load([path], (max_rows,),
                       lambda: read_uci_csv(path, n_features=28, name="HIGGS", max_rows=max_rows))
        return TabularSource(X, y, name=name, stats_rows=stats_rows, n_classes=2)
    if name == "susy":
        path = find_file(root, ["SUSY.csv.gz", "SUSY.csv", "susy/SUSY.csv.gz"],
                         dataset="susy", hint=SUSY_HINT)
        X, y = cached_load([path], (max_rows,),
                       lambda: read_uci_csv(path, n_features=18, name="SUSY", max_rows=max_rows))
        return TabularSource(X, y, name=name, stats_rows=stats_rows, n_classes=2)
    raise ValueError(f"source name: expected one of {', '.join(SOURCE_NAMES)}, found {name!r}")
