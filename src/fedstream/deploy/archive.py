"""A node's state as one ``torch.save`` archive (CHFL and batch VFL nodes: Flower keeps a node's
state between the fresh processes it runs each message in as named arrays, so the archive
travels as one uint8 array)."""

from __future__ import annotations

import io

import numpy as np
import torch

from fedstream.errors import ProtocolError


def pack_state(key: str, state: dict) -> dict[str, np.ndarray]:
    """``state`` (tensors and plain values) as one ``torch.save`` archive: ``{key: uint8 array}``."""
    buf = io.BytesIO()
    torch.save(state, buf)
    return {key: np.frombuffer(buf.getvalue(), np.uint8).copy()}


def unpack_state(key: str, packed: dict[str, np.ndarray], owner: str) -> dict:
    """The state :func:`pack_state` wrote, loaded with ``weights_only=True``; ``owner`` names the
    node in the error when the archive is not the expected one."""
    if set(packed) != {key}:
        raise ProtocolError(f"{owner}: saved state holds {sorted(packed)}, expected [{key!r}]")
    return torch.load(io.BytesIO(np.ascontiguousarray(packed[key]).tobytes()), weights_only=True)
