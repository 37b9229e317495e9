"""What each party of a deployed batch VFL run loads: a client node its strip of every image
(:func:`load_block`, cut by the simulator's :func:`~fedstream.vfl.data.load_vertical`, kept in the
node's cache), the server the labels only (:func:`load_labels`). Every party builds its model with
the simulator's :func:`~fedstream.vfl.trainer.build_parties` from the image :func:`layout` (no pixel
needed). A table with one file per party: :mod:`fedstream.vfl.deploy.table`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from fedstream.data.images import load_image_labels, standardise
from fedstream.data.paths import resolve_data_root
from fedstream.deploy.cache import NodeCache
from fedstream.deploy.records import check_client_index
from fedstream.errors import DataError
from fedstream.vfl.data import VerticalImages, load_vertical, vertical_images
from fedstream.vfl.settings import BatchVFLSettings

FORMAT = 1
IMAGE_SHAPES = {"mnist": (1, 28, 28), "fashion-mnist": (1, 28, 28), "cifar10": (3, 32, 32)}  # (C, H, W)


def batch_settings(config: dict) -> BatchVFLSettings:
    """The resolved batch VFL settings of a ``task = "vfl"`` config (the paper's lr and embedding
    filled in). Deployed parties compute on the CPU (``device`` applies to the simulator)."""
    return replace(BatchVFLSettings.from_config(config).resolved(), device="cpu")


def layout(settings: BatchVFLSettings) -> VerticalImages:
    """The data set of ``settings`` without a row: the simulator's strips and strip shapes."""
    none = np.zeros((0, *IMAGE_SHAPES[settings.dataset]), np.uint8)
    return vertical_images(settings.dataset, none, np.zeros(0), none, np.zeros(0), clients=settings.clients,
                           split=settings.split)


# -- a client node's block ------------------------------------------------------------------------
@dataclass
class ClientBlock:
    """Client ``index``'s strip of every train and test image (uint8, n x C x h x w), nothing else."""

    index: int
    dataset: str
    train_x: np.ndarray
    test_x: np.ndarray

    def inputs(self, split: str, rows: np.ndarray) -> torch.Tensor:
        """The standardised float32 input of ``rows`` of ``split``: the simulator's
        :meth:`~fedstream.vfl.data.VerticalImages.split_inputs` of this client (per pixel)."""
        x = self.train_x if split == "train" else self.test_x
        return torch.from_numpy(np.ascontiguousarray(standardise(x[rows], self.dataset)))

    def sizes(self) -> dict:
        """What the node tells the server at setup: its strip's shape and row counts, no data."""
        return {"shape": list(self.train_x.shape[1:]), "n_train": int(self.train_x.shape[0]),
                "n_test": int(self.test_x.shape[0])}


def load_block(
    config: dict, index: int, *, data_root: str | None = None, cache_dir: Path | None = None
) -> ClientBlock:
    """Client ``index``'s block of ``config``'s data set, from the node's cache if there. The image
    files hold whole images: they are decoded whole and the other strips dropped."""
    settings = batch_settings(config)
    check_client_index(index, settings.clients, "vfl.clients")
    root = str(resolve_data_root(data_root or config["data.root"]))
    cache = NodeCache(cache_dir, "vfl", [FORMAT, root, index, settings.dataset, settings.clients,
                                         settings.split, settings.train_rows, settings.test_rows])
    saved = cache.load()
    if saved is not None:
        return ClientBlock(int(saved["index"]), settings.dataset, saved["train_x"], saved["test_x"])
    data = load_vertical(settings, root)
    if data.train_x.shape[1:] != IMAGE_SHAPES[settings.dataset]:  # then its strips are layout()'s
        raise DataError(
            f"{settings.dataset} under {root}: images of shape {data.train_x.shape[1:]}, expected "
            f"{IMAGE_SHAPES[settings.dataset]}"
        )
    block = ClientBlock(index, settings.dataset, np.ascontiguousarray(data.strip(data.train_x, index)),
                        np.ascontiguousarray(data.strip(data.test_x, index)))
    cache.save({"index": np.array(index), "train_x": block.train_x, "test_x": block.test_x})
    return block


# -- the server's labels ---------------------------------------------------------------------------
@dataclass
class ServerLabels:
    """The labels of the run's train and test rows: all the data the server party holds."""

    dataset: str
    train_y: np.ndarray
    test_y: np.ndarray
    n_classes: int = 10
    ids: str | None = None  # a table with one file per party: the digest of the server file's ids
    classes: list | None = None  # a table: the label value of each class
    alignment: object | None = None  # one file per party: the PSI (fedstream.alignment.Alignment)


def load_labels(config: dict, data_root: str | None = None) -> ServerLabels:
    """The server's labels (int64), cut to ``data.train_rows`` / ``data.test_rows`` as the simulator
    cuts them (:func:`~fedstream.data.images.load_image_labels`: MNIST-like sets without a pixel)."""
    settings = batch_settings(config)
    root = resolve_data_root(data_root or config["data.root"])
    train_y, test_y = load_image_labels(root, settings.dataset)
    return ServerLabels(settings.dataset, np.asarray(train_y[:settings.train_rows], np.int64),
                        np.asarray(test_y[:settings.test_rows], np.int64))
