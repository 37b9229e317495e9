"""A node's data cache, whatever the task (:class:`NodeCache`): arrays a node derived from its data,
saved once in its cache folder under a digest of everything that decides them, so that a fresh
process (Flower's per message, a restarted gRPC node) does not rebuild them and a changed config
never reads stale ones."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from fedstream.runs.files import atomic_open


def save_arrays(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Named arrays as one ``.npz`` at ``path``, written atomically (its folder made)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_open(path, "wb") as f:
        np.savez(f, **arrays)


def load_arrays(path: Path | None) -> dict[str, np.ndarray] | None:
    """The named arrays :func:`save_arrays` wrote at ``path``, read whole (None: no such file)."""
    if path is None or not path.exists():
        return None
    with np.load(path) as saved:
        return {k: saved[k] for k in saved.files}


class NodeCache:
    """Arrays a node derived from its data, in ``folder`` (None: no cache, nothing is kept), named
    ``KIND-DIGEST[.PART].npz`` (or ``.npy``), DIGEST a digest of ``key`` (JSON-able values)."""

    def __init__(self, folder: Path | None, kind: str, key: Sequence):
        self.folder = None if folder is None else Path(folder)
        self.name = f"{kind}-{hashlib.sha256(json.dumps(list(key)).encode()).hexdigest()[:20]}"

    def _path(self, part: str, suffix: str) -> Path | None:
        if self.folder is None:
            return None
        return self.folder / f"{self.name}{'.' + part if part else ''}{suffix}"

    def load(self, part: str = "") -> dict[str, np.ndarray] | None:
        """The named arrays saved as ``part`` (read whole), or None: none saved, or no cache."""
        return load_arrays(self._path(part, ".npz"))

    def save(self, arrays: dict[str, np.ndarray], part: str = "") -> None:
        if self.folder is not None:
            save_arrays(self._path(part, ".npz"), arrays)

    def array(self, part: str) -> np.ndarray | None:
        """The one array saved as ``part``, memory-mapped (None: none saved, or no cache)."""
        path = self._path(part, ".npy")
        return np.load(path, mmap_mode="r") if path is not None and path.exists() else None

    def save_array(self, part: str, array: np.ndarray) -> None:
        path = self._path(part, ".npy")
        if path is not None:
            self.folder.mkdir(parents=True, exist_ok=True)
            with atomic_open(path, "wb") as f:
                np.save(f, array)

    def drop_before(self, prefix: str, n: int) -> None:
        """Delete the single arrays saved as ``PREFIX<i>`` for every i < n (the run has moved past them)."""
        if self.folder is None:
            return
        start = len(self.name) + 1 + len(prefix)
        for old in self.folder.glob(f"{self.name}.{prefix}*.npy"):
            if old.name[start:-4].isdigit() and int(old.name[start:-4]) < n:
                old.unlink(missing_ok=True)
