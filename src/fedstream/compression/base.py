"""What every codec shares: validated float32 inputs and shapes, and the codec protocol.

A codec turns a float array into the bytes a message carries (``encode``) and back
(``decode(data, shape)``; the shape comes from the transport header, which already carries rows
and columns). Encoding rejects arrays a receiver could not use (non-float, NaN/inf); decoding
rejects any byte string that does not describe exactly ``prod(shape)`` entries.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from fedstream.errors import NonFiniteError, ProtocolError

F32 = np.dtype("<f4")


class Codec(Protocol):
    """The common interface (stateful codecs take their state as an extra ``encode`` argument)."""

    def encode(self, values: np.ndarray) -> bytes: ...

    def decode(self, data: bytes, shape: tuple[int, ...]) -> np.ndarray: ...


def as_float32(values: np.ndarray, what: str) -> np.ndarray:
    """``values`` as a C-contiguous little-endian float32 array; ProtocolError for non-floats or NaN/inf."""
    if not isinstance(values, np.ndarray):
        raise ProtocolError(f"{what}: expected a numpy float array, got {type(values).__name__}")
    if values.dtype.kind != "f":
        raise ProtocolError(f"{what}: expected a float array, got dtype {values.dtype}")
    v = np.ascontiguousarray(values, dtype=F32)
    if v.size and not np.isfinite(v).all():  # also catches float64 values that overflow float32
        raise NonFiniteError(f"{what}: values hold NaN or inf (after conversion to float32)")
    return v


def check_shape(shape, what: str) -> tuple[int, ...]:
    """``shape`` as a tuple of non-negative ints."""
    try:
        dims = tuple(int(d) for d in shape)
        ok = all(d >= 0 and d == s for d, s in zip(dims, shape))
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ProtocolError(f"{what}: shape must be a tuple of non-negative integers, got {shape!r}")
    return dims


def as_bytes(data, what: str) -> bytes | memoryview:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ProtocolError(f"{what}: expected bytes, got {type(data).__name__}")
    return data
