"""Binary encoding of :class:`~fedstream.transport.updates.ModelUpdate`: what FedAvg's byte counts measure.

Layout (little-endian)::

    header   kind:u8 (=16)  round:u32  client:u16  n_samples:u32  n_tensors:u16     13 bytes
    per tensor: name_len:u16  name (UTF-8)  ndim:u8  dims: ndim x u32
    payload  every tensor's float32 values, C order, in header order

Decoding validates everything a receiver relies on (kind, lengths, names, shapes, finiteness)
and raises :class:`ProtocolError` otherwise. :class:`ModelTransport` moves updates between
parties in one process: every update is really encoded, counted per client and direction, and
decoded, so the receiver sees exactly what a network peer would.
"""

from __future__ import annotations

import math
import struct

import numpy as np

from fedstream.errors import NonFiniteError, ProtocolError
from fedstream.transport.ledger import ByteLedger
from fedstream.transport.updates import ModelUpdate, check_update

HEADER = struct.Struct("<BIHIH")
NAME_LEN = struct.Struct("<H")
KIND_MODEL_UPDATE = 16
MAX_NDIM = 8
F32 = np.dtype("<f4")
U32_MAX = 2**32 - 1


def _fits(value: int, bits: int, what: str) -> None:
    if not 0 <= value < 2**bits:
        raise ProtocolError(f"{what} {value} does not fit the u{bits} field")


def encode_update(msg: ModelUpdate) -> bytes:
    """Serialise ``msg``; the length of the result is what the ledger counts."""
    check_update(msg)
    _fits(msg.round, 32, "round")
    _fits(msg.client, 16, "client")
    _fits(msg.n_samples, 32, "n_samples")
    _fits(len(msg.tensors), 16, "number of tensors")
    head = [HEADER.pack(KIND_MODEL_UPDATE, msg.round, msg.client, msg.n_samples, len(msg.tensors))]
    payload = []
    for name, t in msg.tensors.items():
        raw = name.encode("utf-8")
        _fits(len(raw), 16, f"length of tensor name {name!r}:")
        if t.ndim > MAX_NDIM or any(s > U32_MAX for s in t.shape):
            raise ProtocolError(f"tensor {name!r} of shape {t.shape}: expected at most {MAX_NDIM} "
                                f"dimensions of at most {U32_MAX}")
        head.append(NAME_LEN.pack(len(raw)) + raw + struct.pack(f"<B{t.ndim}I", t.ndim, *t.shape))
        payload.append(np.ascontiguousarray(t, dtype=F32).tobytes())
    return b"".join(head + payload)


class _Reader:
    """Bounds-checked reads from the descriptor part of a message."""

    def __init__(self, data: bytes, pos: int, what: str):
        self.data, self.pos, self.what = data, pos, what

    def take(self, n: int, field: str) -> bytes:
        if self.pos + n > len(self.data):
            raise ProtocolError(f"{self.what}: truncated while reading {field}: needed {n} bytes "
                                f"at offset {self.pos}, message holds {len(self.data)}")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out


def _descriptors(r: _Reader, n_tensors: int) -> list[tuple[str, tuple[int, ...]]]:
    out: list[tuple[str, tuple[int, ...]]] = []
    seen: set[str] = set()
    for i in range(n_tensors):
        (n,) = NAME_LEN.unpack(r.take(2, f"the name length of tensor {i}"))
        try:
            name = r.take(n, f"the name of tensor {i}").decode("utf-8")
        except UnicodeDecodeError as e:
            raise ProtocolError(f"{r.what}: tensor {i}: name is not UTF-8 ({e})") from e
        if not name or name in seen:
            raise ProtocolError(f"{r.what}: tensor {i}: expected a new non-empty name, found {name!r}")
        seen.add(name)
        (ndim,) = r.take(1, f"the ndim of {name!r}")
        if ndim > MAX_NDIM:
            raise ProtocolError(f"{r.what}: tensor {name!r}: expected ndim <= {MAX_NDIM}, found {ndim}")
        shape = struct.unpack(f"<{ndim}I", r.take(4 * ndim, f"the shape of {name!r}"))
        out.append((name, shape))
    return out


def decode_update(data: bytes) -> ModelUpdate:
    """Parse bytes made by :func:`encode_update`; reject malformed, truncated or non-finite ones."""
    if len(data) < HEADER.size:
        raise ProtocolError(f"model update of {len(data)} bytes is shorter than the "
                            f"{HEADER.size}-byte header")
    kind, rnd, client, n_samples, n_tensors = HEADER.unpack_from(data)
    if kind != KIND_MODEL_UPDATE:
        raise ProtocolError(f"message kind {kind}: expected {KIND_MODEL_UPDATE} (ModelUpdate)")
    what = f"ModelUpdate for round {rnd}, client {client}"
    r = _Reader(data, HEADER.size, what)
    desc = _descriptors(r, n_tensors)
    sizes = [math.prod(s) for _, s in desc]  # exact: an int64 product of forged u32 dims can wrap
    expected = r.pos + 4 * sum(sizes)
    if len(data) != expected:
        raise ProtocolError(f"{what}: shapes say {sum(sizes)} float32 values ({expected} bytes in "
                            f"all) but the message holds {len(data)} bytes")
    values = np.frombuffer(data, dtype=F32, offset=r.pos).astype(np.float32)
    if not np.isfinite(values).all():
        bad = desc[int(np.searchsorted(np.cumsum(sizes), np.argmin(np.isfinite(values)), "right"))][0]
        raise NonFiniteError(f"{what}: tensor {bad!r} holds NaN or inf")
    tensors: dict[str, np.ndarray] = {}
    start = 0
    for (name, shape), size in zip(desc, sizes):
        tensors[name] = values[start:start + size].reshape(shape)
        start += size
    return ModelUpdate(rnd, client, tensors, n_samples)


class ModelTransport:
    """Carries ModelUpdates between parties in one process, counting encoded bytes per client."""

    def __init__(self, n_clients: int):
        self.ledger = ByteLedger(n_clients)

    def up(self, msg: ModelUpdate) -> ModelUpdate:
        """Client ``msg.client`` -> server."""
        return self._carry(msg, "up")

    def down(self, msg: ModelUpdate) -> ModelUpdate:
        """Server -> client ``msg.client``."""
        return self._carry(msg, "down")

    def _carry(self, msg: ModelUpdate, direction: str) -> ModelUpdate:
        data = encode_update(msg)
        if not 0 <= msg.client < len(self.ledger.up):
            raise ProtocolError(f"client {msg.client}: expected 0..{len(self.ledger.up) - 1}")
        self.ledger.add(msg.client, direction, len(data))
        return decode_update(data)
