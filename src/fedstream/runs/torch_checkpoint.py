"""Torch checkpoints of batch VFL and CHFL, with the integrity check of :mod:`fedstream.runs.checkpoint`.

The archive is ``{"fedstream": "checkpoint", "sha256": HEX, "body": uint8}``, ``body`` being the
``torch.save`` bytes of the payload; both levels are read with ``weights_only=True`` onto the CPU
(``map_location="cpu"``: a CUDA run's checkpoint reads on a host without one; the parties'
``load_state_dict`` moves the tensors to the run's device).
"""

from __future__ import annotations

import hashlib
import io
from pathlib import Path
from typing import Any

import torch

from fedstream.runs.checkpoint import MARK, NO_HASH, CheckpointError
from fedstream.runs.files import atomic_open


def save_torch(path: Path, payload: dict[str, Any]) -> Path:
    """``torch.save`` ``payload`` to ``path`` atomically, wrapped with the sha256 of its bytes."""
    path = Path(path)
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    body = buffer.getvalue()
    wrapped = {"fedstream": MARK, "sha256": hashlib.sha256(body).hexdigest(),
               "body": torch.frombuffer(bytearray(body), dtype=torch.uint8)}
    buffer = io.BytesIO()
    torch.save(wrapped, buffer)  # serialised in memory: a failed write is a plain OSError
    with atomic_open(path, "wb") as fh:
        fh.write(buffer.getbuffer())
    return path


def load_torch(path: Path) -> Any:
    """The payload :func:`save_torch` wrote at ``path``, its hash checked. FileNotFoundError if
    there is none; CheckpointError (``reason``: what is wrong) if it cannot be read, is damaged or
    has no hash."""
    path = Path(path)
    try:
        wrapped = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise
    except Exception as exc:  # noqa: BLE001 - the restricted unpickler raises anything (IndexError,
        # KeyError, UnpicklingError, RuntimeError...) on foreign bytes, and runs no code doing so
        raise CheckpointError(path, f"cannot read the checkpoint ({type(exc).__name__}: {exc})") from None
    if not isinstance(wrapped, dict) or wrapped.get("fedstream") != MARK:
        if isinstance(wrapped, dict) and "format" in wrapped:
            raise CheckpointError(path, f"checkpoint refused: {NO_HASH}")
        raise CheckpointError(path, "not a fedstream checkpoint")
    body = wrapped.get("body")
    if not isinstance(body, torch.Tensor) or body.dtype != torch.uint8:
        raise CheckpointError(path, "not a fedstream checkpoint (no body)")
    data = body.numpy().tobytes()
    if hashlib.sha256(data).hexdigest() != wrapped.get("sha256"):
        raise CheckpointError(path, "checkpoint is damaged: its content does not match its sha256")
    try:
        return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - as above
        raise CheckpointError(path, f"cannot read the checkpoint ({type(exc).__name__}: {exc})") from None
