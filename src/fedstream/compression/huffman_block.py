"""A Huffman-coded block of symbols: single-symbol or symbol-pair code, whichever is smaller.

A symbol-by-symbol Huffman code spends an integer number of bits per symbol, so it exceeds the
empirical entropy by up to 1 bit per symbol; for the 3-sigma quantiser's discretised bell curve
(26 symbols) the excess is about 1.05 %. Coding consecutive *pairs* of symbols with one Huffman
code over the A^2 pair alphabet (the "extended" Huffman code of order 2) halves the per-symbol
bound of that excess, at the price of a larger table (a length per pair). Which one is smaller
depends on the message: pairs pay off for long messages (the benchmark's 1,000,000 symbols),
single symbols for short ones (a 100 x 128 mini-batch gradient, where a 676-entry table costs
more than it saves). :func:`encode_block` computes both sizes from the symbol counts (no trial
encoding) and codes with the smaller; a flag in the first byte tells the receiver which.

Layout (the bit string runs to the end of the data, so a block must end its message)::

    mode << 3 | pad : u8      mode 0 = single symbols, 1 = pairs; pad = zero bits in the last byte
    table           : HuffmanCode.to_bytes() over A (single) or A^2 (pairs) symbols
    tail            : varint, pairs only and only for an odd count: the last symbol
    bit string      : the codes, MSB first

Pair p = a * A + b stands for symbol a followed by b (A <= 256, so that A^2 <= 65536 fits the
code's alphabet; larger alphabets always use single symbols). Decoding is strict like
:meth:`HuffmanCode.decode`: an unknown mode, a table over the wrong alphabet, a bad tail symbol,
a truncated bit string or one with bits left over all raise :class:`ProtocolError`.
"""

from __future__ import annotations

import math

import numpy as np

from fedstream.compression.huffman import HuffmanCode
from fedstream.compression.varint import encode_varint, read_varint
from fedstream.errors import ProtocolError

SINGLE, PAIRS = 0, 1
MAX_PAIR_ALPHABET = 256


def _entropy_bits(counts: np.ndarray) -> float:
    """-sum c log2(c / n): no prefix code on these counts spends fewer bits (Shannon)."""
    c = counts[counts > 0].astype(np.float64)
    return float(-(c * np.log2(c / c.sum())).sum()) if c.size else 0.0


def _table_floor(alphabet: int, present: int) -> int:
    """A lower bound on :meth:`HuffmanCode.to_bytes`' size for a code with ``present`` symbols: the
    3-byte head, then the symbol of a one-symbol code, or the smallest of the length layouts."""
    return 3 + (2 if present <= 1 else min((alphabet + 1) // 2, 2 + 3 * present))


def encode_block(symbols: np.ndarray, alphabet: int, mode: int | None = None) -> bytes:
    """The smaller of the single-symbol and the pair coding of ``symbols`` (ints in 0..alphabet-1).

    ``mode`` forces :data:`SINGLE` or :data:`PAIRS` (for tests; pairs need >= 2 symbols, A <= 256)."""
    s = np.asarray(symbols)
    if s.dtype.kind not in "iu":
        raise ProtocolError(f"symbols must be integers, got dtype {s.dtype}")
    s = s.ravel().astype(np.int64, copy=False)
    if mode not in (None, SINGLE, PAIRS) or (mode == PAIRS and (alphabet > MAX_PAIR_ALPHABET or s.size < 2)):
        raise ProtocolError(f"Huffman block: cannot force mode {mode!r} for {s.size} symbols over {alphabet}")
    try:  # one pass: counts, and the range check (bincount rejects negatives; a long result is too large)
        counts1 = np.bincount(s, minlength=alphabet)
    except ValueError:
        counts1 = np.zeros(alphabet + 1, dtype=np.int64)
    if counts1.size > alphabet:
        bad = int(s[(s < 0) | (s >= alphabet)][0])
        raise ProtocolError(f"symbol {bad} is outside the alphabet 0..{alphabet - 1}")
    single = HuffmanCode.from_counts(counts1)
    single_table = single.to_bytes()
    single_size = 1 + len(single_table) + (single.coded_bits(counts1) + 7) // 8
    if mode != SINGLE and alphabet <= MAX_PAIR_ALPHABET and s.size >= 2:
        m = s.size // 2
        s32 = s.astype(np.int32)  # A^2 <= 65536: pairs fit, at half the memory traffic
        pairs = s32[0:2 * m:2] * alphabet + s32[1:2 * m:2]
        counts = np.bincount(pairs, minlength=alphabet * alphabet)
        tail = encode_varint(int(s[-1])) if s.size % 2 else b""
        floor = 1 + len(tail) + _table_floor(alphabet * alphabet, int(np.count_nonzero(counts)))
        # else pairs cannot win
        if mode == PAIRS or floor + math.ceil(_entropy_bits(counts) / 8) < single_size:
            code = HuffmanCode.from_counts(counts)
            table = code.to_bytes()
            if mode == PAIRS or 1 + len(table) + len(tail) + (code.coded_bits(counts) + 7) // 8 < single_size:
                bits, n_bits = code.encode(pairs)
                return bytes([PAIRS << 3 | (-n_bits) % 8]) + table + tail + bits
    bits, n_bits = single.encode(s)
    return bytes([SINGLE << 3 | (-n_bits) % 8]) + single_table + bits


def decode_block(data: bytes | memoryview, offset: int, n_symbols: int, alphabet: int) -> np.ndarray:
    """The ``n_symbols`` symbols (int32) of the block at ``data[offset:]``; the block must end the data."""
    if offset >= len(data):
        raise ProtocolError(
            f"Huffman block truncated: no mode byte at byte {offset} (the message has {len(data)})"
        )
    head = data[offset]
    mode, pad = head >> 3, head & 7
    if mode not in (SINGLE, PAIRS):
        raise ProtocolError(
            f"Huffman block: unknown mode {mode}; expected {SINGLE} (single symbols) or {PAIRS} (pairs)"
        )
    code, offset = HuffmanCode.read_from(data, offset + 1)
    want = alphabet if mode == SINGLE else alphabet * alphabet
    if mode == PAIRS and alphabet > MAX_PAIR_ALPHABET:
        raise ProtocolError(
            f"Huffman block: pair coding for an alphabet of {alphabet} symbols (at most {MAX_PAIR_ALPHABET})"
        )
    if code.alphabet_size != want:
        what = "symbols" if mode == SINGLE else f"pairs of {alphabet} symbols"
        raise ProtocolError(
            f"Huffman block: table over {code.alphabet_size} symbols, expected {want} ({what}): wrong table"
        )
    tail = None
    if mode == PAIRS and n_symbols % 2:
        tail, offset = read_varint(data, offset, what="Huffman block tail symbol")
        if tail >= alphabet:
            raise ProtocolError(f"Huffman block: tail symbol {tail} outside the alphabet 0..{alphabet - 1}")
    bits = data[offset:]
    n_bits = 8 * len(bits) - pad
    if mode == SINGLE:
        return code.decode(bits, n_symbols, n_bits=n_bits)
    pairs = code.decode(bits, n_symbols // 2, n_bits=n_bits)
    out = np.empty(n_symbols, dtype=np.int32)
    out[0:2 * pairs.size:2], out[1:2 * pairs.size:2] = np.divmod(pairs, alphabet)
    if tail is not None:
        out[-1] = tail
    return out
