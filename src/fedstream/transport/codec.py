"""Binary encoding of VFL messages: what the byte counts measure.

Layout (little-endian): a 11-byte header ``kind:u8 round:u32 client:u16 rows:u16 cols:u16``
followed by ``rows*cols`` float32 values for embeddings and gradients (none for a query).
Decoding validates everything a receiver relies on and raises :class:`ProtocolError` otherwise.
"""

from __future__ import annotations

import struct

import numpy as np
from numba import njit

from fedstream.errors import NonFiniteError, ProtocolError
from fedstream.transport.messages import Embedding, Gradient, Message, Query

HEADER = struct.Struct("<BIHHH")
KINDS: dict[type, int] = {Embedding: 1, Query: 2, Gradient: 3}
TYPES = {v: k for k, v in KINDS.items()}
MAX_ROUND = 2**32 - 1


F32 = np.dtype("<f4")


@njit(cache=True)
def all_finite(values) -> bool:  # pragma: no cover (jit)
    """True when no entry is NaN or infinite (one pass, no temporary)."""
    for v in values.flat:
        if not np.isfinite(v):
            return False
    return True


def encode(msg: Message) -> bytes:
    """Serialise ``msg``; the length of the result is what the ledger counts."""
    kind = KINDS.get(type(msg))
    if kind is None:
        raise ProtocolError(f"cannot encode {type(msg).__name__}; expected one of {list(KINDS)}")
    if not 0 <= msg.round <= MAX_ROUND:
        raise ProtocolError(f"round {msg.round} does not fit the u32 round field")
    if isinstance(msg, Query):
        try:
            return HEADER.pack(kind, msg.round, msg.client, msg.rows, 0)
        except struct.error:
            raise _out_of_range(msg, msg.rows, 0) from None
    values = (
        msg.values
        if msg.values.dtype == F32 and msg.values.flags.c_contiguous
        else np.ascontiguousarray(msg.values, dtype=F32)
    )
    if values.ndim != 2:
        raise ProtocolError(f"{type(msg).__name__}.values must be 2-D, got shape {values.shape}")
    rows, cols = values.shape
    try:  # free unless it raises: the check of the u16 fields stays off the simulator's hot path
        return HEADER.pack(kind, msg.round, msg.client, rows, cols) + values.tobytes()
    except struct.error:
        raise _out_of_range(msg, rows, cols) from None


def encoded_size(kind: type, rows: int, cols: int) -> int:
    """The length of :func:`encode`'s output for a message of type ``kind`` with ``rows`` x ``cols``
    values (a query: its header alone): for paths that account for messages without building them."""
    if kind not in KINDS:
        raise ProtocolError(f"cannot encode {kind.__name__}; expected one of {list(KINDS)}")
    return HEADER.size + (0 if kind is Query else F32.itemsize * rows * cols)


def _out_of_range(msg: Message, rows: int, cols: int) -> ProtocolError:
    return ProtocolError(f"{type(msg).__name__} for round {msg.round}: client {msg.client}, {rows} rows "
                         f"and {cols} columns must each fit a u16 header field (0..65535)")


def decode(data: bytes) -> Message:
    """Parse bytes made by :func:`encode`; reject truncated, oversized or non-finite payloads."""
    if len(data) < HEADER.size:
        raise ProtocolError(f"message of {len(data)} bytes is shorter than the {HEADER.size}-byte header")
    kind, rnd, client, rows, cols = HEADER.unpack_from(data)
    cls = TYPES.get(kind)
    if cls is None:
        raise ProtocolError(f"unknown message kind {kind}; expected one of {sorted(TYPES)}")
    expected = HEADER.size + 4 * rows * cols
    if len(data) != expected:
        raise ProtocolError(
            f"{cls.__name__} for round {rnd}: header says {rows}x{cols} float32 "
            f"({expected} bytes) but the message holds {len(data)} bytes"
        )
    if cls is Query:
        return Query(rnd, client, rows)
    values = np.ndarray((rows, cols), F32, data, HEADER.size)  # a read-only view of the payload
    if not all_finite(values):
        raise NonFiniteError(f"{cls.__name__} for round {rnd} from/to client {client} holds NaN or inf")
    return cls(rnd, client, values)
