"""The vertical split of batch VFL: client m holds one horizontal strip of rows of every image.

The paper (section 4.1) spreads the features evenly over 4 clients. For images we cut each one
into M strips of consecutive pixel rows (``np.array_split`` sizes: the first strips get the
remainder). For MNIST's row-major 784 pixels and M = 4 this is exactly the contiguous feature
blocks of the online engine (7 rows = 196 features each); for CIFAR-10 every client keeps a
3-channel 8x32 image a convolutional network can read. Images stay uint8 until a batch is drawn.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from fedstream.data.images import load_image_split, standardise
from fedstream.errors import ConfigError
from fedstream.vfl.batch.settings import BatchVFLSettings


def strips(height: int, clients: int) -> list[slice]:
    """Row ranges of the M strips of an image ``height`` rows high."""
    if not 1 <= clients <= height:
        raise ConfigError(f"vfl.clients = {clients}: each client needs at least one pixel row; "
                          f"expected 1..{height} for {height}-row images")
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

    def strip_shapes(self) -> list[tuple[int, int, int]]:
        """(channels, rows, width) of each client's input."""
        _, c, _, w = self.train_x.shape
        return [(c, s.stop - s.start, w) for s in self.strips]

    def client_inputs(self, images: np.ndarray) -> list[torch.Tensor]:
        """Standardised float32 strips of a uint8 batch, one tensor (n, C, rows, W) per client."""
        x = standardise(images, self.dataset)
        return [torch.from_numpy(np.ascontiguousarray(x[:, :, s])) for s in self.strips]


def load_vertical(settings: BatchVFLSettings, root: str | Path) -> VerticalImages:
    """The dataset of ``settings`` under ``root``, cut to its first train/test rows when asked."""
    train_x, train_y = load_image_split(root, settings.dataset, "train")
    test_x, test_y = load_image_split(root, settings.dataset, "test")
    train_x, train_y = train_x[:settings.train_rows], train_y[:settings.train_rows]
    test_x, test_y = test_x[:settings.test_rows], test_y[:settings.test_rows]
    return VerticalImages(settings.dataset, train_x, train_y, test_x, test_y, strips(train_x.shape[2], settings.clients))
