"""Train and test splits of the image datasets of batch VFL, as uint8 (n, channels, height, width).

* ``mnist`` / ``fashion-mnist``: training set via :func:`fedstream.data.load_mnist_like`, test set
  from the ``t10k-*`` IDX files in the same folder (10,000 images); one channel.
* ``cifar10``: the python-pickle batches (:mod:`fedstream.data.cifar10`); three channels.

:func:`standardise` turns a uint8 batch into float32 with per-channel constants: MNIST's
(0.1307, 0.3081) for both MNIST-like sets, as :mod:`fedstream.data.sources` does, and CIFAR-10's
usual channel means and stds.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedstream.data.cifar10 import CIFAR_MEAN, CIFAR_STD, load_cifar10
from fedstream.data.idx import read_idx_images, read_idx_labels
from fedstream.data.paths import find_file
from fedstream.data.sources import (
    FASHION_HINT,
    MNIST_HINT,
    MNIST_MEAN,
    MNIST_STD,
    _idx_candidates,
    cached_load,
    load_mnist_like,
)
from fedstream.errors import DataError

IMAGE_DATASETS = ("mnist", "fashion-mnist", "cifar10")
SPLITS = ("train", "test")
MNIST_DIRS = {  # where an MNIST-like set's IDX files may sit under the data root
    "mnist": ["mnist/", "", "MNIST/raw/"],
    "fashion-mnist": ["fashion_mnist/", "fashion-mnist/", "FashionMNIST/raw/"],
}


def load_image_split(root: str | Path, dataset: str, split: str) -> tuple[np.ndarray, np.ndarray]:
    """uint8 images (n, C, H, W) and int64 labels of ``dataset``'s ``split`` under ``root``."""
    if dataset not in IMAGE_DATASETS:
        raise ValueError(f"dataset: expected one of {', '.join(IMAGE_DATASETS)}, found {dataset!r}")
    if split not in SPLITS:
        raise ValueError(f"split: expected 'train' or 'test', found {split!r}")
    if dataset == "cifar10":
        return load_cifar10(root, split)
    if split == "train":
        images, labels = load_mnist_like(Path(root), dataset)
    else:
        images, labels = _mnist_like_test(Path(root), dataset)
    return images[:, None], labels.astype(np.int64)


def _mnist_like_test(root: Path, dataset: str) -> tuple[np.ndarray, np.ndarray]:
    """The 10,000 ``t10k`` images and labels, from the folder that holds the training images."""
    hint = MNIST_HINT if dataset == "mnist" else FASHION_HINT
    train = find_file(root, _idx_candidates(MNIST_DIRS[dataset], "train-images-idx3-ubyte"), dataset=dataset,
                      hint=hint)
    img_path = find_file(
        train.parent, _idx_candidates([""], "t10k-images-idx3-ubyte"), dataset=dataset, hint=hint
    )
    lab_path = find_file(
        train.parent, _idx_candidates([""], "t10k-labels-idx1-ubyte"), dataset=dataset, hint=hint
    )

    def load() -> tuple[np.ndarray, np.ndarray]:
        images, labels = read_idx_images(img_path), read_idx_labels(lab_path)
        if images.shape[1:] != (28, 28):
            raise DataError(f"{img_path}: expected 28x28 images, found {images.shape[1]}x{images.shape[2]}")
        if labels.shape[0] != images.shape[0]:
            raise DataError(
                f"{lab_path}: expected {images.shape[0]} labels to match {img_path}, found {labels.shape[0]}"
            )
        return images, labels

    return cached_load([img_path, lab_path], (), load)


def load_image_labels(root: str | Path, dataset: str) -> tuple[np.ndarray, np.ndarray]:
    """The train and test labels of ``dataset`` under ``root``, reading as few pixels as the files
    allow: an MNIST-like set's two IDX label files only (beside the training images, where the image
    loaders look them up), never an image; CIFAR-10's python batches pickle labels and pixels
    together, so there they are unpickled and the labels kept."""
    if dataset == "cifar10":
        return tuple(load_image_split(root, "cifar10", split)[1] for split in SPLITS)
    hint = MNIST_HINT if dataset == "mnist" else FASHION_HINT
    images = find_file(Path(root), _idx_candidates(MNIST_DIRS[dataset], "train-images-idx3-ubyte"),
                       dataset=dataset, hint=hint)
    beside = (find_file(images.parent, _idx_candidates([""], stem), dataset=dataset, hint=hint)
              for stem in ("train-labels-idx1-ubyte", "t10k-labels-idx1-ubyte"))
    return tuple(read_idx_labels(path) for path in beside)


def channel_stats(dataset: str) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel (mean, std) on the [0, 1] scale used by :func:`standardise`."""
    mean, std = (CIFAR_MEAN, CIFAR_STD) if dataset == "cifar10" else ((MNIST_MEAN,), (MNIST_STD,))
    return np.array(mean, np.float32), np.array(std, np.float32)


def standardise(images: np.ndarray, dataset: str) -> np.ndarray:
    """float32 ``(x / 255 - mean_c) / std_c`` of a uint8 batch (n, C, H, W)."""
    mean, std = channel_stats(dataset)
    x = images.astype(np.float32) / np.float32(255.0)
    x -= mean[None, :, None, None]
    x /= std[None, :, None, None]
    return x
