"""Read the arrays a data set's ``.npz`` file must hold, turning every failure into one DataError
that names the file: not a readable npz (corrupt, truncated, not a zip), or an array missing."""

from __future__ import annotations

import zipfile
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from fedstream.errors import DataError

# what np.load raises on a file that is not a readable npz (corrupt, truncated, not a zip)
NPZ_ERRORS = (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error)


def npz_error(path: Path, e: Exception) -> DataError:
    """The DataError of an npz file np.load could not read (``e``: one of :data:`NPZ_ERRORS`)."""
    return DataError(f"{path}: not a readable npz file: {type(e).__name__}: {e}")


def read_npz_arrays(path: Path, keys: Sequence[str], what: str | None = None) -> dict[str, np.ndarray]:
    """The arrays ``keys`` of the npz file ``path`` (``what``: the format, named in the message of a
    missing array), read without pickles."""
    try:
        with np.load(path, allow_pickle=False) as z:
            missing = [k for k in keys if k not in z.files]
            if missing:
                where = f"{path}: {what}: " if what else f"{path}: "
                raise DataError(f"{where}missing arrays {missing}: expected keys {list(keys)}, "
                                f"found {sorted(z.files)}")
            return {k: z[k] for k in keys}
    except NPZ_ERRORS as e:
        raise npz_error(path, e) from e
