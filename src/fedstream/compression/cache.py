"""Per-sample tables of embedding rows: the server's embedding cache (eqs. 2-3 of the compression
paper) and, with the same class, the client's error-feedback residuals (``compression.feedback``).

See :mod:`fedstream.compression.topk` for the cache's role in the paper's scheme.
"""

from __future__ import annotations

import math

import numpy as np

from fedstream.compression.base import F32
from fedstream.compression.topk import SparseEmbedding
from fedstream.errors import ProtocolError


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

    def store(self, samples: np.ndarray, rows: np.ndarray) -> None:
        """Replace the rows of ``samples`` by ``rows`` (shape (len(samples), width)), whatever they held."""
        rows = np.asarray(rows, dtype=F32)
        if rows.ndim != 2:
            raise ProtocolError(f"embedding table: expected rows of shape (samples, width), got {rows.shape}")
        ids = self._check_samples(samples, rows.shape[0])
        if self.width is not None and self.width != rows.shape[1]:
            raise ProtocolError(
                f"embedding table: rows of width {rows.shape[1]}, the table holds width {self.width}"
            )
        slots = self._slots(ids, rows.shape[1])
        self._table[slots] = rows
        self._tags[slots] = ids

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
