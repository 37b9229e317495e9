"""Each party's own data in a deployed batch VFL run, and its model built from the shared seed.

* A client node (:func:`load_block`) keeps only its strip of every image (its pixel rows, or its
  columns with ``vfl.split = "columns"``), train and test, as uint8: it reads the data set with the
  simulator's own :func:`fedstream.vfl.data.load_vertical` (same ``train_rows`` /
  ``test_rows`` cut, same strips from ``vfl.clients``) and keeps client ``index``'s block
  (:meth:`~fedstream.vfl.data.VerticalImages.client_features` cuts the same strip). An image
  file holds whole images, so the node decodes them whole and drops the other strips; a party
  whose own files hold only its strip would plug in here. Flower runs every message in a fresh
  process, so the block is saved once in the node's cache folder and read by later messages (the
  file name is a digest of everything that decides the block).
* The server (:func:`load_labels`) keeps the labels only: for MNIST and Fashion-MNIST it reads the
  two label files and never a pixel; CIFAR-10's python batches pickle labels and pixels together,
  so there it unpickles them and keeps the labels (:func:`fedstream.data.images.load_image_labels`).
* Models: :func:`build_party` runs the simulator's :func:`fedstream.vfl.trainer.build_parties`
  from the image layout (:func:`layout`: strip shapes from the data set's image size, no data), so
  every party starts from the simulator's weights; a client keeps its own bottom model, the server
  the top model.
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
from fedstream.vfl.data import load_vertical, strips
from fedstream.vfl.parties import BatchClient, BatchServer
from fedstream.vfl.settings import BatchVFLSettings
from fedstream.vfl.trainer import build_parties

FORMAT = 1
IMAGE_SHAPES = {"mnist": (1, 28, 28), "fashion-mnist": (1, 28, 28), "cifar10": (3, 32, 32)}  # (C, H, W)
N_CLASSES = 10


def batch_settings(config: dict) -> BatchVFLSettings:
    """The resolved batch VFL settings of a ``task = "vfl"`` config (the paper's lr and embedding
    filled in). Deployed parties compute on the CPU (``device`` applies to the simulator)."""
    return replace(BatchVFLSettings.from_config(config).resolved(), device="cpu")


@dataclass(frozen=True)
class Layout:
    """How the images are cut: each client's strip and its input shape (C, h, w); no data needed."""

    strips: list[slice]
    shapes: list[tuple[int, int, int] | None]  # None: a client whose shape this party does not know
    axis: int  # 2: strips of pixel rows, 3: of columns
    n_classes: int = N_CLASSES

    def strip_shapes(self) -> list[tuple[int, int, int]]:  # what build_parties asks of its data
        return list(self.shapes)


def layout(settings: BatchVFLSettings) -> Layout:
    """The strips of ``settings`` (as :func:`~fedstream.vfl.data.load_vertical` cuts them)."""
    c, h, w = IMAGE_SHAPES[settings.dataset]
    axis = 3 if settings.split == "columns" else 2
    cut = strips(w if axis == 3 else h, settings.clients)
    shapes = [(c, h, s.stop - s.start) if axis == 3 else (c, s.stop - s.start, w) for s in cut]
    return Layout(cut, shapes, axis)


def build_party(settings: BatchVFLSettings, seed: int) -> tuple[list[BatchClient], BatchServer]:
    """Every party with the simulator's initial weights (:func:`~fedstream.vfl.trainer.build_parties`:
    client 0's bottom model, ..., the top model, from ``seed``); each party keeps its own."""
    return build_parties(settings, layout(settings), seed)


# -- a client node's block ------------------------------------------------------------------------
@dataclass
class ClientBlock:
    """Client ``index``'s strip of every train and test image (uint8, n x C x h x w), nothing else."""

    index: int
    dataset: str
    train_x: np.ndarray
    test_x: np.ndarray

    def inputs(self, split: str, rows: np.ndarray) -> torch.Tensor:
        """The standardised float32 input of ``rows`` of ``split``: the values the simulator's
        :meth:`~fedstream.vfl.data.VerticalImages.client_inputs` gives this client (the
        standardisation is per pixel, so cutting before or after it is the same)."""
        x = self.train_x if split == "train" else self.test_x
        return torch.from_numpy(np.ascontiguousarray(standardise(x[rows], self.dataset)))

    def sizes(self) -> dict:
        """What the node tells the server at setup: its strip's shape and row counts, no data."""
        return {"shape": list(self.train_x.shape[1:]), "n_train": int(self.train_x.shape[0]),
                "n_test": int(self.test_x.shape[0])}


def load_block(
    config: dict, index: int, *, data_root: str | None = None, cache_dir: Path | None = None
) -> ClientBlock:
    """Client ``index``'s block of ``config``'s data set, from the cache if there (see the module doc)."""
    settings = batch_settings(config)
    check_client_index(index, settings.clients, "vfl.clients")
    root = str(resolve_data_root(data_root or config["data.root"]))
    cache = NodeCache(cache_dir, "vfl", [FORMAT, root, index, settings.dataset, settings.clients,
                                         settings.split, settings.train_rows, settings.test_rows])
    saved = cache.load()
    if saved is not None:
        return ClientBlock(int(saved["index"]), settings.dataset, saved["train_x"], saved["test_x"])
    data = load_vertical(settings, root)
    want = layout(settings)
    if data.strips != want.strips or data.train_x.shape[1:] != IMAGE_SHAPES[settings.dataset]:
        raise DataError(
            f"{settings.dataset} under {root}: images of shape {data.train_x.shape[1:]}, expected "
            f"{IMAGE_SHAPES[settings.dataset]}"
        )
    s = data.strips[index]
    cut = (lambda x: x[:, :, s]) if data.axis == 2 else (lambda x: x[:, :, :, s])
    block = ClientBlock(index, settings.dataset, np.ascontiguousarray(cut(data.train_x)),
                        np.ascontiguousarray(cut(data.test_x)))
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
