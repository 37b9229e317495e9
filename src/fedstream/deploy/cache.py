"""A node's data cache, whatever the task: what the node derived from its data, saved once and read
by later requests.

Flower runs every message in a fresh ClientApp process, and a gRPC node restarts after a crash:
rebuilding a node's part of the data (a stream's chunk, an image strip, a table's rows) there costs
more than the request itself. :class:`NodeCache` keeps such arrays in the node's cache folder
(``--cache-dir``, Flower's ``--node-config 'cache-dir="PATH"'``) under a name made of the task and a
digest of everything that decides them (data set, data root, seed, split settings, client index:
the caller's ``key``), so a changed config never reads stale data. Files are written atomically:
a process that reads one never sees it half written.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from fedstream.runs.files import atomic_open


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
        path = self._path(part, ".npz")
        if path is None or not path.exists():
            return None
        with np.load(path) as saved:
            return {k: saved[k] for k in saved.files}

    def save(self, arrays: dict[str, np.ndarray], part: str = "") -> None:
        path = self._path(part, ".npz")
        if path is not None:
            self.folder.mkdir(parents=True, exist_ok=True)
            with atomic_open(path, "wb") as f:
                np.savez(f, **arrays)

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
