"""An image data set's labels without its pixels: what a party that holds only the labels reads
(a deployed online VFL server, :func:`fedstream.ovfl.deploy.parties.server_stream`)."""

from __future__ import annotations

import gzip

import numpy as np

from fedstream.data.idx import read_idx_labels
from fedstream.data.paths import find_file, resolve_data_root
from fedstream.data.sources import FASHION_HINT, MNIST_HINT
from fedstream.errors import ConfigError


class LabelSource:
    """An image data set's labels without its pixels: the server party's view of the source.

    Index i is base item i mod n_base, as in :class:`fedstream.data.sources.ImageSource`, so a
    :class:`Stream` over it draws the same indices (they depend on the labels, the seed and the
    drift only)."""

    def __init__(self, base_labels: np.ndarray, n_features: int, *, name: str, n_classes: int = 10):
        self.name, self.n_features, self.n_classes = name, int(n_features), int(n_classes)
        self.base_labels = np.asarray(base_labels, dtype=np.int64)
        self.n_base = int(self.base_labels.shape[0])

    def features(self, indices: np.ndarray) -> np.ndarray:
        raise ConfigError(f"{self.name}: the server party holds the labels only, not the features")

    def labels(self, indices: np.ndarray) -> np.ndarray:
        return self.base_labels[np.asarray(indices, dtype=np.int64) % self.n_base]


IMAGE_DIRS = {"mnist": ["mnist/", "", "MNIST/raw/"], "imnist": ["mnist/", "", "MNIST/raw/"],
              "fashion-mnist": ["fashion_mnist/", "fashion-mnist/", "FashionMNIST/raw/"]}


def image_labels(name: str, data_root: str | None) -> LabelSource:
    """The labels of image data set ``name`` (a key of :data:`IMAGE_DIRS`) under ``data_root``, read
    from its label file; of its image file only the 16-byte header (the image size, checked)."""
    root = resolve_data_root(data_root)
    found = [f"{d}train-images-idx3-ubyte{ext}" for d in IMAGE_DIRS[name] for ext in (".gz", "")]
    hint = FASHION_HINT if name == "fashion-mnist" else MNIST_HINT
    images = find_file(root, found, dataset=name, hint=hint)
    labels = find_file(images.parent, ["train-labels-idx1-ubyte.gz", "train-labels-idx1-ubyte"], dataset=name,
                       hint="the label file sits next to the image file")
    with (gzip.open if images.suffix == ".gz" else open)(images, "rb") as f:
        head = f.read(16)
    magic, n, rows, cols = (int(v) for v in np.frombuffer(head, ">u4")) if len(head) == 16 else (0, 0, 0, 0)
    y = read_idx_labels(labels)
    if magic != 2051 or n != y.shape[0] or rows * cols == 0:
        raise ConfigError(f"{images}: expected an IDX image header for {y.shape[0]} images, found "
                          f"magic {magic}, {n} images of {rows}x{cols}")
    return LabelSource(y, rows * cols, name=name)
