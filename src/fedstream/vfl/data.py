"""The vertical split of batch VFL: client m holds one strip of every image.

The paper (section 4.1) spreads the features evenly over 4 clients. For images we cut each one
into M strips of consecutive pixel rows (``np.array_split`` sizes: the first strips get the
remainder). For MNIST's row-major 784 pixels and M = 4 this is exactly the contiguous feature
blocks of the online engine (7 rows = 196 features each); for CIFAR-10 every client keeps a
3-channel 8x32 image a convolutional network can read. ``split = "columns"`` cuts strips of
pixel columns instead (the Dynamic VF-PS report's 28x7 strips: the middle clients hold the
centre of the digits). Images stay uint8 until a batch is drawn.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from fedstream.data.images import load_image_split, standardise
from fedstream.errors import ConfigError, DataError
from fedstream.vfl.settings import BatchVFLSettings
from fedstream.vfl.table_data import load_vertical_table

STANDARDISED_MAX_BYTES = 1 << 30  # a split's standardised float32 strips are kept up to this size


def strips(height: int, clients: int) -> list[slice]:
    """Row (or column) ranges of the M strips of an image ``height`` rows (columns) high."""
    if not 1 <= clients <= height:
        raise ConfigError(f"vfl.clients = {clients}: each client needs at least one pixel row (or column); "
                          f"expected 1..{height} for {height}-pixel images")
    parts = np.array_split(np.arange(height), clients)
    return [slice(int(p[0]), int(p[-1]) + 1) for p in parts]


@dataclass
class VerticalImages:
    """Train and test images (uint8, n x C x H x W), labels and the clients' row strips."""

    dataset: str
    train_x: np.ndarray
    train_y: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray
    strips: list[slice]
    n_classes: int = 10
    axis: int = 2  # 2: strips of rows, 3: strips of columns
    # split -> (the images standardised, the clients' float32 strips of all of them), made on first use
    _standardised: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def strip_shapes(self) -> list[tuple[int, int, int]]:
        """(channels, height, width) of each client's input."""
        _, c, h, w = self.train_x.shape
        if self.axis == 3:
            return [(c, h, s.stop - s.start) for s in self.strips]
        return [(c, s.stop - s.start, w) for s in self.strips]

    def _cut(self, x: np.ndarray, s: slice) -> np.ndarray:
        return x[:, :, s] if self.axis == 2 else x[:, :, :, s]

    def strip(self, images: np.ndarray, m: int) -> np.ndarray:
        """Client m's strip of ``images`` (a view: uint8, n x C x h x w)."""
        return self._cut(images, self.strips[m])

    def encode(self, raw) -> np.ndarray:
        """New raw images (pixel values 0-255, (n, C, H, W) or flattened) as :meth:`client_inputs`
        takes them: uint8 (n, C, H, W); DataError if they are not images of this data set's shape."""
        shape = self.train_x.shape[1:]
        X = np.asarray(raw) if isinstance(raw, np.ndarray) else None
        if X is None or X.ndim < 2 or int(np.prod(X.shape[1:])) != int(np.prod(shape)):
            raise DataError(f"expected raw images of {'x'.join(map(str, shape))} pixel values a row "
                            f"({self.dataset}), found {type(raw).__name__} {getattr(X, 'shape', '')}")
        if X.size and (X.min() < 0 or X.max() > 255):
            raise DataError("expected raw pixel values in 0..255")
        return np.asarray(X, dtype=np.uint8).reshape(len(X), *shape)

    def client_inputs(self, images: np.ndarray) -> list[torch.Tensor]:
        """Standardised float32 strips of a uint8 batch, one tensor (n, C, height, width) per client."""
        x = standardise(images, self.dataset)
        return [torch.from_numpy(np.ascontiguousarray(self._cut(x, s))) for s in self.strips]

    def split_inputs(self, split: str, rows: np.ndarray) -> list[torch.Tensor]:
        """:meth:`client_inputs` of ``rows`` of the ``"train"`` or ``"test"`` images, the same values.

        The split is standardised once, on first use, into each client's contiguous float32
        strips, and a batch is a gather of its rows (as a user's own loop would hold its tensors),
        unless those strips would take more than :data:`STANDARDISED_MAX_BYTES`: then each batch
        is standardised as it is drawn.
        """
        images = self.train_x if split == "train" else self.test_x
        held = self._standardised.get(split)
        if held is None or held[0] is not images:
            if images.size * 4 > STANDARDISED_MAX_BYTES:
                return self.client_inputs(images[rows])
            held = (images, self.client_inputs(images))
            self._standardised[split] = held
        index = torch.from_numpy(np.asarray(rows, dtype=np.int64))
        return [strip.index_select(0, index) for strip in held[1]]

    def client_features(self, images: np.ndarray) -> list[np.ndarray]:
        """Each client's raw (uint8) features of ``images``, flattened to (n, d_m): what selection scores."""
        return [self._cut(images, s).reshape(len(images), -1) for s in self.strips]


def vertical_images(
    dataset: str, train_x: np.ndarray, train_y: np.ndarray, test_x: np.ndarray, test_y: np.ndarray, *,
    clients: int, split: str = "rows", n_classes: int = 10,
) -> VerticalImages:
    """Images given as arrays (uint8 (n, C, H, W) and int labels), cut into ``clients`` strips as
    :func:`load_vertical` cuts a data set's (``dataset`` names the standardisation and the models:
    ``cifar10`` is 3x32x32 for the ResNet-18 clients); DataError for arrays of another shape."""
    for name, x, y in (("train", train_x, train_y), ("test", test_x, test_y)):
        x, y = np.asarray(x), np.asarray(y)
        if x.dtype != np.uint8 or x.ndim != 4 or y.shape != (len(x),):
            raise DataError(f"{name} images: expected uint8 (n, C, H, W) with n labels, found {x.dtype} "
                            f"{x.shape} and labels {y.shape}")
        if y.size and (y.min() < 0 or y.max() >= n_classes):
            raise DataError(f"{name} labels: expected 0..{n_classes - 1}, found {y.min()}..{y.max()}")
    axis = 3 if split == "columns" else 2
    return VerticalImages(dataset, train_x, np.asarray(train_y, np.int64), test_x,
                          np.asarray(test_y, np.int64), strips(train_x.shape[axis], clients), n_classes, axis)


def load_vertical(settings: BatchVFLSettings, root: str | Path) -> VerticalImages:
    """The dataset of ``settings`` under ``root``, cut to its first train/test rows when asked."""
    if settings.dataset == "table":  # the user's own file: data.path, not root
        return load_vertical_table(settings)
    train_x, train_y = load_image_split(root, settings.dataset, "train")
    test_x, test_y = load_image_split(root, settings.dataset, "test")
    train_x, train_y = train_x[:settings.train_rows], train_y[:settings.train_rows]
    test_x, test_y = test_x[:settings.test_rows], test_y[:settings.test_rows]
    axis = 3 if settings.split == "columns" else 2
    return VerticalImages(settings.dataset, train_x, train_y, test_x, test_y,
                          strips(train_x.shape[axis], settings.clients), axis=axis)
