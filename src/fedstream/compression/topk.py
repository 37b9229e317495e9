"""Uplink embedding codecs: top-k sparsification (C-VFL), the paper's gradient-ranked top-k, and
the server's embedding cache (paper section 3.1, eqs. 1-3).

**Top-k** (eq. 1, C-VFL [12]) keeps, in each embedding row, the k entries of largest |E| and
drops the rest; k = ceil(ratio * width) (the paper uses ratio 0.125: 16 of 128 entries). Rows are
sparsified independently because eq. 1 is stated for one embedding vector; an SLR message
(several rows) keeps k entries per row.

**Gradient-ranked top-k** (the paper's "improved top-k"). Section 3.1 argues (translated): "unlike
gradients, which are used to update model parameters, the embedding is fed directly into the
server's model, and embedding entries of different absolute value may contribute equally to the
top model. Therefore this section adopts an improved top-k algorithm that, according to the
partial derivatives returned by the server, ..." ("因此本节采用改进的top-k算法, 根据服务器传回的
偏导数 ..."), and Algorithm 1 first sorts "the embedding elements" (嵌入元素) by partial
quicksort. The sentence breaks off in our copy (its formula was lost in text extraction), so the
score is our choice; each row ranks **its own** elements by::

    score_rj = w_j * |E_rj|,   w_j = mean over the rows of the last received gradient of |dL/dE_j|

(ties by |E_rj|). w_j * |E_rj| is the first-order change of the loss when entry (r, j) is dropped
(|dL/dE_rj * E_rj|), with the sample's own derivative, unknown before the embedding is sent,
estimated by the last message's mean for dimension j. Rows thus keep different entries, and an
entry of small |E| can outrank a larger one when its dimension matters more to the top model,
which is the paper's argument. The choice and the measurements that led to it are in
``docs/vfl-compression.md``. Before the first gradient the ranking is |E| (plain top-k).

**Index encoding**, chosen per message (whichever is smaller), flagged in a 1-byte header::

    0 (bitmap): flag | packbits(mask) ceil(n/8) bytes             | nnz float32 values
    1 (delta):  flag | varint nnz | nnz varint gaps (idx - prev - 1) | nnz float32 values

Indices are flat, row-major, increasing; values follow in that order. Bit 1 of the flag (``F16 =
2``) says the values are float16 (``value_dtype = "float16"``: 2 bytes per sent entry, so twice k
costs what k float32 entries cost); values beyond float16's range are clipped to +-65504. Bit 2
(``I8 = 4``) says they are int8 with one float16 scale per row (``value_dtype = "int8"``): the
section holds the rows' scales s_r = max |v| over the row's sent entries (float16, rounded up),
then q = rint(127 v / s_r) per entry, decoded as q s_r / 127 (1 byte per entry + 2 per row, so
four times k costs about what k float32 entries cost; the error is at most s_r / 254). A bitmap
costs n/8 bytes whatever the sparsity; deltas cost about one byte per kept entry while gaps stay below 128, so
deltas win below roughly 1 kept entry in 8. Ties go to the bitmap.

**Embedding cache** (server, eqs. 2-3): H_i^{t+1}_j = E^t_ij if sent, else H^t_ij, and the server
feeds the top model E_ij if sent, else H_ij, i.e. every unsent entry takes the last value the
client sent for it. The table is kept per sample (:class:`fedstream.compression.cache.EmbeddingCache`):
the equations are
stated for one embedding vector, i.e. one sample, so an unsent entry of sample s takes the last
value sent for entry j *of sample s* (in batch VFL: one epoch old). Eqs. 2-3 test "E_ij != 0" to
find the sent entries; we use the transmitted index set instead, which is the same except that
an entry sent as exactly 0 stays 0 (the equations would replace it by a stale value). A sample
not yet in the table starts at zero (the paper does not say; zero makes its row plain top-k).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from fedstream.compression.base import F32, as_bytes, as_float32, check_shape
from fedstream.compression.varint import (
    decode_varints,
    encode_varint,
    encode_varints,
    read_varint,
    varint_sizes,
)
from fedstream.errors import ProtocolError

BITMAP, DELTA = 0, 1
F16 = 2  # flag bit: float16 values
I8 = 4  # flag bit: int8 values with a float16 scale per row
VALUE_DTYPES = {"float32": F32, "float16": np.dtype("<f2"), "int8": np.dtype("i1")}
DTYPE_FLAGS = {"float32": 0, "float16": F16, "int8": I8}
F16_MAX = float(np.finfo(np.float16).max)
_DTYPE_OF_FLAG = {flag: name for name, flag in DTYPE_FLAGS.items()}
_F16 = VALUE_DTYPES["float16"]


class SparseEmbedding(NamedTuple):
    """The entries a client sent: flat row-major ``indices`` (increasing) and their ``values``."""

    shape: tuple[int, ...]
    indices: np.ndarray  # int64
    values: np.ndarray  # float32

    def dense(self) -> np.ndarray:
        """Unsent entries as 0 (what plain top-k feeds the top model)."""
        out = np.zeros(self.shape, dtype=F32)
        out.reshape(-1)[self.indices] = self.values
        return out


def index_sizes(n: int, indices: np.ndarray) -> tuple[int, int]:
    """Bytes of the index section as (bitmap, delta) for ``indices`` (increasing) among ``n`` entries."""
    gaps = np.diff(indices, prepend=-1) - 1
    return (n + 7) // 8, len(encode_varint(indices.size)) + int(varint_sizes(gaps).sum())


def _encode_values(values: np.ndarray, value_dtype: str, rows: np.ndarray | None,
                   n_rows: int) -> tuple[bytes, np.ndarray]:
    """(the value section's bytes, the values as decoded)."""
    if value_dtype not in VALUE_DTYPES:
        raise ProtocolError(f"value dtype {value_dtype!r}: expected one of {', '.join(VALUE_DTYPES)}")
    v = np.asarray(values, dtype=F32)
    if value_dtype == "float32":
        v = np.ascontiguousarray(v)
        return v.tobytes(), v
    if value_dtype == "float16":
        w = np.clip(v, -F16_MAX, F16_MAX).astype(_F16)
        return w.tobytes(), w.astype(F32)
    rows = np.zeros(v.size, np.int64) if rows is None else np.asarray(rows, np.int64)
    peak = np.zeros(n_rows, np.float64)
    np.maximum.at(peak, rows, np.abs(v.astype(np.float64)))
    peak = np.minimum(peak, F16_MAX)
    scale = peak.astype(_F16)
    low = scale.astype(np.float64) < peak  # rounded down: take the next float16 up
    scale[low] = np.nextafter(scale[low], _F16.type(np.inf))
    s = scale.astype(np.float64)[rows]
    q = np.where(s > 0, np.rint(127.0 * v / np.where(s > 0, s, 1.0)), 0).clip(-127, 127).astype(np.int8)
    return scale.tobytes() + q.tobytes(), _dequantise(q, scale, rows)


def _dequantise(q: np.ndarray, scale: np.ndarray, rows: np.ndarray) -> np.ndarray:
    return (q.astype(np.float64) * scale.astype(np.float64)[rows] / 127.0).astype(F32)


def _rows_of(indices: np.ndarray, shape: tuple[int, ...]) -> tuple[np.ndarray, int]:
    """Each flat index's row (the last axis is the embedding) and the number of rows."""
    width = shape[-1] if shape else 1
    n_rows = math.prod(shape[:-1]) if shape else 1
    return (indices // width if width else indices), n_rows


def pack_sparse(shape: tuple[int, ...], indices: np.ndarray, values: np.ndarray,
                value_dtype: str = "float32") -> bytes:
    """Serialise a sparse array with the smaller index encoding (see the module docstring)."""
    return _pack_sparse(shape, indices, values, value_dtype)[0]


def _pack_sparse(shape: tuple[int, ...], indices: np.ndarray, values: np.ndarray,
                 value_dtype: str) -> tuple[bytes, np.ndarray]:
    """(the payload, the values as the receiver decodes them)."""
    n = int(np.prod(shape, dtype=np.int64))
    idx = np.asarray(indices, dtype=np.int64)
    vals, decoded = _encode_values(values, value_dtype, *_rows_of(idx, shape))
    kind = DTYPE_FLAGS[value_dtype]
    bitmap, delta = index_sizes(n, idx)
    if delta < bitmap:
        body = encode_varint(idx.size) + encode_varints(np.diff(idx, prepend=-1) - 1)
        return bytes([DELTA | kind]) + body + vals, decoded
    mask = np.zeros(n, dtype=bool)
    mask[idx] = True
    return bytes([BITMAP | kind]) + np.packbits(mask).tobytes() + vals, decoded


def unpack_sparse(data: bytes, shape: tuple[int, ...]) -> SparseEmbedding:
    """Parse :func:`pack_sparse` output for an array of ``shape``; every byte must be accounted for."""
    data, shape = as_bytes(data, "sparse embedding"), check_shape(shape, "sparse embedding")
    n = int(np.prod(shape, dtype=np.int64))
    if len(data) < 1:
        raise ProtocolError(
            "sparse embedding: empty message, expected at least the 1-byte index-encoding flag"
        )
    flag, kind = data[0] & ~(F16 | I8), data[0] & (F16 | I8)
    if kind == F16 | I8:
        raise ProtocolError(f"sparse embedding: flag {data[0]} names both float16 and int8 values")
    dtype = VALUE_DTYPES[_DTYPE_OF_FLAG[kind]]
    if flag == BITMAP:
        nb = (n + 7) // 8
        if len(data) < 1 + nb:
            raise ProtocolError(
                f"sparse embedding: bitmap for shape {shape} needs {nb} bytes, "
                f"the message has {len(data) - 1}"
            )
        bits = np.unpackbits(np.frombuffer(data, np.uint8, nb, 1))
        if bits[n:].any():
            raise ProtocolError("sparse embedding: non-zero padding bits after the bitmap")
        idx = np.flatnonzero(bits[:n]).astype(np.int64)
        offset = 1 + nb
    elif flag == DELTA:
        nnz, offset = read_varint(data, 1, what="sparse embedding count")
        if nnz > n:
            raise ProtocolError(f"sparse embedding: {nnz} entries sent but shape {shape} has only {n}")
        gaps, offset = decode_varints(data, offset, nnz, what="sparse embedding index gaps")
        if nnz and gaps.max() >= n:
            raise ProtocolError(
                f"sparse embedding: index gap {gaps.max()} exceeds the {n} entries of shape {shape}"
            )
        idx = np.cumsum(gaps + 1) - 1
        if nnz and idx[-1] >= n:
            raise ProtocolError(
                f"sparse embedding: index {idx[-1]} out of range for shape {shape} ({n} entries)"
            )
    else:
        raise ProtocolError(
            f"sparse embedding: unknown index encoding flag {data[0]}; expected {BITMAP} (bitmap) or "
            f"{DELTA} (delta), plus {F16} for float16 or {I8} for int8 values"
        )
    rows, n_rows = _rows_of(idx, shape)
    scales = 2 * n_rows if kind == I8 else 0
    expected = offset + scales + dtype.itemsize * idx.size
    if len(data) != expected:
        raise ProtocolError(
            f"sparse embedding: {idx.size} entries need {expected} bytes, the message has {len(data)}"
        )
    if kind == I8:
        scale = np.frombuffer(data, _F16, n_rows, offset)
        q = np.frombuffer(data, dtype, idx.size, offset + scales)
        if not (np.isfinite(scale).all() and (scale >= 0).all()) or (q == -128).any():
            raise ProtocolError(
                "sparse embedding: int8 values need finite scales >= 0 and codes in -127..127"
            )
        values = _dequantise(q, scale, rows)
    else:
        values = np.frombuffer(data, dtype, idx.size, offset).astype(F32)
    if not np.isfinite(values).all():
        raise ProtocolError("sparse embedding: values hold NaN or inf")
    return SparseEmbedding(shape, idx, values)


def _rows(values: np.ndarray) -> np.ndarray:
    """View as (rows, width): the last axis is the embedding; a 1-D array is one row."""
    if values.ndim == 0:
        raise ProtocolError("embedding must have at least one dimension, got a scalar")
    return values.reshape(math.prod(values.shape[:-1]), values.shape[-1])


class TopK:
    """C-VFL's top-k (eq. 1): keep the ceil(ratio * width) entries of largest |E| in each row."""

    def __init__(self, ratio: float, value_dtype: str = "float32"):
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float, np.floating)) or not 0 < ratio <= 1:
            raise ProtocolError(f"top-k ratio must be a number in (0, 1], got {ratio!r}")
        if value_dtype not in VALUE_DTYPES:
            raise ProtocolError(
                f"top-k value dtype {value_dtype!r}: expected one of {', '.join(VALUE_DTYPES)}"
            )
        self.ratio = float(ratio)
        self.value_dtype = value_dtype

    def k(self, width: int) -> int:
        """Entries kept per row: ceil(ratio * width), at least 1 (for a non-empty row)."""
        return min(width, max(1, math.ceil(self.ratio * width - 1e-9))) if width else 0

    def _keep(self, rows: np.ndarray, primary: np.ndarray, secondary: np.ndarray | None) -> np.ndarray:
        """Boolean mask of the k largest ``primary`` per row (ties by larger ``secondary``)."""
        mask = np.zeros(rows.shape, dtype=bool)
        width = rows.shape[1]
        k = self.k(width)
        if k == width:
            mask[:] = True
        elif k:
            if secondary is None:
                top = np.argpartition(-primary, k - 1, axis=1)[:, :k]
            else:
                top = np.lexsort((-secondary, -primary), axis=1)[:, :k]
            np.put_along_axis(mask, top, True, axis=1)
        return mask

    def select(self, values: np.ndarray) -> np.ndarray:
        """Mask (shape of ``values``) of the entries to send."""
        v = as_float32(values, "top-k")
        rows = _rows(v)
        return self._keep(rows, np.abs(rows), None).reshape(v.shape)

    def pack(self, v: np.ndarray, mask: np.ndarray) -> tuple[bytes, np.ndarray]:
        """The payload of the entries of ``v`` under ``mask``, and what the receiver decodes from it
        (unsent entries 0; sent ones as they travel: float16-rounded or int8 on a per-row scale)."""
        idx = np.flatnonzero(mask)
        payload, vals = _pack_sparse(v.shape, idx, v.reshape(-1)[idx], self.value_dtype)
        sent = np.zeros(v.shape, dtype=F32)
        sent.reshape(-1)[idx] = vals
        return payload, sent

    def _pack(self, v: np.ndarray, mask: np.ndarray) -> bytes:
        return self.pack(v, mask)[0]

    def encode(self, values: np.ndarray) -> bytes:
        v = as_float32(values, "top-k")
        return self._pack(v, self.select(v))

    def decode_sparse(self, data: bytes, shape: tuple[int, ...]) -> SparseEmbedding:
        """The sent entries (for :class:`EmbeddingCache`); any sparsity is accepted."""
        return unpack_sparse(data, shape)

    def decode(self, data: bytes, shape: tuple[int, ...]) -> np.ndarray:
        """Dense float32 array with unsent entries 0."""
        return unpack_sparse(data, shape).dense()


class GradientRankedTopK(TopK):
    """The paper's improved top-k: each row keeps its k entries of largest ``w_j * |E_rj|``.

    ``ranking`` is the per-dimension weight w (broadcastable to the embedding's shape; the links pass
    one row, the mean |dL/dE_j| of the last received gradient); ``None`` before the first gradient,
    which falls back to |E| (plain top-k). Ties go to the larger |E|.
    """

    def select(self, values: np.ndarray, ranking: np.ndarray | None = None) -> np.ndarray:
        v = as_float32(values, "gradient-ranked top-k")
        rows = _rows(v)
        if ranking is None:
            return self._keep(rows, np.abs(rows), None).reshape(v.shape)
        w = as_float32(ranking, "gradient-ranked top-k: ranking")
        try:
            w = np.broadcast_to(np.abs(w), v.shape)
        except ValueError:
            raise ProtocolError(f"gradient-ranked top-k: ranking of shape {w.shape} does not match "
                                f"the embedding's shape {v.shape}") from None
        return self._keep(rows, _rows(w) * np.abs(rows), np.abs(rows)).reshape(v.shape)

    def encode(self, values: np.ndarray, ranking: np.ndarray | None = None) -> bytes:
        v = as_float32(values, "gradient-ranked top-k")
        return self._pack(v, self.select(v, ranking))
