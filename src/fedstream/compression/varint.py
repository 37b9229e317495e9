"""LEB128 varints, vectorised: how sparse indices and counts travel.

A non-negative integer v takes ``max(1, ceil(bits(v) / 7))`` bytes, 7 value bits each, low group
first; the high bit of a byte says "another byte follows". Small gaps between sorted indices thus
cost one byte, which is what makes delta-coded indices beat a bitmap when few entries are kept.
Decoding is strict: a truncated or over-long (non-minimal) varint raises :class:`ProtocolError`,
so one value has exactly one encoding and byte counts are reproducible.
"""

from __future__ import annotations

import numpy as np

from fedstream.errors import ProtocolError

MAX_VARINT_BYTES = 9  # 63 value bits: anything longer cannot be an index or a count here


_SIZE_STEPS = np.array([1 << (7 * j) for j in range(1, MAX_VARINT_BYTES)], dtype=np.uint64)  # 2^7, 2^14, ...


def varint_sizes(values: np.ndarray) -> np.ndarray:
    """Bytes each value takes: ``max(1, ceil(bit_length / 7))`` (values must be >= 0).

    One binary search per value among the 8 size steps (a single vectorised call: messages are
    often small, so per-call overhead matters more than the passes over the data)."""
    v = np.asarray(values, dtype=np.uint64)
    return 1 + np.searchsorted(_SIZE_STEPS, v, side="right").astype(np.int64)


def encode_varints(values: np.ndarray) -> bytes:
    """Concatenated LEB128 encodings of ``values`` (1-D, non-negative integers)."""
    v = np.asarray(values)
    if v.size == 0:
        return b""
    if v.dtype.kind not in "iu" or (v.dtype.kind == "i" and v.min() < 0):
        raise ProtocolError(f"varints encode non-negative integers, got dtype {v.dtype} with min {v.min()}")
    v = v.astype(np.uint64).ravel()
    sizes = varint_sizes(v)
    starts = np.cumsum(sizes) - sizes
    group = np.arange(int(sizes.sum()), dtype=np.int64) - np.repeat(starts, sizes)  # byte j of its value
    rep = np.repeat(v, sizes)
    out = (rep >> (np.uint64(7) * group.astype(np.uint64))) & np.uint64(0x7F)
    out |= np.where(group < np.repeat(sizes, sizes) - 1, np.uint64(0x80), np.uint64(0))
    return out.astype(np.uint8).tobytes()


def encode_varint(value: int) -> bytes:
    """One varint (e.g. a count in a header)."""
    return encode_varints(np.array([value], dtype=np.uint64))


def decode_varints(
    data: bytes | memoryview, offset: int, count: int, *, what: str = "varint"
) -> tuple[np.ndarray, int]:
    """Read ``count`` varints starting at ``data[offset]``; return them (int64) and the end offset."""
    if count == 0:
        return np.zeros(0, dtype=np.int64), offset
    buf = np.frombuffer(data, dtype=np.uint8, offset=offset) if offset < len(data) else np.zeros(0, np.uint8)
    ends = np.flatnonzero(buf < 0x80)  # the last byte of each varint has its high bit clear
    if ends.size < count:
        raise ProtocolError(
            f"{what}: expected {count} varints at byte {offset}, "
            f"the data holds only {ends.size} complete ones"
        )
    ends = ends[:count]
    starts = np.empty(count, dtype=np.int64)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    sizes = ends - starts + 1
    if sizes.max() > MAX_VARINT_BYTES:
        raise ProtocolError(
            f"{what}: a varint of {sizes.max()} bytes; at most {MAX_VARINT_BYTES} are allowed"
        )
    if np.any((sizes > 1) & (buf[ends] == 0)):
        raise ProtocolError(f"{what}: non-minimal varint (a trailing zero byte)")
    end = int(ends[-1]) + 1
    group = np.arange(end, dtype=np.int64) - np.repeat(starts, sizes)
    parts = (buf[:end] & 0x7F).astype(np.uint64) << (np.uint64(7) * group.astype(np.uint64))
    values = np.add.reduceat(parts, starts)
    if np.any(values > np.uint64(np.iinfo(np.int64).max)):
        raise ProtocolError(f"{what}: value does not fit 63 bits")
    return values.astype(np.int64), offset + end


def read_varint(data: bytes | memoryview, offset: int, *, what: str = "varint") -> tuple[int, int]:
    """Read one varint at ``offset``; return (value, end offset)."""
    # a count is at most 9 bytes: look no further than that, not at the whole payload
    window = bytes(data[offset:offset + MAX_VARINT_BYTES])
    values, end = decode_varints(window, 0, 1, what=what)
    return int(values[0]), offset + end
