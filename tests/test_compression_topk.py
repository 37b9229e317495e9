"""Uplink codecs: top-k, gradient-ranked top-k, index encodings, varints and the embedding cache."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fedstream.compression import (
    EmbeddingCache,
    GradientRankedTopK,
    SparseEmbedding,
    TopK,
)
from fedstream.compression.topk import BITMAP, DELTA, pack_sparse, unpack_sparse
from fedstream.compression.varint import decode_varints, encode_varints
from fedstream.errors import ProtocolError


def naive_varint_len(v: int) -> int:
    n = 1
    while v >= 128:
        v >>= 7
        n += 1
    return n


def expected_sizes(n: int, idx: np.ndarray) -> tuple[int, int]:
    """Index-section bytes, computed independently: (bitmap, delta)."""
    prev, delta = -1, naive_varint_len(len(idx))
    for i in idx.tolist():
        delta += naive_varint_len(i - prev - 1)
        prev = i
    return (n + 7) // 8, delta


def test_topk_keeps_largest_magnitudes_per_row():
    rng = np.random.default_rng(0)
    e = rng.standard_normal((3, 128)).astype(np.float32)
    codec = TopK(0.125)
    back = codec.decode(codec.encode(e), e.shape)
    for r in range(3):
        top = np.argsort(-np.abs(e[r]))[:16]
        np.testing.assert_array_equal(np.flatnonzero(back[r]), np.sort(top))
        np.testing.assert_array_equal(back[r, top], e[r, top])


def test_gradient_ranked_topk_ranks_each_row_by_weight_times_magnitude():
    rng = np.random.default_rng(1)
    e = rng.standard_normal((2, 64)).astype(np.float32)
    g = rng.standard_normal((1, 64)).astype(np.float32)  # one row of weights, broadcast over the rows
    codec = GradientRankedTopK(0.125)
    sparse = codec.decode_sparse(codec.encode(e, g), e.shape)
    want = [np.sort(np.argsort(-(np.abs(g[0]) * np.abs(e[r])), kind="stable")[:8]) for r in range(2)]
    np.testing.assert_array_equal(sparse.indices, np.concatenate([want[0], 64 + want[1]]))
    assert set(want[0]) != set(want[1])  # the rows keep different entries
    np.testing.assert_array_equal(sparse.values, e.reshape(-1)[sparse.indices])
    # before any gradient: plain magnitude top-k
    assert codec.encode(e) == TopK(0.125).encode(e)
    # equal weights rank by |E| alone; all-zero scores are tied and broken by |E|
    np.testing.assert_array_equal(codec.select(e, np.ones((1, 64), np.float32)), TopK(0.125).select(e))
    tied = np.zeros((1, 64), np.float32)
    np.testing.assert_array_equal(codec.select(e[:1], tied), TopK(0.125).select(e[:1]))
    with pytest.raises(ProtocolError, match="shape"):
        codec.encode(e, np.ones((3, 64), np.float32))
    with pytest.raises(ProtocolError, match="NaN"):
        codec.encode(e, np.full((1, 64), np.nan, np.float32))


@pytest.mark.parametrize("shape,ratio,flag", [((1, 128), 0.125, BITMAP), ((1, 128), 0.5, BITMAP),
                                              ((1, 4096), 0.01, DELTA), ((4, 1000), 0.05, DELTA),
                                              ((1, 8), 1.0, BITMAP), ((2, 16), 0.0625, DELTA)])
def test_chosen_index_encoding_is_the_smaller(shape, ratio, flag):
    e = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    codec = TopK(ratio)
    msg = codec.encode(e)
    idx = np.flatnonzero(codec.select(e))
    bitmap, delta = expected_sizes(e.size, idx)
    assert msg[0] == flag == (DELTA if delta < bitmap else BITMAP)
    assert len(msg) == 1 + min(bitmap, delta) + 4 * idx.size
    np.testing.assert_array_equal(codec.decode(msg, shape), np.where(codec.select(e), e, 0))


@settings(max_examples=100, deadline=None)
@given(hnp.arrays(np.bool_, st.integers(0, 3000)), st.data())
def test_sparse_roundtrip_property(mask, data):
    idx = np.flatnonzero(mask)
    vals = data.draw(hnp.arrays(np.float32, idx.size, elements=st.floats(-1e6, 1e6, width=32)))
    msg = pack_sparse((mask.size,), idx, vals)
    bitmap, delta = expected_sizes(mask.size, idx)
    assert len(msg) == 1 + min(bitmap, delta) + 4 * idx.size
    back = unpack_sparse(msg, (mask.size,))
    np.testing.assert_array_equal(back.indices, idx)
    np.testing.assert_array_equal(back.values, vals)


def test_varints_roundtrip_and_reject_non_minimal():
    v = np.array([0, 1, 127, 128, 300, 2**35, 2**63 - 1], dtype=np.uint64)
    data = encode_varints(v)
    assert len(data) == sum(naive_varint_len(int(x)) for x in v)
    back, end = decode_varints(data, 0, v.size)
    assert end == len(data) and back.astype(np.uint64).tolist() == v.tolist()
    with pytest.raises(ProtocolError, match="non-minimal"):
        decode_varints(b"\x80\x00", 0, 1)
    with pytest.raises(ProtocolError):
        decode_varints(b"\x80\x80", 0, 1)
    with pytest.raises(ProtocolError):
        encode_varints(np.array([-1]))


def test_unpack_rejects_bad_messages():
    e = np.random.default_rng(3).standard_normal((1, 4096)).astype(np.float32)
    delta = TopK(0.01).encode(e)
    bitmap = TopK(0.5).encode(e[:, :64])
    assert delta[0] == DELTA and bitmap[0] == BITMAP
    cases = [
        (b"", (1, 64)), (b"\x07" + bitmap[1:], (1, 64)),       # empty, unknown flag
        (bitmap[:-1], (1, 64)), (bitmap + b"\x00", (1, 64)),   # truncated values, trailing bytes
        (bitmap[:5], (1, 64)),                                 # truncated bitmap
        (bitmap, (1, 63)),                                     # padding bits set for 63 entries
        (delta[:-1], (1, 4096)), (delta, (1, 4000)),           # index out of range
        (b"\x01\x05", (1, 4)),                                 # 5 entries claimed of 4
        (b"\x01\x01\x80\x00" + bytes(4), (1, 4)),              # non-minimal varint gap
        (b"\x01\x01\x00" + np.float32(np.nan).tobytes(), (1, 4)),
    ]
    for data, shape in cases:
        with pytest.raises(ProtocolError):
            unpack_sparse(data, shape)


def test_bad_ratio_and_input():
    for ratio in (0, -0.1, 1.5, "0.1", True):
        with pytest.raises(ProtocolError):
            TopK(ratio)
    with pytest.raises(ProtocolError):
        TopK(0.1).encode(np.array([1, 2, 3]))
    with pytest.raises(ProtocolError):
        TopK(0.1).encode(np.float32(1.0).reshape(()))
    assert TopK(0.1).k(128) == 13 and TopK(0.125).k(128) == 16 and TopK(0.001).k(8) == 1
    assert TopK(0.5).decode(TopK(0.5).encode(np.zeros((0, 8), np.float32)), (0, 8)).shape == (0, 8)


def _sparse(shape, idx, vals):
    return SparseEmbedding(shape, np.array(idx, np.int64), np.array(vals, np.float32))


def test_embedding_cache_follows_eqs_2_and_3_per_sample():
    cache = EmbeddingCache()
    r1 = _sparse((1, 6), [0, 2, 4], [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(cache.fill(r1, [7]), [[1, 0, 2, 0, 3, 0]])  # H starts at 0
    r2 = _sparse((1, 6), [1, 2], [5.0, 0.0])
    # unsent entries (0, 3, 4, 5) keep the last value received for sample 7; a sent exact 0 stays 0
    np.testing.assert_array_equal(cache.fill(r2, [7]), [[1, 5, 0, 0, 3, 0]])
    np.testing.assert_array_equal(cache.lookup([7]), [[1, 5, 0, 0, 3, 0]])
    # another sample has its own row: nothing of sample 7 leaks into it
    np.testing.assert_array_equal(cache.fill(r2, [8]), [[0, 5, 0, 0, 0, 0]])
    # the returned array is a copy: the caller may not corrupt the table
    out = cache.fill(_sparse((1, 6), [], []), [7])
    out[:] = 99
    np.testing.assert_array_equal(
        cache.lookup([7, 8, 1000]), [[1, 5, 0, 0, 3, 0], [0, 5, 0, 0, 0, 0], [0] * 6]
    )


def test_embedding_cache_matches_rows_by_sample_not_by_position():
    """A shuffled second batch: each row is filled from its own sample's earlier values."""
    cache = EmbeddingCache()
    first = np.arange(12, dtype=np.float32).reshape(3, 4) + 1  # samples 10, 11, 12
    cache.fill(_sparse((3, 4), np.arange(12), first.ravel()), [10, 11, 12])
    # samples 12, 10 (in that order) send only column 0
    out = cache.fill(_sparse((2, 4), [0, 4], [-1.0, -2.0]), [12, 10])
    np.testing.assert_array_equal(out, [[-1, 10, 11, 12], [-2, 2, 3, 4]])
    np.testing.assert_array_equal(cache.lookup([11]), first[1:2])


def test_embedding_cache_checks_its_input():
    cache = EmbeddingCache()
    cache.fill(_sparse((2, 6), [11], [4.0]), [0, 1])
    with pytest.raises(ProtocolError, match="width"):
        cache.fill(_sparse((2, 5), [0], [1.0]), [0, 1])
    with pytest.raises(ProtocolError, match="2 rows"):
        cache.fill(_sparse((2, 6), [0], [1.0]), [0])
    with pytest.raises(ProtocolError, match="twice"):
        cache.fill(_sparse((2, 6), [0], [1.0]), [3, 3])
    with pytest.raises(ProtocolError, match=">= 0"):
        cache.fill(_sparse((1, 6), [0], [1.0]), [-1])
    with pytest.raises(ProtocolError, match="integer"):
        cache.fill(_sparse((1, 6), [0], [1.0]), [0.5])
    with pytest.raises(ProtocolError, match="SparseEmbedding"):
        cache.fill(np.zeros((1, 6), np.float32), [0])
    cache.reset()
    assert cache.width is None


def test_embedding_cache_ring_keeps_a_sliding_window_and_state_restores_it():
    """Stream ids: slots id % capacity; a sample older than the ring is evicted (a miss, zeros)."""
    ring = EmbeddingCache(ring=True)
    for t in range(200):  # one-row messages, each a new sample, every entry sent
        ring.fill(_sparse((1, 2), [0, 1], [t, -t]), [t])
    assert ring.lookup([199]).tolist() == [[199, -199]]
    assert ring.lookup([100]).tolist() == [[0, 0]]  # 100 % 64 was overwritten by a later sample
    twin = EmbeddingCache(ring=True)
    twin.load_state_dict(ring.state_dict())
    np.testing.assert_array_equal(twin.lookup(np.arange(130, 200)), ring.lookup(np.arange(130, 200)))
    dense = EmbeddingCache()
    dense.fill(_sparse((2, 2), [0, 3], [1.0, 2.0]), [5, 900])
    copy = EmbeddingCache()
    copy.load_state_dict(dense.state_dict())
    np.testing.assert_array_equal(copy.lookup([900, 5, 6]), [[0, 2], [1, 0], [0, 0]])
    with pytest.raises(ProtocolError, match="state"):
        copy.load_state_dict(
            {"ids": np.array([1]), "rows": np.zeros((2, 2), np.float32), "shape": np.array([4, 2])}
        )


def test_gradient_ranked_topk_with_cache_end_to_end():
    """A client sends 2 of 8 entries each round; the server's view converges to the true embedding."""
    rng = np.random.default_rng(4)
    e = rng.standard_normal((1, 8)).astype(np.float32)
    codec, cache = GradientRankedTopK(0.25), EmbeddingCache()
    grad = None
    for _ in range(4):
        view = cache.fill(codec.decode_sparse(codec.encode(e, grad), e.shape), [0])
        grad = (view == 0) * 1e3 + np.float32(1e-3)  # the server's derivative is large where it lacks data
        grad = grad.astype(np.float32)
    np.testing.assert_array_equal(view, e)
