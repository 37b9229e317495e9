"""CIFAR-10 from the standard python-pickle batches (``cifar-10-python.tar.gz``, extracted).

The release holds ``data_batch_1`` .. ``data_batch_5`` (training) and ``test_batch``, each a
pickled dict (written by Python 2, so its keys are ``bytes``) with

* ``data``: uint8 array (10000, 3072), each row one image, 1024 red, then 1024 green, then 1024
  blue values, each plane row-major 32x32;
* ``labels``: a list of 10000 ints in 0..9;
* ``batch_label`` and ``filenames``, which are not used.

Files are looked up in ``<root>/cifar-10-batches-py/``, ``<root>/cifar10/cifar-10-batches-py/``,
``<root>/cifar10/`` and ``<root>/``. Every check names the file and the key: a missing file,
a pickle that is not a dict, a missing key, a wrong shape or dtype, labels out of range. Only
the classes a CIFAR batch needs (numpy arrays and dtypes) may be unpickled, and the arrays are
built from checked arguments (:mod:`fedstream.data._safe_pickle`), so a foreign or damaged pickle
can neither run code nor crash the process.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedstream.data._safe_pickle import safe_load
from fedstream.data.paths import find_file
from fedstream.data.sources import cached_load
from fedstream.errors import DataError

TRAIN_FILES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_FILE = "test_batch"
FOLDERS = ("cifar-10-batches-py/", "cifar10/cifar-10-batches-py/", "cifar10/", "")
CIFAR_HINT = (
    "Download cifar-10-python.tar.gz from https://www.cs.toronto.edu/~kriz/cifar.html and extract it "
    "into the data root (it creates cifar-10-batches-py/)."
)
IMAGE_SHAPE = (3, 32, 32)
N_CLASSES = 10
CIFAR_MEAN = (0.4914, 0.4822, 0.4465)  # per-channel mean and std of the training set
CIFAR_STD = (0.2470, 0.2435, 0.2616)

def _key(batch: dict, key: str, path: Path):
    """``batch[key]`` under a bytes or str key; DataError naming the file and the key if absent."""
    for k in (key.encode(), key):
        if k in batch:
            return batch[k]
    found = ", ".join(sorted(k.decode(errors="replace") if isinstance(k, bytes) else str(k) for k in batch))
    raise DataError(f"{path}: missing key '{key}' in the CIFAR-10 batch dict (found keys: {found or 'none'})")


def read_batch(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """Images uint8 (n, 3, 32, 32) and labels int64 (n,) of one pickle batch file, validated."""
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            batch = safe_load(fh)
    except FileNotFoundError:
        raise DataError(f"{path}: file not found. {CIFAR_HINT}") from None
    except OSError as exc:
        raise DataError(f"{path}: cannot read ({exc})") from None
    except Exception as exc:  # noqa: BLE001 - foreign or damaged bytes make the (restricted: it builds
        # only containers and arrays) unpickler raise anything: a forged frame length a MemoryError,
        # a bad opcode KeyError or UnpicklingError, a short read EOFError or struct.error
        raise DataError(f"{path}: not a CIFAR-10 python pickle batch ({type(exc).__name__}: {exc})") from None
    if not isinstance(batch, dict):
        raise DataError(
            f"{path}: expected a pickled dict with keys 'data' and 'labels', found {type(batch).__name__}"
        )
    data, labels = _key(batch, "data", path), _key(batch, "labels", path)
    return _check_data(data, path), _check_labels(labels, path, len(data))


def _check_data(data, path: Path) -> np.ndarray:
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
        what = (
            f"{data.dtype} array of shape {data.shape}"
            if isinstance(data, np.ndarray)
            else type(data).__name__
        )
        raise DataError(
            f"{path}: key 'data': expected a uint8 array of shape (n, 3072) (3x32x32 images), found {what}"
        )
    if data.shape[0] == 0:
        raise DataError(f"{path}: key 'data': holds no images")
    return data.reshape(-1, *IMAGE_SHAPE)


def _check_labels(labels, path: Path, n: int) -> np.ndarray:
    try:
        y = np.asarray(labels)
    except (TypeError, ValueError):
        y = np.zeros(0, dtype=object)
    if y.dtype.kind not in "iu" or y.shape != (n,):
        raise DataError(f"{path}: key 'labels': expected {n} integer labels (one per row of 'data'), "
                        f"found {y.dtype} of shape {y.shape}")
    if y.min() < 0 or y.max() >= N_CLASSES:
        raise DataError(
            f"{path}: key 'labels': expected labels in 0..{N_CLASSES - 1}, found {y.min()}..{y.max()}"
        )
    return y.astype(np.int64)


def find_batch(root: Path, name: str) -> Path:
    """The path of batch file ``name`` under ``root`` (DataError listing every path tried)."""
    return find_file(Path(root), [f"{d}{name}" for d in FOLDERS], dataset="cifar10", hint=CIFAR_HINT)


def load_cifar10(root: str | Path, split: str = "train") -> tuple[np.ndarray, np.ndarray]:
    """Images uint8 (n, 3, 32, 32) and labels int64 of the ``train`` (50,000) or ``test`` (10,000)
    split (cached)."""
    if split not in ("train", "test"):
        raise ValueError(f"split: expected 'train' or 'test', found {split!r}")
    names = TRAIN_FILES if split == "train" else (TEST_FILE,)
    first = find_batch(Path(root), names[0])
    paths = [first] + [first.parent / n for n in names[1:]]  # all batches from one folder

    def load() -> tuple[np.ndarray, np.ndarray]:
        parts = [read_batch(p) for p in paths]
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])

    missing = [p for p in paths if not p.is_file()]
    if missing:
        raise DataError(
            f"{missing[0]}: file not found (the other CIFAR-10 batches are in {first.parent}). {CIFAR_HINT}"
        )
    return cached_load(paths, ("cifar10",), load)
