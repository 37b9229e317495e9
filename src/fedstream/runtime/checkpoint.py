"""Atomic checkpoints: arrays and JSON metadata in one ``.npz`` file.

The file is written next to its destination and renamed over it (``os.replace``), so a crash
leaves either the previous checkpoint or the new one, never half of one.
"""

from __future__ import annotations

import json
import os
import tempfile
import zipfile
from pathlib import Path

import numpy as np

from fedstream.errors import FedstreamError

META_KEY = "__meta__"


def save_checkpoint(path: Path, state: dict[str, np.ndarray], meta: dict) -> None:
    """Write ``state`` and ``meta`` to ``path`` atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            payload = {META_KEY: np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)}
            np.savez(fh, **payload, **state)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_checkpoint(path: Path) -> tuple[dict[str, np.ndarray], dict]:
    """Read a checkpoint written by :func:`save_checkpoint`; fail clearly if it is damaged."""
    path = Path(path)
    if not path.exists():
        raise FedstreamError(f"{path}: no checkpoint to resume from (run without --resume first)")
    try:
        with np.load(path) as data:
            state = {k: data[k] for k in data.files if k != META_KEY}
            meta = json.loads(bytes(data[META_KEY]).decode())
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, json.JSONDecodeError) as exc:
        raise FedstreamError(f"{path}: checkpoint is damaged or not a fedstream checkpoint ({exc})") from None
    return state, meta
