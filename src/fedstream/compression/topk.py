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
偏导数 ..."). In our copy of the paper the sentence breaks off at that point (its formula was lost
in text extraction; so was Algorithm 1's line 5), so the ranking quantity is an interpretation:

    rank entry j by |dL/dE_j|, the magnitude of the partial derivative the server sent back for
    that entry in the client's *most recent* gradient message (the previous round: the current
    round's derivative does not exist before the embedding is uploaded); ties by |E_j|.

Entries are matched by position, the same convention as the cache of eqs. 2-3 (element j of
client i). Before the first gradient arrives the ranking falls back to |E_j| (plain top-k).

**Index encoding**, chosen per message (whichever is smaller), flagged in a 1-byte header::

    0 (bitmap): flag | packbits(mask) ceil(n/8) bytes             | nnz float32 values
    1 (delta):  flag | varint nnz | nnz varint gaps (idx - prev - 1) | nnz float32 values

Indices are flat, row-major, increasing; values follow in that order. A bitmap costs n/8 bytes
whatever the sparsity; deltas cost about one byte per kept entry while gaps stay below 128, so
deltas win below roughly 1 kept entry in 8. Ties go to the bitmap.

**Embedding cache** (server, eqs. 2-3): H_i^{t+1}_j = E^t_ij if sent, else H^t_ij, and the server
feeds the top model E_ij if sent, else H_ij, i.e. every unsent entry takes the last value the
client sent for it. The table is kept per sample (:class:`EmbeddingCache`): the equations are
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


def pack_sparse(shape: tuple[int, ...], indices: np.ndarray, values: np.ndarray) -> bytes:
    """Serialise a sparse array with the smaller index encoding (see the module docstring)."""
    n = int(np.prod(shape, dtype=np.int64))
    idx = np.asarray(indices, dtype=np.int64)
    vals = np.ascontiguousarray(values, dtype=F32)
    bitmap, delta = index_sizes(n, idx)
    if delta < bitmap:
        body = encode_varint(idx.size) + encode_varints(np.diff(idx, prepend=-1) - 1)
        return bytes([DELTA]) + body + vals.tobytes()
    mask = np.zeros(n, dtype=bool)
    mask[idx] = True
    return bytes([BITMAP]) + np.packbits(mask).tobytes() + vals.tobytes()


def unpack_sparse(data: bytes, shape: tuple[int, ...]) -> SparseEmbedding:
    """Parse :func:`pack_sparse` output for an array of ``shape``; every byte must be accounted for."""
    data, shape = as_bytes(data, "sparse embedding"), check_shape(shape, "sparse embedding")
    n = int(np.prod(shape, dtype=np.int64))
    if len(data) < 1:
        raise ProtocolError(
            "sparse embedding: empty message, expected at least the 1-byte index-encoding flag"
        )
    flag = data[0]
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
            f"sparse embedding: unknown index encoding flag {flag}; "
            f"expected {BITMAP} (bitmap) or {DELTA} (delta)"
        )
    expected = offset + 4 * idx.size
    if len(data) != expected:
        raise ProtocolError(
            f"sparse embedding: {idx.size} entries need {expected} bytes, the message has {len(data)}"
        )
    values = np.frombuffer(data, F32, idx.size, offset).copy()
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

    def __init__(self, ratio: float):
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float, np.floating)) or not 0 < ratio <= 1:
            raise ProtocolError(f"top-k ratio must be a number in (0, 1], got {ratio!r}")
        self.ratio = float(ratio)

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

    def _pack(self, v: np.ndarray, mask: np.ndarray) -> bytes:
        idx = np.flatnonzero(mask)
        return pack_sparse(v.shape, idx, v.reshape(-1)[idx])

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
    """The paper's improved top-k: keep the entries whose last received |dL/dE| is largest.

    ``grad`` is the gradient the client last received (broadcastable to the embedding's shape,
    e.g. the same shape or one row); ``None`` before the first one, which falls back to |E|.
    """

    def select(self, values: np.ndarray, grad: np.ndarray | None = None) -> np.ndarray:
        v = as_float32(values, "gradient-ranked top-k")
        rows = _rows(v)
        if grad is None:
            return self._keep(rows, np.abs(rows), None).reshape(v.shape)
        g = as_float32(grad, "gradient-ranked top-k: last gradient")
        try:
            g = np.broadcast_to(g, v.shape)
        except ValueError:
            raise ProtocolError(f"gradient-ranked top-k: last gradient of shape {g.shape} does not match "
                                f"the embedding's shape {v.shape}") from None
        return self._keep(rows, np.abs(_rows(g)), np.abs(rows)).reshape(v.shape)

    def encode(self, values: np.ndarray, grad: np.ndarray | None = None) -> bytes:
        v = as_float32(values, "gradient-ranked top-k")
        return self._pack(v, self.select(v, grad))


class EmbeddingCache:
    """The server's embedding cache table for one client (eqs. 2-3), kept **per sample**.

    Eqs. 2-3 index the table by element j of client i's embedding, and the embedding is that of
    one sample: the value that stands in for an unsent entry must be the last value the client
    sent *for the same sample* (temporal locality, ref. [22]: the same vector changes little
    between rounds). A table matched by row position in the message would, with shuffled
    mini-batches, fill a sample's entries with another sample's values. So every row is looked up
    and stored under its sample id:

    * ``ring=False`` (datasets): ids are indices into a fixed set of samples (0..n-1); the table
      grows to hold every id seen, one row per sample, and is never evicted;
    * ``ring=True`` (streams): ids grow without bound but a sample is re-sent only while it sits
      in a sliding window; the table is a ring of slots (``id % capacity``), each tagged with the
      id it holds, at least twice the largest message's rows (a power of two, >= 64), so the
      samples of the current window never evict each other.

    A row whose sample has no entry yet (first time seen, or evicted) starts from zero (the paper
    does not give H's initial value; zero makes such a row exactly plain top-k). Eq. 2 stores the
    filled row, so entries never sent for a sample stay 0.
    """

    MIN_RING = 64

    def __init__(self, ring: bool = False) -> None:
        self.ring = bool(ring)
        self._table = np.zeros((0, 0), dtype=F32)
        self._tags = np.zeros(0, dtype=np.int64)  # sample id held by each slot, -1 = empty

    @property
    def width(self) -> int | None:
        """Embedding width of the table (None before the first message)."""
        return self._table.shape[1] if self._tags.size else None

    def fill(self, sparse: SparseEmbedding, samples: np.ndarray) -> np.ndarray:
        """Update the rows of ``samples`` with the sent entries (eq. 2); return the filled embedding (eq. 3).

        ``samples[r]`` is the id of the sample in row r of ``sparse`` (distinct ids, >= 0).
        """
        if not isinstance(sparse, SparseEmbedding):
            raise ProtocolError(f"embedding cache: expected a SparseEmbedding, got {type(sparse).__name__}")
        if len(sparse.shape) == 0:
            raise ProtocolError("embedding cache: embedding must have at least one dimension, got a scalar")
        width = sparse.shape[-1]
        rows = math.prod(sparse.shape[:-1])
        ids = self._check_samples(samples, rows)
        if self.width is not None and self.width != width:
            raise ProtocolError(
                f"embedding cache: embedding of width {width}, the table holds width {self.width}"
            )
        slots = self._slots(ids, width)
        hit = self._tags[slots] == ids
        out = np.zeros((rows, width), dtype=F32)
        out[hit] = self._table[slots[hit]]
        out.reshape(-1)[sparse.indices] = sparse.values
        self._table[slots] = out
        self._tags[slots] = ids
        return out.reshape(sparse.shape)

    def lookup(self, samples: np.ndarray) -> np.ndarray:
        """The cached rows of ``samples`` (zero rows for samples not held); shape (len(samples), width)."""
        ids = self._check_samples(samples, None)
        if self.width is None:
            raise ProtocolError("embedding cache: empty table (no embedding received yet)")
        cap = self._tags.size
        slots = ids % cap if self.ring else np.where(ids < cap, ids, 0)  # an id >= cap never matches a tag
        hit = self._tags[slots] == ids
        out = np.zeros((ids.size, self.width), dtype=F32)
        out[hit] = self._table[slots[hit]]
        return out

    def _check_samples(self, samples, rows: int | None) -> np.ndarray:
        ids = np.asarray(samples)
        if ids.ndim != 1 or ids.dtype.kind not in "iu":
            raise ProtocolError(
                "embedding cache: sample ids must be a 1-D integer array, "
                f"got {ids.dtype} of shape {ids.shape}"
            )
        if rows is not None and ids.size != rows:
            raise ProtocolError(f"embedding cache: {ids.size} sample ids for an embedding of {rows} rows")
        ids = ids.astype(np.int64)
        if ids.size and ids.min() < 0:
            raise ProtocolError(f"embedding cache: sample ids must be >= 0, got {ids.min()}")
        if ids.size > 1 and np.unique(ids).size != ids.size:
            raise ProtocolError("embedding cache: a sample id occurs twice in one message")
        return ids

    def _slots(self, ids: np.ndarray, width: int) -> np.ndarray:
        """Slots of ``ids``, growing the table first if they do not fit."""
        cap = self._tags.size
        if self.ring:
            need = max(self.MIN_RING, 1 << max(0, 2 * ids.size - 1).bit_length())
            if need > cap:
                self._resize(need, width)
            return ids % self._tags.size
        top = int(ids.max()) + 1 if ids.size else 0
        if top > cap:
            self._resize(max(top, cap + cap // 4), width)
        return ids

    def _resize(self, capacity: int, width: int) -> None:
        held = np.flatnonzero(self._tags >= 0)
        ids, rows = self._tags[held], self._table[held]
        self._table = np.zeros((capacity, width), dtype=F32)
        self._tags = np.full(capacity, -1, dtype=np.int64)
        if ids.size:
            slots = ids % capacity if self.ring else ids
            self._table[slots], self._tags[slots] = rows, ids

    def state_dict(self) -> dict[str, np.ndarray]:
        """The held rows, their sample ids and the table's capacity (restores exactly, evictions included)."""
        held = np.flatnonzero(self._tags >= 0)
        return {"ids": self._tags[held].copy(), "rows": self._table[held].copy(),
                "shape": np.array(self._table.shape, dtype=np.int64)}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        """Restore :meth:`state_dict`; ProtocolError when its arrays do not fit together."""
        try:
            capacity, width = (int(v) for v in state["shape"])
            ids = np.asarray(state["ids"], dtype=np.int64)
            rows = np.asarray(state["rows"], dtype=F32).reshape(ids.size, width)
        except (KeyError, ValueError, TypeError) as exc:
            raise ProtocolError(
                f"embedding cache state: expected ids, rows and shape that fit together ({exc})"
            ) from None
        self._table = np.zeros((capacity, width), dtype=F32)
        self._tags = np.full(capacity, -1, dtype=np.int64)
        if ids.size:
            slots = ids % capacity if self.ring else ids
            if slots.max() >= capacity or ids.min() < 0:
                raise ProtocolError(f"embedding cache state: sample ids outside a table of {capacity} slots")
            self._table[slots], self._tags[slots] = rows, ids

    def reset(self) -> None:
        """Forget every sample."""
        self.__init__(self.ring)
