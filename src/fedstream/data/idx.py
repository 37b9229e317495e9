"""Readers for the IDX format of MNIST and Fashion-MNIST (gzip-compressed or raw).

IDX: a big-endian header of uint32 words (magic, then one word per dimension) followed by the
uint8 payload in row-major order. Images have magic 2051 (0x00000803: ubyte, 3 dims), labels
2049 (0x00000801: ubyte, 1 dim). The payload must be exactly as long as the header says: a short
file is a truncated download, a long one is not the file we think it is.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from fedstream.data._gz import read_all
from fedstream.errors import DataError

IMAGES_MAGIC = 2051
LABELS_MAGIC = 2049


def _header(path: Path, data: bytes, magic: int, ndim: int, what: str) -> tuple[int, ...]:
    """Check the magic and return the dimensions."""
    size = 4 * (1 + ndim)
    if len(data) >= 4:  # check the magic first: a wrong file type is the likelier mistake
        found = int(np.frombuffer(data, dtype=">u4", count=1)[0])
        if found != magic:
            raise DataError(
                f"{path}: bad magic number: expected {magic} (0x{magic:08x}, IDX {what}) but "
                f"found {found} (0x{found:08x})"
            )
    if len(data) < size:
        raise DataError(
            f"{path}: truncated: an IDX {what} file needs a {size}-byte header but the "
            f"(decompressed) file holds {len(data)} bytes"
        )
    return tuple(int(w) for w in np.frombuffer(data, dtype=">u4", count=1 + ndim)[1:])


def _payload(path: Path, data: bytes, offset: int, expected: int, desc: str) -> np.ndarray:
    found = len(data) - offset
    if found < expected:
        raise DataError(
            f"{path}: truncated: header says {desc} ({expected} bytes) but the file holds "
            f"{found} bytes after the header"
        )
    if found > expected:
        raise DataError(
            f"{path}: {found - expected} trailing bytes: header says {desc} ({expected} bytes) "
            f"but the file holds {found} bytes after the header"
        )
    return np.frombuffer(data, dtype=np.uint8, offset=offset)


def read_idx_images(path: str | os.PathLike[str]) -> np.ndarray:
    """Read an IDX image file (``*-images-idx3-ubyte[.gz]``) as uint8 ``(n, rows, cols)``."""
    path = Path(path)
    data = read_all(path)
    n, rows, cols = _header(path, data, IMAGES_MAGIC, 3, "images")
    if rows == 0 or cols == 0:
        raise DataError(f"{path}: bad header: image size {rows}x{cols}, expected non-zero")
    arr = _payload(path, data, 16, n * rows * cols, f"{n} images of {rows}x{cols}")
    return arr.reshape(n, rows, cols)


def read_idx_labels(path: str | os.PathLike[str], *, n_classes: int = 10) -> np.ndarray:
    """Read an IDX label file (``*-labels-idx1-ubyte[.gz]``) as uint8 ``(n,)``, all < n_classes."""
    path = Path(path)
    data = read_all(path)
    (n,) = _header(path, data, LABELS_MAGIC, 1, "labels")
    arr = _payload(path, data, 8, n, f"{n} labels")
    if n and int(arr.max()) >= n_classes:
        bad = int(np.argmax(arr >= n_classes))
        raise DataError(
            f"{path}: label out of range: expected labels 0..{n_classes - 1} but label #{bad} "
            f"is {int(arr[bad])}"
        )
    return arr
