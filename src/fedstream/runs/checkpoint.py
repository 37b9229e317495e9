"""Checkpoints with an integrity check: the content's sha256 is stored in the file and checked on load.

Two containers, both written atomically (:mod:`fedstream.runs.files`):

* ``.npz`` (online VFL): arrays plus JSON metadata (``__meta__``) and ``__sha256__``, the hash of
  the metadata and of every array (name, dtype, shape, bytes);
* torch archives (batch VFL, CHFL; :mod:`fedstream.runs.torch_checkpoint`, kept apart so that
  online VFL runs never import PyTorch): ``{"fedstream": "checkpoint", "sha256": HEX, "body": uint8}``,
  where ``body`` is the ``torch.save`` bytes of the payload (tensors, numbers, strings, lists and
  dicts only: both levels are read with ``weights_only=True``, so loading cannot run code).

A file whose content does not match its hash, that is truncated or foreign, raises
:class:`CheckpointError` naming the path. Checkpoints written before the hash existed are refused
the same way (they say so): start such a run again in a new ``--out``.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np

from fedstream.errors import ConfigError
from fedstream.runs.files import atomic_open

META_KEY = "__meta__"
HASH_KEY = "__sha256__"
MARK = "checkpoint"  # the "fedstream" entry of a torch checkpoint
NO_HASH = "it holds no integrity hash (an older fedstream wrote it); start the run again in a new --out"


class CheckpointError(ConfigError):
    """A checkpoint that cannot be read, is damaged, belongs to another run, or that another kind
    of party wrote. ``path`` is the file, ``reason`` the message without the path (``sep`` between)."""

    def __init__(self, path: str | os.PathLike[str], reason: str, *, sep: str = ": "):
        super().__init__(f"{path}{sep}{reason}")
        self.path, self.reason = Path(path), reason


def _array_digest(state: dict[str, np.ndarray], meta: bytes) -> str:
    h = hashlib.sha256(meta)
    for key in sorted(state):
        a = np.ascontiguousarray(state[key])
        h.update(f"\0{key}\0{a.dtype.str}\0{a.shape}\0".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def save_checkpoint(path: Path, state: dict[str, np.ndarray], meta: dict) -> None:
    """Write ``state`` and ``meta`` to the ``.npz`` file ``path`` atomically, with their sha256."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    meta_bytes = json.dumps(meta).encode()
    digest = _array_digest(state, meta_bytes)
    with atomic_open(path, "wb") as fh:
        np.savez(fh, **{META_KEY: np.frombuffer(meta_bytes, dtype=np.uint8),
                        HASH_KEY: np.frombuffer(digest.encode(), dtype=np.uint8)}, **state)


def load_checkpoint(path: Path) -> tuple[dict[str, np.ndarray], dict]:
    """Read a checkpoint written by :func:`save_checkpoint`; CheckpointError if it is missing,
    damaged (its content does not match its hash) or not a fedstream checkpoint."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(path, "no checkpoint to resume from (run without --resume first)")
    try:
        with np.load(path) as data:
            state = {k: data[k] for k in data.files if k not in (META_KEY, HASH_KEY)}
            meta_bytes = bytes(data[META_KEY])
            stored = bytes(data[HASH_KEY]).decode() if HASH_KEY in data.files else None
            meta = json.loads(meta_bytes.decode())
    except Exception as exc:  # noqa: BLE001 - np.load (pickles refused) of foreign or damaged bytes
        # raises anything from zipfile and numpy: BadZipFile, NotImplementedError (an unknown zip
        # version or method), zlib.error, EOFError, ValueError, KeyError, UnicodeDecodeError...
        raise CheckpointError(path, f"checkpoint is damaged or not a fedstream checkpoint "
                                    f"({type(exc).__name__}: {exc})") from None
    if stored is None:
        raise CheckpointError(path, f"checkpoint refused: {NO_HASH}")
    if _array_digest(state, meta_bytes) != stored:
        raise CheckpointError(path, "checkpoint is damaged: its content does not match its sha256")
    return state, meta
