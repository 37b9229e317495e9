"""Downlink codecs: the paper's 3-sigma quantiser (section 3.2), signSGD and plain float32."""

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fedstream.compression import (
    Float32Codec,
    QuantizerState,
    SignCodec,
    ThreeSigmaQuantizer,
)
from fedstream.errors import ProtocolError


def reference_quantise(g: np.ndarray, mu: float, sigma: float, levels: int) -> np.ndarray:
    """Section 3.2 written out entry by entry: 0 outside [mu-3s, mu+3s], else the nearest end point."""
    mu, sigma = float(np.float32(mu)), float(np.float32(sigma))
    lo, hi = mu - 3 * sigma, mu + 3 * sigma
    ends = lo + 6 * sigma / levels * np.arange(levels + 1)
    out = [
        0.0 if not lo <= v <= hi else ends[np.argmin(np.abs(ends - v))] for v in g.astype(np.float64).ravel()
    ]
    return np.array(out, dtype=np.float32).reshape(g.shape)


def header(msg: bytes):
    return struct.unpack_from("<Bff", msg)  # levels, mu, sigma


def test_matches_the_papers_procedure_and_uses_previous_round_stats():
    rng = np.random.default_rng(0)
    q, state = ThreeSigmaQuantizer(24), QuantizerState()
    prev = None
    for r in range(4):
        g = (rng.standard_normal((3, 64)) * (1 + r) + r).astype(np.float32)  # the distribution drifts
        msg = q.encode(g, state)
        _, mu, sigma = header(msg)
        src = g if prev is None else prev  # first round: the current gradient's own statistics
        assert mu == np.float32(src.astype(np.float64).mean()) and sigma == np.float32(
            src.astype(np.float64).std()
        )
        assert (state.mu, state.sigma, state.rounds) == (float(np.float32(g.astype(np.float64).mean())),
                                                         float(np.float32(g.astype(np.float64).std())), r + 1)
        back = q.decode(msg, g.shape)
        assert back.dtype == np.float32 and back.shape == g.shape
        np.testing.assert_array_equal(back, reference_quantise(g, mu, sigma, 24))
        prev = g


def test_outliers_are_zero_and_inliers_within_half_a_step():
    q, state = ThreeSigmaQuantizer(24), QuantizerState(mu=0.0, sigma=1.0)
    g = np.linspace(-5, 5, 1001, dtype=np.float32)
    back = q.decode(q.encode(g, state), g.shape)
    outside = np.abs(g) > 3
    assert np.all(back[outside] == 0)
    assert np.all(np.abs(back[~outside] - g[~outside]) <= 0.125 + 1e-6)  # step = 6 sigma / 24
    assert set(np.unique(back[~outside])) <= set(q.values(0.0, 1.0)[:25].tolist())


def test_message_is_much_smaller_than_float32():
    g = np.random.default_rng(1).standard_normal((1, 128)).astype(np.float32)
    msg = ThreeSigmaQuantizer().encode(g, QuantizerState())
    assert len(msg) < 512 / 4  # 128 float32 = 512 bytes


def test_zero_sigma_and_empty_and_constant_gradients():
    q = ThreeSigmaQuantizer(4)
    g = np.full((2, 5), 0.5, np.float32)
    state = QuantizerState()
    msg = q.encode(g, state)  # sigma = 0: every entry equals mu, a single symbol of 0 bits
    np.testing.assert_array_equal(q.decode(msg, g.shape), g)
    g2 = np.array([[0.5, 1.0]], np.float32)
    np.testing.assert_array_equal(q.decode(q.encode(g2, state), g2.shape), [[0.5, 0.0]])
    empty = np.zeros((0, 8), np.float32)
    assert q.decode(q.encode(empty, QuantizerState()), (0, 8)).shape == (0, 8)


@settings(max_examples=60, deadline=None)
@given(hnp.arrays(np.float32, hnp.array_shapes(min_dims=1, max_dims=2, max_side=40),
                  elements=st.floats(-1e3, 1e3, width=32)),
       st.floats(-10, 10), st.floats(0, 100), st.integers(1, 60))
def test_roundtrip_property(g, mu, sigma, levels):
    q = ThreeSigmaQuantizer(levels)
    state = QuantizerState(float(np.float32(mu)), float(np.float32(sigma)))
    msg = q.encode(g, state)
    _, hmu, hsigma = header(msg)
    np.testing.assert_array_equal(
        q.decode(msg, g.shape), q.values(hmu, hsigma)[q.symbols(g, hmu, hsigma)].reshape(g.shape)
    )


def test_decode_rejects_bad_messages():
    rng = np.random.default_rng(2)
    g = rng.standard_normal((2, 50)).astype(np.float32)
    q = ThreeSigmaQuantizer()
    msg = q.encode(g, QuantizerState())
    bad = {
        "truncated": msg[:-1],
        "trailing": msg + b"\x00",
        "header": msg[:5],
        "levels": bytes([23]) + msg[1:],
        "mode": msg[:10] + bytes([2 << 3 | msg[10] & 7]) + msg[11:],  # byte 10: the Huffman block's mode/pad
        "padding": msg[:10] + bytes([msg[10] ^ 4]) + msg[11:],
        "pairs": msg[:10] + bytes([1 << 3 | msg[10] & 7]) + msg[11:],  # a single-symbol table read as pairs
        "mu": msg[:1] + struct.pack("<f", np.nan) + msg[5:],
        "sigma": msg[:5] + struct.pack("<f", -1.0) + msg[9:],
    }
    for data in bad.values():
        with pytest.raises(ProtocolError):
            q.decode(data, g.shape)
    for shape in [(2, 49), (2, 51), (0,), (-1, 2), (2.5, 4)]:  # the entry count travels in the message
        with pytest.raises(ProtocolError):
            q.decode(msg, shape)


def test_encode_rejects_bad_input():
    q = ThreeSigmaQuantizer()
    with pytest.raises(ProtocolError, match="NaN"):
        q.encode(np.array([1.0, np.nan], np.float32), QuantizerState())
    with pytest.raises(ProtocolError, match="float"):
        q.encode(np.array([1, 2]), QuantizerState())
    with pytest.raises(ProtocolError, match="QuantizerState"):
        q.encode(np.zeros(3, np.float32), None)
    for levels in (0, 255, 2.5, True):
        with pytest.raises(ProtocolError):
            ThreeSigmaQuantizer(levels)


def test_sign_codec_plain_sends_one_bit_per_entry_and_decodes_to_plus_minus_one():
    c = SignCodec(scaled=False)
    g = np.array([[0.5, -2.0, 0.0], [1.5, -0.25, 3.0], [-1e-9, 7.0, -3.0]], np.float32)
    msg = c.encode(g)
    assert len(msg) == 2  # 9 bits, no scale
    np.testing.assert_array_equal(c.decode(msg, g.shape), np.where(g >= 0, 1.0, -1.0))
    for data in (msg[:-1], msg + b"\x00", msg[:1] + bytes([msg[1] | 1])):  # short, long, padding bit set
        with pytest.raises(ProtocolError):
            c.decode(data, g.shape)
    with pytest.raises(ProtocolError, match="plain"):
        c.decode(SignCodec(scaled=True).encode(g), g.shape)  # a scaled message is 4 bytes longer
    with pytest.raises(ProtocolError):
        SignCodec(scaled="yes")
    assert c.encode(np.zeros((0, 4), np.float32)) == b"" and c.decode(b"", (0, 4)).shape == (0, 4)


def test_sign_codec_scaled():
    c = SignCodec(scaled=True)
    g = np.array([[0.5, -2.0, 0.0], [1.5, -0.25, 3.0]], np.float32)
    msg = c.encode(g)
    assert len(msg) == 4 + 1
    scale = np.float32(np.abs(g).mean())
    np.testing.assert_array_equal(c.decode(msg, g.shape), np.where(g >= 0, scale, -scale))
    for data in (msg[:-1], msg + b"\x00", msg[:4] + bytes([msg[4] | 1]), struct.pack("<f", np.inf) + msg[4:]):
        with pytest.raises(ProtocolError):
            c.decode(data, g.shape)
    with pytest.raises(ProtocolError):
        c.encode(np.array([np.inf], np.float32))
    big = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
    assert np.array_equal(np.sign(c.decode(c.encode(big), big.shape)), np.where(big >= 0, 1, -1))


def test_float32_codec():
    c = Float32Codec()
    g = np.random.default_rng(0).standard_normal((3, 7)).astype(np.float32)
    msg = c.encode(g)
    assert len(msg) == 4 * 21
    np.testing.assert_array_equal(c.decode(msg, g.shape), g)
    with pytest.raises(ProtocolError):
        c.decode(msg[:-4], g.shape)
    with pytest.raises(ProtocolError):
        c.decode(struct.pack("<f", np.nan), (1,))
    with pytest.raises(ProtocolError):
        c.encode([1.0, 2.0])
