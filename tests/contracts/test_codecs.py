"""Contract checks over every codec: payload codecs, link senders/receivers, symbol codecs and the
wire formats (the :class:`fedstream.seams.Codec`, ``PayloadSender``/``PayloadReceiver`` and
``MessageCodec`` seams).

Each registry below is a list of factories; a new codec is covered by adding one line to one of
them. The checks: it satisfies its Protocol; encode -> decode gives back what the codec promises
(exact for a lossless codec, the documented approximation for a lossy one); encoding is
deterministic; every truncated, extended or garbled byte string raises ``ProtocolError``, never a
bare exception; state saved and loaded continues as the original.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pytest

import fedstream.transport.codec as wire_codec
from fedstream.compression import Float32Codec, GradientRankedTopK, HuffmanCode, SignCodec, TopK
from fedstream.compression.huffman_block import PAIRS, SINGLE, decode_block, encode_block
from fedstream.compression.topk import pack_sparse, unpack_sparse
from fedstream.compression.varint import decode_varints, encode_varints
from fedstream.errors import NonFiniteError, ProtocolError
from fedstream.seams import Codec, MessageCodec, PayloadReceiver, PayloadSender
from fedstream.transport.compressed import CompressionSpec, down_codec, up_codec
from fedstream.transport.messages import Embedding, Gradient, Query
from fedstream.transport.stacked import decode_frames, encode_frames
from fedstream.transport.tensors import decode_update, encode_update
from fedstream.transport.updates import ModelUpdate

SHAPE = (3, 16)


def _values(seed: int = 0, shape=SHAPE) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=shape).astype(np.float32)


# --- what each lossy codec promises --------------------------------------------------------------
def exact(v, out, codec):
    assert out.dtype == np.float32 and np.array_equal(out, v.astype(np.float32))


def top_k(v, out, codec):
    """The k = ceil(ratio * width) largest |v| of each row are exact, every other entry is 0."""
    k = codec.k(v.shape[-1])
    kept = out != 0
    assert (kept.sum(axis=-1) == k).all()
    assert np.array_equal(out[kept], v[kept])
    for row, mask in zip(np.abs(v), kept):
        assert row[mask].min() >= row[~mask].max(initial=0)


def sign(v, out, codec):
    """+-1, or +-mean|v| when scaled; 0 counts as positive."""
    scale = np.float32(np.abs(v, dtype=np.float64).mean()) if codec.scaled else np.float32(1)
    assert np.array_equal(out, np.where(v >= 0, scale, -scale).astype(np.float32))


def three_sigma(v, out, levels, stochastic=False, width=3.0):
    """First round: entries within mu +- width sigma of v's own stats land on the nearest of the
    P + 1 grid points (error <= half a step; stochastic rounding: on one of the two around them,
    error < one step), the others are 0."""
    mu, sigma = np.float32(v.mean(dtype=np.float64)), np.float32(v.std(dtype=np.float64))
    inside = np.abs(v.astype(np.float64) - mu) <= width * sigma * (1 - 1e-6)
    bound = (2.0 if stochastic else 1.0) * width * float(sigma) / levels
    assert np.all(np.abs(out[inside] - v[inside]) <= bound * (1 + 1e-5))
    assert np.all(out[~inside] == 0)


@dataclass
class CodecCase:
    name: str
    make: Callable[[], Codec]
    promise: Callable[[np.ndarray, np.ndarray, Any], None]


CODECS = [
    CodecCase("float32", Float32Codec, exact),
    CodecCase("topk-0.125", lambda: TopK(0.125), top_k),
    CodecCase("topk-0.5", lambda: TopK(0.5), top_k),
    CodecCase("topk-1", lambda: TopK(1.0), exact),
    CodecCase("topk-grad-0.25", lambda: GradientRankedTopK(0.25), top_k),  # no ranking yet: plain top-k
    CodecCase("sign", lambda: SignCodec(False), sign),
    CodecCase("sign-scaled", lambda: SignCodec(True), sign),
]
CODEC_IDS = [c.name for c in CODECS]


@pytest.mark.parametrize("case", CODECS, ids=CODEC_IDS)
def test_codec_is_a_codec(case):
    assert isinstance(case.make(), Codec)


@pytest.mark.parametrize("case", CODECS, ids=CODEC_IDS)
@pytest.mark.parametrize("shape", [SHAPE, (1, 7), (0, 4)])
def test_codec_round_trip(case, shape):
    codec, v = case.make(), _values(1, shape)
    data = codec.encode(v)
    assert isinstance(data, bytes) and data == codec.encode(v)  # deterministic
    out = codec.decode(data, shape)
    assert out.shape == shape
    if v.size:
        case.promise(v, out, codec)
    assert isinstance(codec.decode(memoryview(data), shape), np.ndarray)  # frames hand out views


@pytest.mark.parametrize("case", CODECS, ids=CODEC_IDS)
def test_codec_rejects_bad_input(case):
    codec, v = case.make(), _values(2)
    with pytest.raises(ProtocolError):
        codec.encode(np.arange(6).reshape(2, 3))  # not floats
    with pytest.raises(ProtocolError):
        codec.encode([[1.0, 2.0]])  # not an array
    bad = v.copy()
    bad[1, 3] = np.nan
    with pytest.raises(NonFiniteError):
        codec.encode(bad)
    _garbled_raise_protocol_error(codec.encode(v), lambda d: codec.decode(d, SHAPE))
    with pytest.raises(ProtocolError):
        codec.decode(codec.encode(v), (SHAPE[0] + 5, SHAPE[1]))  # the header's shape disagrees
    with pytest.raises(ProtocolError):
        codec.decode("not bytes", SHAPE)
    with pytest.raises(ProtocolError):
        codec.decode(codec.encode(v), (-1, 3))


def _garbled_raise_protocol_error(
    data: bytes, decode: Callable[[bytes], Any], *, garbled: int = 40, ends_message: bool = True
) -> None:
    """Every strict prefix, ``data`` + one byte (when the encoding must end its message), and
    random single-byte changes: ProtocolError or a clean decode, never another exception (a codec
    must not crash on a peer's bytes)."""
    for n in range(len(data)):
        with pytest.raises(ProtocolError):
            decode(data[:n])
    if ends_message:
        with pytest.raises(ProtocolError):
            decode(data + b"\x00")
    rng = np.random.default_rng(len(data))
    for _ in range(garbled if data else 0):
        b = bytearray(data)
        b[rng.integers(len(b))] = rng.integers(256)
        try:
            decode(bytes(b))
        except ProtocolError:
            pass


# --- link senders and receivers (stateful payload codecs, 3-sigma quantiser included) ----------
@dataclass
class LinkCase:
    name: str
    spec: CompressionSpec
    direction: str  # "up": client -> server embeddings; "down": server -> client gradients

    def make(self):
        return (up_codec if self.direction == "up" else down_codec)(self.spec)


LINKS = [
    LinkCase("topk", CompressionSpec(up="topk", ratio=0.25), "up"),
    LinkCase("topk-cache", CompressionSpec(up="topk", ratio=0.25, cache=True), "up"),
    LinkCase("topk-grad", CompressionSpec(up="topk-grad", ratio=0.25), "up"),
    LinkCase("topk-grad-cache", CompressionSpec(up="topk-grad", ratio=0.25, cache=True), "up"),
    LinkCase("topk-feedback", CompressionSpec(up="topk", ratio=0.25, feedback=True), "up"),
    LinkCase("topk-grad-f16-feedback-cache",
             CompressionSpec(up="topk-grad", ratio=0.25, value_dtype="float16", feedback=True, cache=True),
             "up"),
    LinkCase("topk-grad-int8-feedback-cache",
             CompressionSpec(up="topk-grad", ratio=0.5, value_dtype="int8", feedback=True, cache=True), "up"),
    LinkCase("sign", CompressionSpec(down="sign"), "down"),
    LinkCase("sign-scaled", CompressionSpec(down="sign-scaled"), "down"),
    LinkCase("quant-huffman-24", CompressionSpec(down="quant-huffman", levels=24), "down"),
    LinkCase("quant-huffman-3", CompressionSpec(down="quant-huffman", levels=3), "down"),
    LinkCase("quant-huffman-clip", CompressionSpec(down="quant-huffman", outliers="clip"), "down"),
    LinkCase("quant-huffman-width-6", CompressionSpec(down="quant-huffman", levels=48, width=6.0), "down"),
    LinkCase("quant-huffman-stochastic", CompressionSpec(down="quant-huffman", rounding="stochastic"),
             "down"),
]
LINK_IDS = [c.name for c in LINKS]


def _traffic(sender, receiver, messages: int, start: int = 0) -> list[tuple[bytes, np.ndarray]]:
    """``messages`` payloads of a link (a gradient shown to the sender after each, as a client's
    end does), for rounds ``start``.. (one-row messages: the online engine's case)."""
    out = []
    for t in range(start, start + messages):
        v = _values(100 + t, (1, 16))
        data = sender.payload(v)
        out.append((data, receiver.values(memoryview(data), v.shape, round=t)))
        sender.observe_gradient(_values(200 + t, (1, 16)))
    return out


@pytest.mark.parametrize("case", LINKS, ids=LINK_IDS)
def test_link_ends_are_payload_codecs(case):
    sender, receiver = case.make()
    assert isinstance(sender, PayloadSender) and isinstance(receiver, PayloadReceiver)
    assert sender.wire == receiver.wire


@pytest.mark.parametrize("case", LINKS, ids=LINK_IDS)
def test_link_round_trip(case):
    """The first payload of a link decodes to the codec's promise (later ones depend on state)."""
    sender, receiver = case.make()
    v = _values(3, (1, 16))
    out = receiver.values(memoryview(sender.payload(v)), v.shape, round=0)
    if case.direction == "up" and case.spec.value_dtype == "int8":  # the top-k entries, within s / 254
        kept = TopK(case.spec.ratio).select(v)  # the first round ranks by |E|
        assert np.array_equal(out != 0, kept)
        for row, sent, mask in zip(v, out, kept):
            assert np.abs(sent[mask] - row[mask]).max() <= np.abs(row[mask]).max() / 254 * 1.001
    elif case.direction == "up":
        wire = v.astype(np.float16).astype(np.float32) if case.spec.value_dtype == "float16" else v
        top_k(wire, out, TopK(case.spec.ratio))
    elif case.spec.outliers == "clip":  # first round: v's own stats; outliers land on the ends
        mu, sigma = np.float32(v.mean(dtype=np.float64)), np.float32(v.std(dtype=np.float64))
        lo, hi = float(mu) - 3 * float(sigma), float(mu) + 3 * float(sigma)
        three_sigma(np.clip(v, lo, hi).astype(np.float32), out, case.spec.levels)
    elif case.spec.down == "quant-huffman":
        three_sigma(v, out, case.spec.levels, case.spec.rounding == "stochastic", case.spec.width)
    else:
        sign(v, out, SignCodec(case.spec.down == "sign-scaled"))


@pytest.mark.parametrize("case", LINKS, ids=LINK_IDS)
def test_link_state_save_load_equals_continuing(case):
    n, m = 5, 6
    sender, receiver = case.make()
    whole = _traffic(sender, receiver, n + m)
    sender, receiver = case.make()
    _traffic(sender, receiver, n)
    s_state, r_state = sender.state_dict(), receiver.state_dict()
    sender, receiver = case.make()
    sender.load_state_dict(s_state)
    receiver.load_state_dict(r_state)
    for (d1, v1), (d2, v2) in zip(whole[n:], _traffic(sender, receiver, m, start=n)):
        assert d1 == d2 and np.array_equal(v1, v2)


@pytest.mark.parametrize("case", LINKS, ids=LINK_IDS)
def test_link_receiver_rejects_garbled_payloads(case):
    sender, _ = case.make()
    data = sender.payload(_values(4, (2, 16)), round=5)
    _garbled_raise_protocol_error(
        data, lambda d: case.make()[1].values(memoryview(d), (2, 16), round=5), garbled=20
    )


# --- symbol codecs and wire formats: exact round trips ------------------------------------------
@dataclass
class RoundTrip:
    """``decode(encode(sample))`` must equal ``sample`` (compared by ``same``)."""

    name: str
    encode: Callable[[Any], bytes]
    decode: Callable[[bytes], Any]
    sample: Any
    same: Callable[[Any, Any], bool] = lambda a, b: np.array_equal(a, b)
    ends_message: bool = True  # False: the bytes may be followed by others (varints in a payload)


def _same_message(a, b) -> bool:
    values = getattr(a, "values", None)
    return type(a) is type(b) and a[:2] == b[:2] and (
        a.rows == b.rows
        if values is None
        else values.dtype == b.values.dtype and np.array_equal(values, b.values)
    )


def _same_update(a: ModelUpdate, b: ModelUpdate) -> bool:
    return a[:2] == b[:2] and a.n_samples == b.n_samples and list(a.tensors) == list(b.tensors) and all(
        np.array_equal(a.tensors[k], b.tensors[k]) for k in a.tensors
    )


def _huffman(symbols: np.ndarray, alphabet: int) -> RoundTrip:
    code = HuffmanCode.from_counts(np.bincount(symbols, minlength=alphabet))

    def enc(s):
        bits, n_bits = code.encode(s)
        return code.to_bytes() + bits

    def dec(data):
        c, offset = HuffmanCode.read_from(data, 0)
        return c.decode(data[offset:], symbols.size)

    return RoundTrip(f"huffman-{alphabet}", enc, dec, symbols)


_SYMBOLS = np.minimum(np.abs(np.random.default_rng(5).normal(0, 4, 301)).astype(np.int64), 25)
_SPARSE = unpack_sparse(TopK(0.25).encode(_values(6)), SHAPE)
_STACKED = Embedding(7, 1, _values(7, (3, 2, 4)), np.array([0, 2, 5]))

ROUND_TRIPS = [
    RoundTrip("varints", encode_varints, lambda d: decode_varints(d, 0, 6)[0],
              np.array([0, 1, 127, 128, 2**21, 2**62], dtype=np.int64), ends_message=False),
    _huffman(_SYMBOLS, 26),
    _huffman(np.full(9, 3), 4),  # one symbol present: empty codewords
    RoundTrip("huffman-block-auto", lambda s: encode_block(s, 26),
              lambda d: decode_block(d, 0, 301, 26), _SYMBOLS),
    RoundTrip("huffman-block-single", lambda s: encode_block(s, 26, SINGLE),
              lambda d: decode_block(d, 0, 301, 26), _SYMBOLS),
    RoundTrip("huffman-block-pairs", lambda s: encode_block(s, 26, PAIRS),
              lambda d: decode_block(d, 0, 301, 26), _SYMBOLS),
    RoundTrip("sparse", lambda s: pack_sparse(s.shape, s.indices, s.values),
              lambda d: unpack_sparse(d, SHAPE), _SPARSE,
              lambda a, b: a.shape == b.shape and all(np.array_equal(x, y) for x, y in zip(a[1:], b[1:]))),
    RoundTrip("wire-embedding", wire_codec.encode, wire_codec.decode, Embedding(3, 1, _values(8)),
              _same_message),
    RoundTrip("wire-gradient", wire_codec.encode, wire_codec.decode, Gradient(2**32 - 1, 65535, _values(9)),
              _same_message),
    RoundTrip("wire-query", wire_codec.encode, wire_codec.decode, Query(4, 2, 3), _same_message),
    RoundTrip("model-update", encode_update, decode_update,
              ModelUpdate(3, 1, {"w": _values(10, (4, 3)), "b": _values(11, (3,)), "s": np.float32([2])}, 17),
              _same_update),
    RoundTrip("stacked-frames", lambda m: encode_frames(m).tobytes(),
              lambda d: decode_frames(np.frombuffer(d, np.uint8).reshape(3, -1), _STACKED.runs)[0],
              _STACKED, lambda a, b: _same_message(a, b) and np.array_equal(a.runs, b.runs)),
]
ROUND_TRIP_IDS = [c.name for c in ROUND_TRIPS]


@pytest.mark.parametrize("case", ROUND_TRIPS, ids=ROUND_TRIP_IDS)
def test_exact_round_trip(case):
    data = case.encode(case.sample)
    assert isinstance(data, bytes) and data == case.encode(case.sample)
    assert case.same(case.decode(data), case.sample)


@pytest.mark.parametrize("case", [c for c in ROUND_TRIPS if c.name != "stacked-frames"],
                         ids=[i for i in ROUND_TRIP_IDS if i != "stacked-frames"])
def test_exact_round_trip_rejects_garbled_bytes(case):
    _garbled_raise_protocol_error(case.encode(case.sample), case.decode, garbled=20,
                                  ends_message=case.ends_message)


def test_wire_codecs_are_message_codecs():
    assert isinstance(wire_codec, MessageCodec)


@pytest.mark.parametrize("msg", [Embedding(-1, 0, _values(12)), Embedding(0, 0, _values(12, (16,))),
                                 Embedding(2**32, 0, _values(12)), Embedding(0, 70000, _values(12)),
                                 Query(0, 0, 70000), ("not", "a", "message")])
def test_wire_codec_rejects_bad_messages(msg):
    with pytest.raises(ProtocolError):
        wire_codec.encode(msg)


def test_wire_codec_rejects_non_finite_values():
    data = bytearray(wire_codec.encode(Gradient(1, 0, _values(13))))
    data[-4:] = np.float32(np.inf).tobytes()
    with pytest.raises(NonFiniteError):
        wire_codec.decode(bytes(data))


def test_gradient_ranked_top_k_keeps_the_entries_of_largest_weighted_magnitude():
    """With a ranking row w, each row r keeps its k entries of largest w_j * |v_rj| (one weight row
    applies to every row, each row ranks its own entries)."""
    codec, v = GradientRankedTopK(0.25), _values(14)
    grad = np.abs(_values(15, (1, SHAPE[1])))
    out = codec.decode(codec.encode(v, grad), SHAPE)
    k = codec.k(SHAPE[1])
    expected = np.zeros_like(v)
    for r in range(v.shape[0]):
        top = np.argsort(-(grad[0] * np.abs(v[r])), kind="stable")[:k]
        expected[r, top] = v[r, top]
    assert np.array_equal(out, expected)
    with pytest.raises(ProtocolError):
        codec.encode(v, np.ones((2, 3), np.float32))  # a ranking that does not fit
