"""Canonical Huffman coding over small integer alphabets (paper section 3.2, ref. [25]).

The quantiser of :mod:`fedstream.compression.quantize` maps each gradient entry to one of
P+2 = 26 symbols whose frequencies are very uneven (a discretised bell curve), so an optimal
prefix code sends close to the empirical entropy ``H = -sum p_s log2 p_s`` bits per entry instead
of ``ceil(log2 26) = 5``. Any alphabet of up to 2**16 symbols is supported.

Construction (:meth:`HuffmanCode.from_counts`): Huffman's algorithm merges the two lightest
subtrees (a heap over the symbol counts) until one tree is left; a symbol's code length is its
leaf depth. Only the lengths matter: the codes are then made *canonical*: symbols sorted by
(length, symbol) receive consecutive code values, i.e. code_i = (sum_{j<i} 2^-L_j) * 2^L_i. So the
receiver rebuilds the exact code from the lengths alone, and the table that travels with a
message is one small number per symbol (:meth:`HuffmanCode.to_bytes`, packed and parsed by
:mod:`fedstream.compression.huffman_table`).

Lengths are capped at :data:`MAX_CODE_LEN` = 32 bits so that a symbol always fits the 64-bit bit
buffers of the kernels; should the optimal tree be deeper (only for astronomically skewed counts,
e.g. Fibonacci-like), the counts are halved and the tree rebuilt, which costs a negligible
fraction of a bit. Degenerate alphabets: with no symbol present the code is empty (it encodes
only the empty message); with exactly one symbol present that symbol gets the empty codeword
(0 bits), since the symbol count travels separately and the receiver repeats the symbol.

Encoding and decoding run in numba kernels (:mod:`fedstream.compression.huffman_kernels`: one
pass over the symbols, a 64-bit bit buffer); decoding is table driven: the next
``K = min(max_len, 11)`` bits index a lookup table that gives (symbol, length) for every code of
at most K bits, and the few longer codes are resolved by the canonical comparison "smallest
length l whose left-justified limit exceeds the next max_len bits".

Every inconsistency raises :class:`ProtocolError`: a table whose lengths violate the Kraft
equality (``sum 2^-L = 1``: more is not prefix-free, less leaves bit patterns that decode to
nothing), symbols outside the alphabet or absent from the code, a bit string that ends before
``n_symbols`` symbols are read, or one with bits left over / non-zero padding (the signature of
a wrong table or a wrong count).
"""

from __future__ import annotations

import heapq

import numpy as np

from fedstream.compression.huffman_kernels import decode_kernel, encode_kernel
from fedstream.compression.huffman_table import read_table, table_bytes
from fedstream.errors import ProtocolError

MAX_ALPHABET = 1 << 16
MAX_CODE_LEN = 32
LUT_BITS = 11  # 2**11 int32 entries: fits L1 cache and covers every code of a 26-symbol gradient
PAD = 16  # zero bytes appended before decoding, so the kernel may read ahead without bounds checks



def _huffman_lengths(weights: np.ndarray) -> np.ndarray:
    """Leaf depths of a Huffman tree over ``weights`` (>= 2 positive counts).

    Heap items are (weight, node id); leaves have the smallest ids and merged nodes ever larger
    ones, so among equal weights older subtrees merge first, which keeps the tree shallow.
    """
    m = weights.size
    heap = [(int(w), i) for i, w in enumerate(weights.tolist())]
    heapq.heapify(heap)
    parent = np.zeros(2 * m - 1, dtype=np.int64)
    node = m
    while len(heap) > 1:
        wa, a = heapq.heappop(heap)
        wb, b = heapq.heappop(heap)
        parent[a] = parent[b] = node
        heapq.heappush(heap, (wa + wb, node))
        node += 1
    depth = np.zeros(2 * m - 1, dtype=np.int64)
    # parents have larger ids: fill top-down (per alphabet, not per symbol)
    for i in range(2 * m - 3, -1, -1):
        depth[i] = depth[parent[i]] + 1
    return depth[:m]


def _as_counts(counts) -> np.ndarray:
    c = np.asarray(counts)
    if c.ndim != 1 or not 1 <= c.size <= MAX_ALPHABET:
        raise ProtocolError(
            f"counts must be 1-D with 1..{MAX_ALPHABET} entries (one per symbol), got shape {c.shape}"
        )
    if c.dtype.kind not in "iu" and not (
        c.dtype.kind == "f" and np.all(np.isfinite(c)) and np.all(c == np.floor(c))
    ):
        raise ProtocolError(f"counts must be integers, got dtype {c.dtype}")
    if c.size and c.min() < 0:
        raise ProtocolError(f"counts must be >= 0, got {c.min()}")
    return c.astype(np.int64)


class HuffmanCode:
    """A canonical prefix code over symbols ``0 .. alphabet_size-1``, defined by its code lengths.

    ``lengths[s] == 0`` means symbol ``s`` is absent. Build with :meth:`from_counts` (optimal
    lengths), :meth:`from_lengths` or :meth:`from_bytes` (a received table); all validate.
    """

    __slots__ = (
        "_codes",
        "_k",
        "_lengths",
        "_limit",
        "_lut",
        "_max_len",
        "_offset",
        "_sorted",
        "alphabet_size",
        "single",
    )

    def __init__(self, lengths: np.ndarray, single: int | None = None):
        """Internal: use the ``from_*`` constructors, which validate ``lengths``."""
        self.alphabet_size = int(lengths.size)
        self.single = single  # the one symbol of a one-symbol code (0-bit codeword), else None
        self._lengths = lengths.astype(np.uint8)
        self._lengths.flags.writeable = False
        self._codes = np.zeros(lengths.size, dtype=np.int64)
        present = np.flatnonzero(self._lengths)
        self._max_len = 0
        if present.size == 0:
            return
        lens = self._lengths[present].astype(np.int64)
        order = np.lexsort((present, lens))  # by length, then symbol: the canonical order
        syms, lens = present[order], lens[order]
        units = np.int64(1) << (MAX_CODE_LEN - lens)  # each code's share of the Kraft sum, in 2^-32
        start = np.cumsum(units) - units
        if start[-1] + units[-1] != np.int64(1) << MAX_CODE_LEN:
            raise ProtocolError(
                "code lengths violate the Kraft equality: "
                f"sum 2^-L = {(start[-1] + units[-1]) / 2.0**MAX_CODE_LEN:.6g}, "
                "expected exactly 1 for a Huffman code"
            )
        self._codes[syms] = start >> (MAX_CODE_LEN - lens)  # canonical: left-justified partial Kraft sums
        self._max_len = max_len = int(lens[-1])
        self._k = k = min(max_len, LUT_BITS)
        # lookup table on the next k bits: codes of length <= k come first in canonical order and
        # tile the table's prefix contiguously; entries left 0 mean "longer code, search"
        short = lens <= k
        sizes = np.int64(1) << (k - lens[short])
        self._lut = np.zeros(1 << k, dtype=np.int32)
        self._lut[: int(sizes.sum())] = np.repeat((syms[short] << 6 | lens[short]).astype(np.int32), sizes)
        # limit[l] = left-justified (in max_len bits) end of the codes of length <= l
        per_len = np.bincount(lens, minlength=max_len + 1).astype(np.int64)
        self._limit = np.cumsum(per_len << (max_len - np.arange(max_len + 1, dtype=np.int64)))
        self._offset = (np.cumsum(per_len) - per_len).astype(np.int64)  # first sorted index of each length
        self._sorted = syms.astype(np.int32)

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_counts(cls, counts) -> HuffmanCode:
        """Optimal (Huffman) code for symbol ``s`` occurring ``counts[s]`` times.

        ``len(counts)`` is the alphabet size.
        """
        c = _as_counts(counts)
        present = np.flatnonzero(c)
        lengths = np.zeros(c.size, dtype=np.uint8)
        if present.size == 0:
            return cls(lengths)
        if present.size == 1:
            return cls(lengths, single=int(present[0]))
        w = c[present]
        while True:
            depth = _huffman_lengths(w)
            if depth.max() <= MAX_CODE_LEN:
                break
            w = (w + 1) >> 1  # flatten the distribution a little; counts stay >= 1
        lengths[present] = depth
        return cls(lengths)

    @classmethod
    def from_lengths(cls, lengths, single: int | None = None) -> HuffmanCode:
        """The canonical code with these code lengths (validated: range and Kraft equality)."""
        n = np.asarray(lengths)
        if n.ndim != 1 or not 1 <= n.size <= MAX_ALPHABET:
            raise ProtocolError(
                f"code lengths must be 1-D with 1..{MAX_ALPHABET} entries, got shape {n.shape}"
            )
        if n.dtype.kind not in "iu" or n.min() < 0 or n.max() > MAX_CODE_LEN:
            raise ProtocolError(
                f"code lengths must be integers in 0..{MAX_CODE_LEN}, "
                f"got dtype {n.dtype}, range {n.min()}..{n.max()}"
            )
        if single is not None:
            if not 0 <= single < n.size or n.any():
                raise ProtocolError(
                    f"a one-symbol code needs a symbol in 0..{n.size - 1} and no other lengths, "
                    f"got symbol {single}"
                )
        elif np.count_nonzero(n) == 1:
            raise ProtocolError(
                "a code with one present symbol must give it the empty codeword (single=...), not a length"
            )
        return cls(n.astype(np.uint8), single)

    # ------------------------------------------------------------------ properties
    @property
    def lengths(self) -> np.ndarray:
        """Code length per symbol (read-only; 0 = absent, also for the one symbol of a one-symbol code)."""
        return self._lengths

    @property
    def codes(self) -> np.ndarray:
        """Canonical code value per symbol (its ``lengths[s]`` low bits, sent MSB first)."""
        return self._codes.copy()

    @property
    def max_length(self) -> int:
        return self._max_len

    def coded_bits(self, counts) -> int:
        """Bits of the bit string for a message with these symbol counts: ``sum counts * lengths``."""
        c = _as_counts(counts)
        if c.size != self.alphabet_size:
            raise ProtocolError(
                f"counts cover {c.size} symbols, the code's alphabet has {self.alphabet_size}"
            )
        return int(np.dot(c, self._lengths.astype(np.int64)))

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, HuffmanCode) and self.single == other.single
                and np.array_equal(self.lengths, other.lengths))

    def __repr__(self) -> str:
        present = 1 if self.single is not None else int(np.count_nonzero(self._lengths))
        return (
            f"HuffmanCode(alphabet_size={self.alphabet_size}, present={present}, max_length={self._max_len})"
        )

    # ------------------------------------------------------------------ coding
    def encode(self, symbols: np.ndarray) -> tuple[bytes, int]:
        """Concatenate the codes of ``symbols`` (any shape, read in C order): (bytes, number of bits).

        The last byte is padded with zero bits; ``n_bits`` lets a framing format drop the padding.
        """
        s = np.asarray(symbols)
        if s.dtype.kind not in "iu":
            raise ProtocolError(f"symbols must be integers, got dtype {s.dtype}")
        s = s.ravel()
        if s.dtype not in (np.int32, np.int64):
            s = s.astype(np.int64)  # uint64 beyond int64 wraps negative and is rejected below
        if s.size == 0:
            return b"", 0
        if self.single is not None or self._max_len == 0:
            bad = np.flatnonzero(s != self.single) if self.single is not None else np.array([0])
            if bad.size:
                raise self._bad_symbol(s, int(bad[0]))
            return b"", 0
        out = np.empty((s.size * self._max_len + 7) // 8, dtype=np.uint8)
        n_bits = encode_kernel(s, self._codes, self._lengths, out)
        if n_bits < 0:
            raise self._bad_symbol(s, -n_bits - 1)
        return out[: (n_bits + 7) // 8].tobytes(), int(n_bits)

    def _bad_symbol(self, s: np.ndarray, i: int) -> ProtocolError:
        v = int(s[i])
        if not 0 <= v < self.alphabet_size:
            return ProtocolError(
                f"symbol {v} at position {i} is outside the alphabet 0..{self.alphabet_size - 1}"
            )
        return ProtocolError(
            f"symbol {v} at position {i} has no codeword (its count was 0 when the code was built)"
        )

    def decode(self, data: bytes, n_symbols: int, n_bits: int | None = None) -> np.ndarray:
        """Read ``n_symbols`` symbols (int32) from ``data`` made by :meth:`encode`.

        The symbols must use the whole of ``data``: ``len(data) == ceil(bits/8)`` with zero padding,
        and exactly ``n_bits`` bits when given. Anything else means a truncated string, a wrong
        table or a wrong count, and raises :class:`ProtocolError`.
        """
        if isinstance(n_symbols, bool) or not isinstance(n_symbols, (int, np.integer)) or n_symbols < 0:
            raise ProtocolError(f"n_symbols must be an integer >= 0, got {n_symbols!r}")
        n_symbols = int(n_symbols)
        raw = np.frombuffer(data, dtype=np.uint8)
        avail = 8 * raw.size
        if n_bits is not None and (n_bits < 0 or (n_bits + 7) // 8 != raw.size):
            raise ProtocolError(f"bit count {n_bits} does not match a bit string of {raw.size} bytes")
        limit = avail if n_bits is None else n_bits
        if self.single is not None or self._max_len == 0 or n_symbols == 0:
            if self._max_len == 0 and self.single is None and n_symbols:
                raise ProtocolError(
                    f"expected {n_symbols} symbols but the code table is empty (it encodes nothing)"
                )
            if raw.size:
                raise ProtocolError(
                    f"expected an empty bit string for {n_symbols} symbols of 0 bits, got {raw.size} bytes"
                )
            return np.full(n_symbols, self.single if self.single is not None else 0, dtype=np.int32)
        buf = np.zeros(raw.size + PAD, dtype=np.uint8)
        buf[: raw.size] = raw
        out = np.empty(n_symbols, dtype=np.int32)
        used = decode_kernel(
            buf, limit, out, self._lut, self._k, self._max_len, self._limit, self._offset, self._sorted
        )
        if used < 0:
            raise ProtocolError(
                f"bit string truncated: {limit} bits hold fewer than the {n_symbols} symbols expected"
            )
        if n_bits is not None and used != n_bits:
            raise ProtocolError(
                f"{n_symbols} symbols took {used} bits but the message says {n_bits}: wrong table or count"
            )
        if (used + 7) // 8 != raw.size:
            raise ProtocolError(
                f"{n_symbols} symbols took {used} bits but the bit string has {raw.size} bytes: "
                "wrong table or count"
            )
        if used % 8 and raw[-1] & ((1 << (8 - used % 8)) - 1):
            raise ProtocolError("non-zero padding bits after the last symbol: wrong table or count")
        return out

    # ------------------------------------------------------------------ table serialisation
    def to_bytes(self) -> bytes:
        """The table a message carries: kind byte, alphabet size - 1 (u16), then the lengths.

        The smallest of three layouts is chosen (:func:`fedstream.compression.huffman_table.table_bytes`):
        4-bit nibbles per symbol (when every length is <= 15, e.g. 13 bytes for 26 symbols), one byte
        per symbol, or (symbol u16, length u8) pairs for the present symbols of a large sparse
        alphabet. Empty and one-symbol codes have their own kinds (3 and 5 bytes).
        """
        return table_bytes(self._lengths, self.single, self._max_len)

    @property
    def table_nbytes(self) -> int:
        return len(self.to_bytes())

    @classmethod
    def read_from(cls, data: bytes | memoryview, offset: int = 0) -> tuple[HuffmanCode, int]:
        """Parse a table embedded in a message at ``offset``; return it and the offset after it."""
        lengths, single, end = read_table(data, offset)
        return cls.from_lengths(lengths, single=single), end

    @classmethod
    def from_bytes(cls, data: bytes) -> HuffmanCode:
        """Parse a table made by :meth:`to_bytes`; the whole of ``data`` must be the table."""
        code, end = cls.read_from(data, 0)
        if end != len(data):
            raise ProtocolError(
                f"Huffman table of {end} bytes followed by {len(data) - end} unexpected bytes"
            )
        return code
