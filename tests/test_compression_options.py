"""The compression options beyond the paper (issue 23): outlier clipping and stochastic rounding
in the 3-sigma quantiser, float16 top-k values and error feedback on the uplink; each checked
against an independent computation, with exact byte counts and exact state restore."""

from dataclasses import replace

import numpy as np
import pytest

from fedstream.compression import QuantizerState, ThreeSigmaQuantizer, TopK
from fedstream.compression.topk import BITMAP, DELTA, F16, pack_sparse, unpack_sparse
from fedstream.errors import ConfigError, ProtocolError
from fedstream.transport import CompressionSpec
from fedstream.transport.compressed import CompressedTransport
from fedstream.transport.messages import Embedding, Gradient
from fedstream.transport.wire import FRAME_SIZE


def arrays(seed, shape=(4, 32), scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


# --- outliers = clip ------------------------------------------------------------------------------
def test_clip_sends_outliers_as_the_nearer_end_point_and_zero_sends_them_as_zero():
    g = np.array([-10.0, -0.5, 0.0, 0.4, 7.0], np.float32)
    mu, sigma = 0.0, 0.5  # interval [-1.5, 1.5], P = 6: step 0.5
    zero, clip = ThreeSigmaQuantizer(6, "zero"), ThreeSigmaQuantizer(6, "clip")
    assert zero.symbols(g, mu, sigma).tolist() == [7, 2, 3, 4, 7]
    assert clip.symbols(g, mu, sigma).tolist() == [0, 2, 3, 4, 6]
    for q, want in ((zero, [0.0, -0.5, 0.0, 0.5, 0.0]), (clip, [-1.5, -0.5, 0.0, 0.5, 1.5])):
        data = q.encode(g, QuantizerState(mu, sigma))
        # same message format: either decoder reads it
        np.testing.assert_array_equal(ThreeSigmaQuantizer(6).decode(data, g.shape), np.float32(want))
    with pytest.raises(ProtocolError, match="outliers"):
        ThreeSigmaQuantizer(6, "drop")


def test_clip_on_the_link_counts_the_encoded_bytes_and_restores_its_state():
    spec = CompressionSpec(down="quant-huffman", outliers="clip")
    tr, q, state, sent = CompressedTransport(2, spec), ThreeSigmaQuantizer(24, "clip"), QuantizerState(), 0
    for t in range(3):
        g = arrays(t, scale=1e-3)
        g[0, 0] = 1.0  # a heavy tail: outside mu +- 3 sigma
        data = q.encode(g, state)
        sent += FRAME_SIZE + len(data)
        got = tr.down(Gradient(t, 1, g)).values
        np.testing.assert_array_equal(got, q.decode(data, g.shape))
        assert got[0, 0] > 0  # kept (as the upper end point), not zeroed
    assert tr.ledger.down == [0, sent]
    twin = CompressedTransport(2, spec)
    twin.load_state_dict(tr.state_dict())
    g = arrays(9, scale=1e-3)
    assert np.array_equal(twin.down(Gradient(3, 1, g)).values, tr.down(Gradient(3, 1, g)).values)
    assert twin.ledger.down == [0, tr.ledger.down[1] - sent]


# --- rounding = stochastic ------------------------------------------------------------------------
def test_stochastic_rounding_picks_one_of_the_two_end_points_around_each_entry():
    g = np.array([-0.74, -0.1, 0.0, 0.26, 0.5, 9.0], np.float32)
    q = ThreeSigmaQuantizer(6, "zero", "stochastic")  # interval [-1.5, 1.5], step 0.5, end points k/2 - 1.5
    x = (g.astype(np.float64) + 1.5) / 0.5
    assert q.symbols(g, 0.0, 0.5, u=np.zeros(6)).tolist() == [1, 2, 3, 3, 4, 7]  # floor
    assert q.symbols(g, 0.0, 0.5, u=np.full(6, 1 - 1e-12)).tolist() == [2, 3, 3, 4, 4, 7]  # ceil
    nearest = np.where(np.arange(6) < 5, np.rint(x), 7)
    assert q.symbols(g, 0.0, 0.5).tolist() == nearest.tolist()  # no u: the nearest end point
    with pytest.raises(ProtocolError, match="rounding"):
        ThreeSigmaQuantizer(6, "zero", "up")
    with pytest.raises(ProtocolError, match="needs an rng"):
        q.encode(g, QuantizerState(0.0, 0.5))


def test_stochastic_rounding_is_unbiased_where_nearest_rounding_drops_small_entries():
    """An entry smaller than half a step: nearest rounding always sends mu (0), stochastic rounding
    sends 0 or one step with the right odds, so its mean over many draws is the entry."""
    g = np.full(200_000, 0.05, np.float32)  # step 0.5: a tenth of a step above the end point 0
    nearest, stochastic = ThreeSigmaQuantizer(6), ThreeSigmaQuantizer(6, "zero", "stochastic")
    state = QuantizerState(0.0, 0.5)
    assert not nearest.decode(nearest.encode(g, QuantizerState(0.0, 0.5)), g.shape).any()
    got = stochastic.decode(stochastic.encode(g, state, np.random.default_rng(0)), g.shape)
    assert set(np.unique(got).tolist()) == {0.0, 0.5}
    assert abs(got.mean() - 0.05) < 0.003  # 7 standard errors (sd of the mean 0.00042)


def test_stochastic_rounding_on_the_link_counts_the_encoded_bytes_and_draws_the_same_after_restore():
    """Draws keyed by (client, coded count): each client its own, a restored link the same ones."""
    spec = CompressionSpec(down="quant-huffman", rounding="stochastic")
    tr, sent = CompressedTransport(2, spec), 0
    q, state = ThreeSigmaQuantizer(24, "zero", "stochastic"), QuantizerState()
    for t in range(3):
        g = arrays(t)
        data = q.encode(g, state, np.random.default_rng([0x5EED0, 0, 1, t]))  # seed 0, client 1
        sent += FRAME_SIZE + len(data)
        np.testing.assert_array_equal(tr.down(Gradient(t, 1, g)).values, q.decode(data, g.shape))
    assert tr.ledger.down == [0, sent]
    g = arrays(7)
    fresh = {seed: CompressedTransport(2, replace(spec, seed=seed)) for seed in (0, 1)}
    draws = {(seed, m): fresh[seed].down(Gradient(0, m, g)).values for seed in (0, 1) for m in (0, 1)}
    assert not np.array_equal(draws[0, 0], draws[0, 1])  # same state, another client: other draws
    assert not np.array_equal(draws[0, 0], draws[1, 0])  # another seed: other draws
    assert np.array_equal(draws[0, 0], CompressedTransport(2, spec).down(Gradient(0, 0, g)).values)
    twin = CompressedTransport(2, spec)
    twin.load_state_dict(tr.state_dict())
    g = arrays(9)
    assert np.array_equal(twin.down(Gradient(4, 1, g)).values, tr.down(Gradient(4, 1, g)).values)


# --- float16 values -------------------------------------------------------------------------------
@pytest.mark.parametrize("shape,ratio,index", [((2, 128), 0.25, BITMAP), ((1, 4096), 0.01, DELTA)])
def test_float16_values_cost_two_bytes_each_and_decode_to_the_rounded_values(shape, ratio, index):
    v = arrays(1, shape)
    f32, f16 = TopK(ratio), TopK(ratio, "float16")
    d32, d16 = f32.encode(v), f16.encode(v)
    nnz = int(f32.select(v).sum())
    assert d16[0] == index | F16 and d32[0] == index
    assert len(d32) - len(d16) == 2 * nnz  # same index section, 2 bytes less per value
    back = f16.decode(d16, shape)
    kept = f32.select(v)
    np.testing.assert_array_equal(back[kept], v[kept].astype(np.float16).astype(np.float32))
    assert not back[~kept].any()


def test_float16_at_twice_the_ratio_costs_what_float32_costs_with_a_bitmap():
    v = arrays(2, (100, 128))
    assert len(TopK(0.25, "float16").encode(v)) == len(TopK(0.125).encode(v))


def test_float16_clips_values_beyond_its_range_and_rejects_a_wrong_length():
    v = np.array([[1e6, -1e6, 0.5, 0.0]], np.float32)
    data = pack_sparse(v.shape, np.arange(3), v.reshape(-1)[:3], "float16")
    np.testing.assert_array_equal(unpack_sparse(data, v.shape).values, [65504.0, -65504.0, 0.5])
    with pytest.raises(ProtocolError, match="need"):
        unpack_sparse(data[:-1], v.shape)
    with pytest.raises(ProtocolError, match="flag"):
        unpack_sparse(bytes([8]) + data[1:], v.shape)


def test_float16_on_the_link_counts_the_encoded_bytes():
    tr = CompressedTransport(1, CompressionSpec(up="topk", ratio=0.25, value_dtype="float16"))
    e = arrays(3)
    got = tr.up(Embedding(0, 0, e)).values
    data = TopK(0.25, "float16").encode(e)
    assert tr.ledger.up == [FRAME_SIZE + len(data)]
    np.testing.assert_array_equal(got, TopK(0.25, "float16").decode(data, e.shape))


# --- error feedback -------------------------------------------------------------------------------
def reference_feedback(sends, ratio, value_dtype="float32"):
    """Error feedback written out directly: per sample s, x = E + r_s; send top-k of x (by |x|);
    r_s = x - what the receiver decodes. ``sends``: (ids, E) per message; returns the decoded rows."""
    codec, residual, out = TopK(ratio, value_dtype), {}, []
    for ids, e in sends:
        x = e + np.stack([residual.get(int(s), np.zeros(e.shape[1], np.float32)) for s in ids])
        x = x.astype(np.float32)
        got = codec.decode(codec.encode(x), x.shape)
        for r, s in enumerate(ids):
            residual[int(s)] = x[r] - got[r]
        out.append(got)
    return out


@pytest.mark.parametrize("value_dtype", ["float32", "float16"])
def test_feedback_adds_each_samples_own_residual_next_time_it_is_sent(value_dtype):
    spec = CompressionSpec(up="topk", ratio=0.25, feedback=True, value_dtype=value_dtype)
    tr = CompressedTransport(1, spec)
    rng = np.random.default_rng(5)
    sends = [(rng.permutation(10)[:4], arrays(10 + t)) for t in range(6)]  # shuffled batches of 4 of 10
    want = reference_feedback(sends, 0.25, value_dtype)
    for t, ((ids, e), w) in enumerate(zip(sends, want)):
        np.testing.assert_array_equal(tr.up(Embedding(t, 0, e), samples=ids).values, w)
    assert tr.ledger.up[0] == sum(FRAME_SIZE + len(TopK(0.25, value_dtype).encode(w)) for w in want)


def test_feedback_sends_what_was_left_out_the_next_time():
    tr = CompressedTransport(1, CompressionSpec(up="topk", ratio=0.25, feedback=True))
    e = np.array([[4.0, 3.0, 2.0, 1.0]], np.float32)  # k = 1
    got = [tr.up(Embedding(t, 0, e), samples=np.array([7])).values[0].tolist() for t in range(3)]
    assert got == [[4, 0, 0, 0], [0, 6, 0, 0], [8, 0, 0, 0]]  # x = E + r: [4, 6, 4, 2], then [8, 3, 6, 3]


def test_feedback_online_keys_rows_by_round_and_restores_exactly():
    """Without sample ids a message of round t with R rows holds the samples of rounds t-R+1..t
    (an SLR window), as for the cache; the residual ring is in the link's state."""
    spec = CompressionSpec(up="topk-grad", ratio=0.25, feedback=True, cache=True)
    whole, cut = CompressedTransport(1, spec), CompressedTransport(1, spec)

    def play(tr, rounds):
        out = []
        for t in rounds:
            out.append(tr.up(Embedding(t, 0, arrays(t, (min(t + 1, 3), 8)))).values)
            tr.down(Gradient(t, 0, arrays(50 + t, (min(t + 1, 3), 8))))
        return out

    ref = play(whole, range(8))
    play(cut, range(4))
    resumed = CompressedTransport(1, spec)
    resumed.load_state_dict(cut.state_dict())
    assert any(k.startswith("client0.sender.residual.") for k in cut.state_dict())
    for a, b in zip(ref[4:], play(resumed, range(4, 8))):
        np.testing.assert_array_equal(a, b)
    # sample 3 (round 3) is re-sent in rounds 4 and 5: its residual is read, so the rows differ
    plain = play(CompressedTransport(1, CompressionSpec(up="topk-grad", ratio=0.25, cache=True)), range(8))
    assert not all(np.array_equal(a, b) for a, b in zip(plain, ref))


def test_feedback_batch_state_restores_exactly_and_is_per_client():
    spec = CompressionSpec(up="topk", ratio=0.125, feedback=True)
    tr = CompressedTransport(2, spec)
    ids = np.array([3, 1, 4])
    tr.up(Embedding(0, 1, arrays(0, (3, 32))), samples=ids)
    state = tr.state_dict()
    assert not any(k.startswith("client0.") for k in state)
    twin = CompressedTransport(2, spec)
    twin.load_state_dict(state)
    e, before = arrays(1, (3, 32)), tr.ledger.up[1]
    assert np.array_equal(twin.up(Embedding(1, 1, e), samples=ids[::-1]).values,
                          tr.up(Embedding(1, 1, e), samples=ids[::-1]).values)
    assert twin.ledger.up[1] == tr.ledger.up[1] - before


@pytest.mark.parametrize("kwargs,match", [
    ({"feedback": True}, "compression.feedback = true needs compression.up"),
    ({"value_dtype": "float16"}, "compression.value_dtype = float16 needs compression.up"),
    ({"value_dtype": "int8"}, "compression.value_dtype = int8 needs compression.up"),
    ({"up": "topk", "outliers": "clip"}, "compression.outliers = 'clip' needs compression.down = quant"),
    ({"down": "sign", "rounding": "stochastic"},
     "compression.rounding = 'stochastic' needs compression.down"),
    ({"down": "quant-huffman", "rounding": "up"}, "compression.rounding"),
    ({"up": "topk", "value_dtype": "float64"}, "compression.value_dtype"),
    ({"up": "topk", "feedback": 1}, "compression.feedback"),
])
def test_option_validation(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        CompressionSpec(**kwargs)


def test_a_link_state_of_the_old_column_ranking_is_refused():
    tr = CompressedTransport(1, CompressionSpec(up="topk-grad"))
    with pytest.raises(ProtocolError, match="column ranking"):
        tr.load_state_dict({"client0.sender.last_gradient": np.ones((2, 8), np.float32)})


# --- int8 values ---------------------------------------------------------------------------------
def test_int8_values_sit_on_a_per_row_scale_computed_independently():
    v = arrays(4, (5, 32))
    v[2] = 0.0  # a row whose sent entries are all 0: scale 0
    data, sent = TopK(0.5, "int8").pack(v, TopK(0.5).select(v))
    mask = TopK(0.5).select(v)
    assert len(data) == 1 + 5 * 32 // 8 + 2 * 5 + int(mask.sum())  # flag, bitmap, scales, one byte each
    for r in range(5):
        peak = np.abs(v[r][mask[r]]).max()
        s = np.float16(peak)
        s = s if float(s) >= peak else np.nextafter(s, np.float16(np.inf))  # rounded up
        want = [np.rint(127 * x / float(s)) * float(s) / 127 if s > 0 else 0.0 for x in v[r][mask[r]]]
        np.testing.assert_allclose(sent[r][mask[r]], want, rtol=1e-6, atol=0)
        assert np.abs(sent[r][mask[r]] - v[r][mask[r]]).max() <= peak / 254 * 1.001
    np.testing.assert_array_equal(unpack_sparse(data, v.shape).dense(), sent)


def test_int8_payloads_that_lie_are_refused():
    v = arrays(5, (2, 16))
    data = bytearray(TopK(0.25, "int8").encode(v))
    with pytest.raises(ProtocolError, match="need"):
        unpack_sparse(bytes(data[:-1]), v.shape)
    bad = bytearray(data)
    bad[-1] = 0x80  # code -128
    with pytest.raises(ProtocolError, match="-127..127"):
        unpack_sparse(bytes(bad), v.shape)
    both = bytes([data[0] | F16]) + bytes(data[1:])
    with pytest.raises(ProtocolError, match="both float16 and int8"):
        unpack_sparse(both, v.shape)


def test_int8_at_twice_the_float16_ratio_costs_two_bytes_a_row_more_on_the_link():
    e = arrays(6, (8, 128))
    sizes = {}
    for dtype, ratio in (("float16", 0.25), ("int8", 0.5)):
        tr = CompressedTransport(1, CompressionSpec(up="topk-grad", ratio=ratio, value_dtype=dtype))
        tr.up(Embedding(0, 0, e))
        sizes[dtype] = tr.ledger.up[0]
    assert sizes["int8"] == sizes["float16"] + 2 * 8


# --- width ----------------------------------------------------------------------------------------
def test_width_quantises_on_mu_plus_minus_width_sigma_and_any_decoder_reads_it():
    g = np.array([-10.0, -2.9, -0.5, 0.0, 1.1, 2.0, 7.0], np.float32)
    wide = ThreeSigmaQuantizer(12, "zero", width=6.0)  # interval [-3, 3] for sigma 0.5, step 0.5
    data = wide.encode(g, QuantizerState(0.0, 0.5))
    want = [0.0, -3.0, -0.5, 0.0, 1.0, 2.0, 0.0]  # -2.9 -> -3.0 (inside 6 sigma, outside 3 sigma)
    np.testing.assert_array_equal(ThreeSigmaQuantizer(12).decode(data, g.shape), np.float32(want))
    narrow = ThreeSigmaQuantizer(6, "zero").encode(g, QuantizerState(0.0, 0.5))  # same step, 3 sigma
    assert ThreeSigmaQuantizer(6).decode(narrow, g.shape)[1] == 0  # -2.9 is an outlier at 3 sigma
    with pytest.raises(ProtocolError, match="width"):
        ThreeSigmaQuantizer(6, width=0)


def test_width_on_the_link_counts_the_encoded_bytes():
    spec = CompressionSpec(down="quant-huffman", outliers="clip", levels=48, width=6.0)
    tr, state, sent = CompressedTransport(1, spec), QuantizerState(), 0
    q = ThreeSigmaQuantizer(48, "clip", width=6.0)
    for t in range(3):
        g = arrays(t)
        data = q.encode(g, state)
        sent += FRAME_SIZE + len(data)
        np.testing.assert_array_equal(tr.down(Gradient(t, 0, g)).values, q.decode(data, g.shape))
    assert tr.ledger.down == [sent]
    with pytest.raises(ConfigError, match="compression.width = 6.0 needs compression.down"):
        CompressionSpec(down="sign", width=6.0)
    with pytest.raises(ConfigError, match="compression.width"):
        CompressionSpec(down="quant-huffman", width=-1)
