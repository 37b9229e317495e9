"""Framing of compressed messages: the plain 11-byte header, one codec byte, the codec's payload.

Layout (little-endian)::

    kind:u8 round:u32 client:u16 rows:u16 cols:u16 | codec:u8 | payload

The header is :data:`fedstream.transport.codec.HEADER` (so rows and columns travel exactly as for
an uncompressed message and the payload codecs need not repeat them); ``kind`` is
:data:`COMPRESSED_KINDS` (4 = compressed embedding, 5 = compressed gradient), never a plain kind,
so a compressed message can not be mistaken for a float32 one. ``codec`` names the payload format
(:data:`SPARSE`, :data:`SIGN`, :data:`QUANT`, :data:`SIGN_PLAIN`): it lets the receiver check that
both ends agree on the link's configuration before it parses a single payload byte. Uncompressed
directions and queries keep the plain format of :mod:`fedstream.transport.codec`, byte for byte.
"""

from __future__ import annotations

from typing import NamedTuple

from fedstream.errors import ProtocolError
from fedstream.transport.codec import HEADER, MAX_ROUND
from fedstream.transport.messages import Embedding, Gradient

COMPRESSED_KINDS: dict[type, int] = {Embedding: 4, Gradient: 5}
COMPRESSED_TYPES = {v: k for k, v in COMPRESSED_KINDS.items()}
SPARSE, SIGN, QUANT, SIGN_PLAIN = 1, 2, 3, 4  # top-k family, scaled signSGD, 3-sigma + Huffman, +-1 signSGD
CODEC_NAMES = {SPARSE: "sparse top-k", SIGN: "scaled signSGD", QUANT: "3-sigma quantised Huffman",
               SIGN_PLAIN: "signSGD (+-1)"}
FRAME_SIZE = HEADER.size + 1


class Frame(NamedTuple):
    """A parsed compressed message; ``payload`` is a view into the received bytes."""

    type: type
    round: int
    client: int
    shape: tuple[int, int]
    codec: int
    payload: memoryview


def is_compressed(data: bytes) -> bool:
    """True when ``data`` starts with a compressed kind (the first byte is the kind)."""
    return len(data) > 0 and data[0] in COMPRESSED_TYPES


def frame(msg: Embedding | Gradient, codec: int, payload: bytes) -> bytes:
    """Header of ``msg`` (its type, round, client and values' shape), the codec byte, then ``payload``."""
    if not 0 <= msg.round <= MAX_ROUND:
        raise ProtocolError(f"round {msg.round} does not fit the u32 round field")
    if msg.values.ndim != 2:
        raise ProtocolError(f"{type(msg).__name__}.values must be 2-D, got shape {msg.values.shape}")
    rows, cols = msg.values.shape
    return (
        HEADER.pack(COMPRESSED_KINDS[type(msg)], msg.round, msg.client, rows, cols) + bytes([codec]) + payload
    )


def unframe(data: bytes) -> Frame:
    """Split a compressed message into its header fields, codec byte and payload (not yet decoded)."""
    if len(data) < FRAME_SIZE:
        raise ProtocolError(
            f"compressed message of {len(data)} bytes is shorter than its {FRAME_SIZE}-byte header"
        )
    kind, rnd, client, rows, cols = HEADER.unpack_from(data)
    cls = COMPRESSED_TYPES.get(kind)
    if cls is None:
        raise ProtocolError(
            f"unknown compressed message kind {kind}; expected one of {sorted(COMPRESSED_TYPES)}"
        )
    codec = data[HEADER.size]
    if codec not in CODEC_NAMES:
        raise ProtocolError(
            f"{cls.__name__} for round {rnd}: unknown codec id {codec}; expected one of {sorted(CODEC_NAMES)}"
        )
    return Frame(cls, rnd, client, (rows, cols), codec, memoryview(data)[FRAME_SIZE:])
