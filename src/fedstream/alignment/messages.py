"""The messages of private entity alignment, as they travel: each encodes to bytes and decodes back,
with every field checked, so that a transport only moves and counts bytes.

The exchange between the server and one client (:mod:`fedstream.alignment.psi` says who computes what):

1. server -> client :class:`PsiRequest`: the server's set size and its ids, each hashed to P-256 and
   blinded with the server's secret key (``openmined-psi``'s ``Request``, 33 bytes an id);
2. client -> server :class:`PsiReply`: the client's set size, its own ids blinded with the client's
   key in a Golomb-compressed set (``ServerSetup``), and the server's points blinded once more
   with the client's key (``Response``), in the request's order;
3. server -> client :class:`Intersection`: the ids of the server's set that the client holds,
   sorted (the order both sides use from then on), zlib-compressed;
4. server -> client :class:`Placement`, once every client is aligned: where the training plays the
   client's shared ids, as ranks into step 3's sorted ids, -1 for a row the client lacks (online
   VFL: every row of the server's file, in its order; batch VFL: the rows every party holds).

Layout: ``b"FSA1"``, one byte for the kind, then the kind's fields (big-endian integers; the
library's payloads as the library serialises them). :func:`decode` raises
:class:`~fedstream.errors.ProtocolError` for anything else.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

import numpy as np

from fedstream.errors import ProtocolError

MAGIC = b"FSA1"
_REQUEST, _REPLY, _INTERSECTION, _PLACEMENT = 1, 2, 3, 4
MAX_IDS = 1 << 32  # the most ids a set may announce


def _check_count(kind: str, n: int) -> int:
    if not 0 < n < MAX_IDS:
        raise ProtocolError(f"{kind}: announces {n} ids, expected 1 to {MAX_IDS - 1}")
    return n


@dataclass(frozen=True)
class PsiRequest:
    """Step 1 (server -> client): ``n_items`` ids, blinded (``payload``: the library's Request)."""

    n_items: int
    payload: bytes

    def encode(self) -> bytes:
        return MAGIC + bytes([_REQUEST]) + struct.pack(">Q", self.n_items) + self.payload


@dataclass(frozen=True)
class PsiReply:
    """Step 2 (client -> server): the client's ``n_items``, its set (``setup``: the library's
    ServerSetup) and the server's ids blinded again (``response``: the library's Response)."""

    n_items: int
    setup: bytes
    response: bytes

    def encode(self) -> bytes:
        return (MAGIC + bytes([_REPLY]) + struct.pack(">QI", self.n_items, len(self.setup)) + self.setup
                + self.response)


@dataclass(frozen=True)
class Intersection:
    """Step 3 (server -> client): the shared ids, sorted, each once."""

    ids: tuple[str, ...]

    def encode(self) -> bytes:
        data = [s.encode("utf-8") for s in self.ids]
        lengths = np.array([len(d) for d in data], dtype=">u4").tobytes()
        raw = lengths + b"".join(data)
        return (MAGIC + bytes([_INTERSECTION]) + struct.pack(">QQ", len(data), len(raw))
                + zlib.compress(raw, 6))


@dataclass(frozen=True)
class Placement:
    """Step 4 (server -> client): the training's rows as ranks into the sorted shared ids (int64,
    -1: a row the client lacks), each rank at most once."""

    ranks: np.ndarray

    def encode(self) -> bytes:
        raw = np.ascontiguousarray(self.ranks, dtype=">i8").tobytes()
        return MAGIC + bytes([_PLACEMENT]) + struct.pack(">Q", len(self.ranks)) + zlib.compress(raw, 6)


def _placement(body: bytes) -> Placement:
    if len(body) < 8:
        raise ProtocolError(f"Placement: {len(body)} bytes, expected at least 8")
    (count,) = struct.unpack_from(">Q", body)
    if not 0 < count < MAX_IDS:
        raise ProtocolError(f"Placement: announces {count} rows, expected 1 to {MAX_IDS - 1}")
    inflate = zlib.decompressobj()
    try:
        raw = inflate.decompress(body[8:], 8 * count + 1)
    except zlib.error as exc:
        raise ProtocolError(f"Placement: the rows do not decompress ({exc})") from None
    if len(raw) != 8 * count or inflate.unconsumed_tail or not inflate.eof:
        raise ProtocolError(f"Placement: the rows decompress to other than the {count} announced")
    ranks = np.frombuffer(raw, dtype=">i8").astype(np.int64)
    placed = ranks[ranks >= 0]
    if (ranks < -1).any() or len(np.unique(placed)) != len(placed):
        raise ProtocolError("Placement: a rank below -1, or a rank placed twice")
    return Placement(ranks)


def _intersection(body: bytes) -> Intersection:
    if len(body) < 16:
        raise ProtocolError(f"Intersection: {len(body)} bytes, expected at least 16")
    count, size = struct.unpack_from(">QQ", body)
    if count >= MAX_IDS or size < 4 * count:
        raise ProtocolError(f"Intersection: announces {count} ids in {size} bytes")
    inflate = zlib.decompressobj()
    try:
        raw = inflate.decompress(body[16:], size + 1)
    except zlib.error as exc:
        raise ProtocolError(f"Intersection: the ids do not decompress ({exc})") from None
    if len(raw) != size or inflate.unconsumed_tail or not inflate.eof:
        raise ProtocolError(f"Intersection: the ids decompress to other than the {size} bytes announced")
    lengths = np.frombuffer(raw, dtype=">u4", count=count).astype(np.int64)
    ends = 4 * count + np.cumsum(lengths)
    if count and ends[-1] != size:
        raise ProtocolError(f"Intersection: {count} ids of {int(ends[-1]) - 4 * count} bytes do not fill "
                            f"the {size - 4 * count} bytes sent")
    try:
        ids = tuple(raw[a:b].decode("utf-8") for a, b in zip((ends - lengths).tolist(), ends.tolist()))
    except UnicodeDecodeError:
        raise ProtocolError("Intersection: an id is not UTF-8 text") from None
    if any(a >= b for a, b in zip(ids, ids[1:])):
        raise ProtocolError("Intersection: the ids are not sorted and distinct")
    return Intersection(ids)


def decode(data: bytes, expected: type | None = None):
    """The message encoded in ``data`` (a :class:`PsiRequest`, :class:`PsiReply`,
    :class:`Intersection` or :class:`Placement`), checked to be of type ``expected`` when given."""
    data = bytes(data)
    if len(data) < 5 or data[:4] != MAGIC:
        raise ProtocolError(f"alignment message: {len(data)} bytes that do not start with {MAGIC!r}")
    kind, body = data[4], data[5:]
    if kind == _REQUEST and len(body) >= 8:
        msg = PsiRequest(_check_count("PsiRequest", struct.unpack_from(">Q", body)[0]), body[8:])
    elif kind == _REPLY and len(body) >= 12:
        n, size = struct.unpack_from(">QI", body)
        if 12 + size > len(body):
            raise ProtocolError(f"PsiReply: a set of {size} bytes announced in {len(body)} bytes")
        msg = PsiReply(_check_count("PsiReply", n), body[12:12 + size], body[12 + size:])
    elif kind == _INTERSECTION:
        msg = _intersection(body)
    elif kind == _PLACEMENT:
        msg = _placement(body)
    else:
        raise ProtocolError(f"alignment message: kind {kind} with {len(body)} bytes is not a message")
    if expected is not None and not isinstance(msg, expected):
        raise ProtocolError(f"alignment message: expected a {expected.__name__}, received a "
                            f"{type(msg).__name__}")
    return msg
