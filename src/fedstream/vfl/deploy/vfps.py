"""VF-PS participant selection over the network, the paper's protocol: the server sends each node the
query sample ids (a *query message*), each node answers with the local squared distances of its own
strip from each query to every available training row (a *distance message*), and the server
scores the groups from those (:meth:`~fedstream.selection.methods.VFPSSelector.select_distances`).
No feature leaves a node. Both messages (little-endian)::

    kind:u8 round:u32 client:u16 rows:u32 cols:u32 dtype:u8 | rows*cols values

``kind`` 6 = query ids (uint32, 1 x Q), 7 = local distances (float32, or float64 when a distance is
not exactly a float32; Q x n); ``round`` is the epoch. docs/deploy-protocol.md, "Batch VFL".
"""

from __future__ import annotations

import struct

import numpy as np

from fedstream.deploy.records import MAX_PAYLOAD
from fedstream.errors import ConfigError, ProtocolError
from fedstream.selection.reference import local_sq_distances

HEADER = struct.Struct("<BIHIIB")
QUERIES, DISTANCES = 6, 7
DTYPES = {1: np.dtype("<u4"), 4: np.dtype("<f4"), 8: np.dtype("<f8")}
CODES = {v: k for k, v in DTYPES.items()}
SELECT = "select"  # info["split"] of a VF-PS request
MAX_U32 = 2**32 - 1


def encode(kind: int, round: int, client: int, values: np.ndarray) -> bytes:
    """One query or distance message (see the module doc)."""
    values = np.ascontiguousarray(values)
    if values.ndim != 2 or values.dtype not in CODES:
        raise ProtocolError(f"cannot encode a {values.dtype} array of shape {values.shape}")
    if not 0 <= round <= MAX_U32:
        raise ProtocolError(f"round {round} does not fit the u32 round field")
    rows, cols = values.shape
    return HEADER.pack(kind, round, client, rows, cols, CODES[values.dtype]) + values.tobytes()


def decode(data: bytes, *, kind: int, round: int, client: int, shape: tuple[int, int]) -> np.ndarray:
    """The values of a message, checked against what the receiver expects; ProtocolError otherwise."""
    what = "query ids" if kind == QUERIES else "local distances"
    if not isinstance(data, (bytes, bytearray, memoryview)) or len(data) < HEADER.size:
        raise ProtocolError(
            f"{what}: a message of {len(data) if isinstance(data, bytes) else '?'} bytes is shorter "
            f"than the {HEADER.size}-byte header"
        )
    got_kind, got_round, got_client, rows, cols, code = HEADER.unpack_from(data)
    if (got_kind, got_round, got_client) != (kind, round, client):
        raise ProtocolError(f"{what}: expected kind {kind}, round {round}, client {client}; received kind "
                            f"{got_kind}, round {got_round}, client {got_client}")
    if (rows, cols) != tuple(shape):
        raise ProtocolError(f"{what}: expected shape {tuple(shape)}, received {(rows, cols)}")
    allowed = (1,) if kind == QUERIES else (4, 8)
    if code not in allowed:
        raise ProtocolError(f"{what}: dtype code {code}, expected one of {allowed}")
    dtype = DTYPES[code]
    if len(data) != HEADER.size + rows * cols * dtype.itemsize:
        raise ProtocolError(
            f"{what}: the header says {rows}x{cols} {dtype} ({HEADER.size + rows * cols * dtype.itemsize}"
            f" bytes) but the message holds {len(data)} bytes"
        )
    values = np.frombuffer(data, dtype, rows * cols, HEADER.size).reshape(rows, cols)
    if kind == DISTANCES and (not np.isfinite(values).all() or (values < 0).any()):
        raise ProtocolError(f"{what}: NaN, inf or negative values; expected squared Euclidean distances")
    return values


def local_distances(block: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """A node's share: (Q, n) local squared distances of its (n, d) features from each query to every
    sample, in float32 when that is exact (integer features, distances below 2**24), else float64."""
    dist = (
        np.stack([local_sq_distances(block, int(i)) for i in queries])
        if len(queries)
        else np.zeros((0, len(block)))
    )
    small = dist.astype(np.float32)
    return small if np.array_equal(small, dist) else dist


def check_size(spec, n: int) -> None:
    """ConfigError naming selection.queries when a node's distance message would exceed what one
    message may carry, on any runtime (``spec``: the run's SelectionSpec, ``n``: training rows)."""
    q = n if spec.queries is None else min(spec.queries, n)
    size = HEADER.size + 4 * q * n  # a distance message of Q x n float32
    if size > MAX_PAYLOAD:
        most = max(1, (MAX_PAYLOAD - HEADER.size) // (4 * n))
        raise ConfigError(
            f"selection.queries = {spec.queries!r}: each node would send {q} x {n} local distances "
            f"({size} bytes), over the {MAX_PAYLOAD}-byte limit of a message; set "
            f"selection.queries <= {most}"
        )
