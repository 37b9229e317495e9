"""The bytes of a Huffman table as a message carries it (:meth:`HuffmanCode.to_bytes`).

A canonical code is rebuilt from its code lengths alone, so the table is a kind byte, the
alphabet size - 1 (u16) and the lengths in the smallest of three layouts: 4-bit nibbles per
symbol, one byte per symbol, or (symbol u16, length u8) pairs for the present symbols of a large
sparse alphabet. Empty and one-symbol codes have their own kinds. These functions only pack and
unpack; :class:`~fedstream.compression.huffman.HuffmanCode` validates the lengths.
"""

from __future__ import annotations

import struct

import numpy as np

from fedstream.errors import ProtocolError

_TABLE_HEAD = struct.Struct("<BH")  # kind, alphabet_size - 1
_EMPTY, _SINGLE, _NIBBLES, _BYTES, _SPARSE = range(5)


def table_bytes(lengths: np.ndarray, single: int | None, max_len: int) -> bytes:
    """The table of a code with these lengths (uint8), one-symbol ``single`` and longest code."""
    head = lambda kind: _TABLE_HEAD.pack(kind, lengths.size - 1)
    if single is not None:
        return head(_SINGLE) + struct.pack("<H", single)
    if max_len == 0:
        return head(_EMPTY)
    n = lengths.size
    present = np.flatnonzero(lengths)
    options = {_BYTES: n, _SPARSE: 2 + 3 * present.size}
    if max_len <= 15:
        options[_NIBBLES] = (n + 1) // 2
    kind = min(options, key=lambda k: (options[k], k))
    if kind == _NIBBLES:
        nib = np.zeros(2 * ((n + 1) // 2), dtype=np.uint8)
        nib[:n] = lengths
        body = (nib[0::2] << 4 | nib[1::2]).astype(np.uint8).tobytes()
    elif kind == _BYTES:
        body = lengths.tobytes()
    else:
        body = (struct.pack("<H", present.size - 1) + present.astype("<u2").tobytes()
                + lengths[present].tobytes())
    return head(kind) + body


def read_table(data: bytes | memoryview, offset: int = 0) -> tuple[np.ndarray, int | None, int]:
    """Parse a table at ``offset``: (code lengths, the symbol of a one-symbol code or None, end)."""
    def need(n: int, what: str) -> None:
        if offset + n > len(data):
            raise ProtocolError(
                f"Huffman table truncated: expected {n} bytes of {what} at byte {offset}, "
                f"the message has {len(data) - offset}"
            )

    need(_TABLE_HEAD.size, "table header")
    kind, size1 = _TABLE_HEAD.unpack_from(data, offset)
    n = size1 + 1
    offset += _TABLE_HEAD.size
    if kind == _EMPTY:
        return np.zeros(n, np.uint8), None, offset
    if kind == _SINGLE:
        need(2, "the symbol")
        (sym,) = struct.unpack_from("<H", data, offset)
        return np.zeros(n, np.uint8), sym, offset + 2
    if kind == _NIBBLES:
        m = (n + 1) // 2
        need(m, "4-bit code lengths")
        packed = np.frombuffer(data, np.uint8, m, offset)
        nib = np.empty(2 * m, dtype=np.uint8)
        nib[0::2], nib[1::2] = packed >> 4, packed & 15
        if n % 2 and nib[-1]:
            raise ProtocolError("Huffman table: non-zero padding nibble after the last code length")
        return nib[:n], None, offset + m
    if kind == _BYTES:
        need(n, "code lengths")
        return np.frombuffer(data, np.uint8, n, offset).copy(), None, offset + n
    if kind == _SPARSE:
        need(2, "the symbol count")
        (c1,) = struct.unpack_from("<H", data, offset)
        c = c1 + 1
        need(2 + 3 * c, f"{c} (symbol, length) pairs")
        syms = np.frombuffer(data, "<u2", c, offset + 2).astype(np.int64)
        lens = np.frombuffer(data, np.uint8, c, offset + 2 + 2 * c)
        if np.any(np.diff(syms) <= 0) or syms[-1] >= n or np.any(lens == 0):
            raise ProtocolError(
                f"Huffman table: sparse symbols must increase, lie in 0..{n - 1} and have lengths >= 1"
            )
        lengths = np.zeros(n, dtype=np.uint8)
        lengths[syms] = lens
        return lengths, None, offset + 2 + 3 * c
    raise ProtocolError(f"unknown Huffman table kind {kind}; expected 0..4")
