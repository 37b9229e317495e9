"""The bit-level loops of :mod:`fedstream.compression.huffman` (numba kernels).

Both keep a 64-bit bit buffer and run one pass over the symbols: :func:`encode_kernel` appends each
symbol's canonical code MSB-first; :func:`decode_kernel` reads the next ``k`` bits into a lookup
table and resolves the few longer codes by the canonical comparison against left-justified limits.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def encode_kernel(symbols, codes, lengths, out):  # pragma: no cover (jit)
    """Append each symbol's code MSB-first to ``out``; return the bit count, or -(i+1) for a bad symbol i."""
    acc = np.int64(0)
    nacc = 0
    pos = 0
    alphabet = lengths.size
    for i in range(symbols.size):
        s = symbols[i]
        if s < 0 or s >= alphabet:
            return -(i + 1)
        n = lengths[s]
        if n == 0:
            return -(i + 1)
        acc = (acc << n) | codes[s]  # acc holds < 8 pending bits, n <= 32: fits 40 bits
        nacc += n
        while nacc >= 8:
            nacc -= 8
            out[pos] = (acc >> nacc) & 0xFF
            pos += 1
        acc &= (np.int64(1) << nacc) - 1
    if nacc > 0:
        out[pos] = (acc << (8 - nacc)) & 0xFF
    return pos * 8 + nacc


@njit(cache=True)
def decode_kernel(
    buf, avail_bits, out, lut, k, max_len, limit, offset, sorted_syms
):  # pragma: no cover (jit)
    """Decode ``out.size`` symbols; return the bits consumed, or -1 once they exceed ``avail_bits``."""
    acc = np.int64(0)
    nacc = 0
    pos = 0
    consumed = 0
    wmask = (np.int64(1) << max_len) - 1
    for i in range(out.size):
        while nacc <= 48:  # keep >= 49 >= max_len bits buffered, never more than 56
            nacc += 8
            acc = ((acc << 8) | buf[pos]) & ((np.int64(1) << nacc) - 1)
            pos += 1
        w = (acc >> (nacc - max_len)) & wmask  # the next max_len bits
        e = lut[w >> (max_len - k)]
        if e != 0:
            n = e & 63
            s = e >> 6
        else:  # a code longer than k bits: canonical search by left-justified limits
            n = k + 1
            while w >= limit[n]:
                n += 1
            s = sorted_syms[offset[n] + ((w - limit[n - 1]) >> (max_len - n))]
        out[i] = s
        nacc -= n
        consumed += n
        if consumed > avail_bits:
            return -1
    return consumed
