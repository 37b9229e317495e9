"""Data for tests: where the real data is, and small synthetic data sets written in each format.

Writers return what they wrote, so a test can compare a reader's output with it.
"""

from __future__ import annotations

import gzip
import os
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest

from fedstream.data import Stream, TabularSource
from fedstream.data.cifar10 import TEST_FILE, TRAIN_FILES

REPO = Path(__file__).resolve().parents[2]
# the real data: $FEDSTREAM_DATA, or shared/data beside the repository (it may be absent or partial)
DATA = Path(os.environ.get("FEDSTREAM_DATA") or REPO.parent / "shared" / "data")
HAVE_MNIST = (DATA / "mnist" / "train-images-idx3-ubyte.gz").is_file()


def shared_data_root() -> Path | None:
    """The real data folder, if it holds MNIST."""
    return DATA if HAVE_MNIST else None


def require(data_root: Path, relpath: str) -> Path:
    """Skip the calling test when ``data_root/relpath`` is absent (the data root may be partial)."""
    if not (data_root / relpath).is_file():
        pytest.skip(f"{relpath} not found under {data_root}")
    return data_root


def write(path: Path, data: bytes | str) -> Path:
    """Write ``data`` to ``path``, gzip-compressed when the name ends in .gz."""
    raw = data.encode() if isinstance(data, str) else data
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(raw) if path.name.endswith(".gz") else raw)
    return path


# -- MNIST (IDX files) ------------------------------------------------------------------------------
def idx_images_bytes(images: np.ndarray) -> bytes:
    n, r, c = images.shape
    return struct.pack(">IIII", 2051, n, r, c) + images.astype(np.uint8).tobytes()


def idx_labels_bytes(labels: np.ndarray) -> bytes:
    return struct.pack(">II", 2049, len(labels)) + labels.astype(np.uint8).tobytes()


def write_idx_split(folder: Path, images: np.ndarray, labels: np.ndarray, *, stem: str = "train",
                    gz: bool = True) -> None:
    """``{stem}-images-idx3-ubyte`` and ``{stem}-labels-idx1-ubyte`` (plus .gz) under ``folder``."""
    ext = ".gz" if gz else ""
    write(folder / f"{stem}-images-idx3-ubyte{ext}", idx_images_bytes(images))
    write(folder / f"{stem}-labels-idx1-ubyte{ext}", idx_labels_bytes(labels))


def write_idx(folder: Path, n: int, seed: int = 0, gz: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """A training split of ``n`` random 28x28 images and labels 0-9 in ``folder``."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
    y = rng.integers(0, 10, n).astype(np.uint8)
    write_idx_split(folder, x, y, gz=gz)
    return x, y


def write_learnable_mnist(root: Path, n: int = 400, *, classes: int = 10, noise: float = 40,
                          seed: int = 0) -> Path:
    """A small learnable MNIST (class prototypes plus noise) under root/mnist; returns root."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n).astype(np.uint8)
    proto = rng.integers(0, 256, (classes, 28, 28))
    images = np.clip(proto[y] + rng.normal(0, noise, (n, 28, 28)), 0, 255).astype(np.uint8)
    write_idx_split(root / "mnist", images, y)
    return root


def write_learnable_mnist_splits(root: Path, n: int = 400, n_test: int = 100, *, noise: float = 40,
                                 seed: int = 0) -> Path:
    """A small learnable MNIST under root/mnist, train (``n`` images) and test (``n_test``), both drawn
    from the same 10 class prototypes plus noise; returns root."""
    rng = np.random.default_rng(seed)
    proto = rng.integers(0, 256, (10, 28, 28))
    for stem, rows in (("train", n), ("t10k", n_test)):
        y = rng.integers(0, 10, rows).astype(np.uint8)
        images = np.clip(proto[y] + rng.normal(0, noise, (rows, 28, 28)), 0, 255).astype(np.uint8)
        write_idx_split(root / "mnist", images, y, stem=stem)
    return root


# -- tables ----------------------------------------------------------------------------------------
def uci_text(X: np.ndarray, y: np.ndarray) -> str:
    """UCI HIGGS/SUSY style: label then features, 1.000000000000000000e+00,8.69...e-01,..."""
    return "".join(",".join(f"{v:.18e}" for v in (float(lab), *row)) + "\n" for lab, row in zip(y, X))


def write_susy(root: Path, n: int = 400, *, seed: int = 0, shift: float = 1.0) -> Path:
    """root/SUSY.csv.gz in the UCI format (label + 18 features), learnable: features shift with y."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, size=n)
    X = rng.normal(size=(n, 18)) + shift * y[:, None]
    write(root / "SUSY.csv.gz", uci_text(X, y))
    return root


def synthetic_table(
    n: int = 1200, d: int = 12, classes: int = 3, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Gaussian features; the class is the argmax of a random linear map of all of them (CHFL tests)."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)).astype(np.float32)
    y = (X @ rng.standard_normal((d, classes))).argmax(axis=1)
    return X, y.astype(np.int64)


def synthetic_stream(*, n=2000, d=16, classes=3, seed=0, drift="none", name="synthetic"):
    """A small learnable tabular stream (class-dependent means), for fast online VFL engine tests."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, size=n)
    centers = rng.normal(size=(classes, d)) * 1.5
    X = (centers[y] + rng.normal(size=(n, d))).astype(np.float32)
    source = TabularSource(X, y.astype(np.int64), name=name, stats_rows=n)
    return Stream(source, drift=drift, drift_every=50, seed=seed)


# -- CIFAR-10 (python pickles) ---------------------------------------------------------------------
def cifar_batch(n: int, rng, label_offset: int = 0) -> dict:
    """A dict as in cifar-10-batches-py: bytes keys, uint8 (n, 3072) data, labels as a list."""
    return {
        b"batch_label": b"training batch 1 of 5",
        b"labels": [int(v) for v in (rng.integers(0, 10, n) + label_offset)],
        b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
        b"filenames": [b"img.png"] * n,
    }


def write_cifar(root: Path, n: int = 6, seed: int = 0, **override) -> dict:
    """The six batch files under root/cifar-10-batches-py; ``override[name]`` replaces a batch's dict."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    written = {}
    for name in (*TRAIN_FILES, TEST_FILE):
        batch = override.get(name, cifar_batch(n, rng))
        with open(folder / name, "wb") as fh:
            pickle.dump(batch, fh, protocol=2)  # the release was written by Python 2's cPickle
        written[name] = batch
    return written
