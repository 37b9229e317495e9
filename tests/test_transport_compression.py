"""Compressed links: codecs chosen by spec, exact byte counts, per-client state, strict decoding."""

import itertools

import numpy as np
import pytest

from fedstream.compression import (
    GradientRankedTopK,
    QuantizerState,
    SignCodec,
    ThreeSigmaQuantizer,
    TopK,
)
from fedstream.errors import ConfigError, ProtocolError
from fedstream.transport import (
    CompressedTransport,
    CompressionSpec,
    InProcessTransport,
    encode,
    make_transport,
)
from fedstream.transport.codec import HEADER
from fedstream.transport.compressed import (
    DOWN_CODECS,
    UP_CODECS,
    ClientEndpoint,
    ServerEndpoint,
)
from fedstream.transport.messages import Embedding, Gradient, Query
from fedstream.transport.wire import FRAME_SIZE, QUANT, SIGN, SIGN_PLAIN, SPARSE, frame

SPECS = [CompressionSpec(up=u, down=d, cache=c) for u, d in itertools.product(UP_CODECS, DOWN_CODECS)
         for c in ((False,) if u == "none" else (False, True))]


def arrays(seed, shape=(5, 32), scale=1.0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def expected_up(spec: CompressionSpec, e: np.ndarray, grad: np.ndarray | None) -> bytes:
    """The uplink payload computed with the codecs directly (independent of the link classes)."""
    if spec.up == "topk":
        return TopK(spec.ratio).encode(e)
    ranking = None if grad is None else np.abs(grad).mean(axis=0, keepdims=True)  # per dimension j
    return GradientRankedTopK(spec.ratio).encode(e, ranking)


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: f"{s.up}-{s.down}-{'cache' if s.cache else 'nocache'}")
def test_every_codec_pair_counts_the_encoded_bytes_and_delivers_what_the_codec_decodes(spec):
    tr = make_transport(3, spec)
    assert isinstance(tr, InProcessTransport if spec.is_none else CompressedTransport)
    quant, q_state, last_grad, up_bytes, down_bytes = (
        ThreeSigmaQuantizer(spec.levels),
        QuantizerState(),
        None,
        0,
        0,
    )
    cache = np.zeros((5, 32), np.float32)  # the server's rows of the 5 samples: nothing cached yet
    for t in range(3):
        e, g = arrays(t), arrays(100 + t, scale=1e-3)
        got_e = tr.up(Embedding(t, 2, e), samples=np.arange(10, 15))  # the same 5 samples each round
        if spec.up == "none":
            payload, want_e = None, e
            up_bytes += len(encode(Embedding(t, 2, e)))
        else:
            payload = expected_up(spec, e, last_grad)
            up_bytes += FRAME_SIZE + len(payload)
            want_e = TopK(spec.ratio).decode(payload, e.shape)
            if spec.cache:  # eqs. 2-3: unsent entries keep the last value sent for them
                sent = want_e != 0
                want_e = np.where(sent, want_e, cache)
        np.testing.assert_array_equal(got_e.values, want_e)
        if spec.cache:
            cache = got_e.values.copy()
        got_g = tr.down(Gradient(t, 2, g))
        if spec.down == "none":
            want_g, n = g, len(encode(Gradient(t, 2, g)))
        elif spec.down in ("sign", "sign-scaled"):
            codec = SignCodec(scaled=spec.down == "sign-scaled")
            data = codec.encode(g)
            want_g, n = codec.decode(data, g.shape), FRAME_SIZE + len(data)
        else:
            data = quant.encode(g, q_state)  # uses the previous round's mu, sigma (section 3.2)
            want_g, n = quant.decode(data, g.shape), FRAME_SIZE + len(data)
        down_bytes += n
        np.testing.assert_array_equal(got_g.values, want_g)
        last_grad = got_g.values  # the client ranks by the gradient it received (lossy)
        assert (got_e.round, got_e.client, got_g.round, got_g.client) == (t, 2, t, 2)
    assert tr.ledger.up == [0, 0, up_bytes] and tr.ledger.down == [0, 0, down_bytes]
    assert tr.ledger.messages == [0, 0, 6]


def test_uncompressed_direction_is_byte_identical_to_the_plain_format():
    """A 'none' direction of a compressed transport sends exactly encode(msg); queries too."""
    tr = CompressedTransport(2, CompressionSpec(up="none", down="quant-huffman"))
    e = arrays(0)
    sent = tr.client_ends[1].send(Embedding(4, 1, e))
    assert sent == encode(Embedding(4, 1, e)) and len(sent) == HEADER.size + 4 * e.size
    assert tr.server_ends[0].send(Query(4, 0, 3)) == encode(Query(4, 0, 3))
    back = tr.down(Query(4, 0, 3))
    assert back == Query(4, 0, 3) and tr.ledger.down == [HEADER.size, 0]
    tr2 = CompressedTransport(2, CompressionSpec(up="topk", down="none"))
    g = arrays(1)
    assert tr2.server_ends[1].send(Gradient(4, 1, g)) == encode(Gradient(4, 1, g))


def test_make_transport_keeps_the_plain_transport_for_none():
    assert type(make_transport(2)) is InProcessTransport
    assert type(make_transport(2, CompressionSpec())) is InProcessTransport
    plain = make_transport(2, CompressionSpec())
    e = Embedding(1, 0, arrays(2))
    plain.up(e)
    assert plain.ledger.up == [len(encode(e)), 0]


def test_compressed_frame_layout():
    spec = CompressionSpec(up="topk", down="sign")
    e, g = arrays(3), arrays(4)
    up = ClientEndpoint(1, spec).send(Embedding(9, 1, e))
    down = ServerEndpoint(1, spec).send(Gradient(9, 1, g))
    assert HEADER.unpack_from(up) == (4, 9, 1, 5, 32) and up[HEADER.size] == SPARSE
    assert up[FRAME_SIZE:] == TopK(0.125).encode(e)
    assert HEADER.unpack_from(down) == (5, 9, 1, 5, 32) and down[HEADER.size] == SIGN_PLAIN
    assert down[FRAME_SIZE:] == SignCodec(scaled=False).encode(g) and len(down) == FRAME_SIZE + 5 * 32 // 8
    scaled = ServerEndpoint(1, CompressionSpec(down="sign-scaled")).send(Gradient(9, 1, g))
    assert scaled[HEADER.size] == SIGN and scaled[FRAME_SIZE:] == SignCodec(scaled=True).encode(g)


def test_state_is_per_client():
    """Each client's quantiser statistics and cache are its own (no state shared across links)."""
    spec = CompressionSpec(up="topk", down="quant-huffman", cache=True)
    tr = CompressedTransport(2, spec)
    tr.down(Gradient(0, 0, arrays(0, scale=1.0)))
    g1 = arrays(1, scale=1e-4)
    first_for_client1 = tr.down(Gradient(0, 1, g1)).values
    fresh = ThreeSigmaQuantizer(24)  # client 1's first message: stats of its own gradient, not client 0's
    np.testing.assert_array_equal(
        first_for_client1, fresh.decode(fresh.encode(g1, QuantizerState()), g1.shape)
    )
    ids = np.arange(5)
    tr.up(Embedding(0, 0, arrays(5)), samples=ids)
    e1 = arrays(6)  # the same sample ids on client 1's link: its cache holds nothing yet
    np.testing.assert_array_equal(tr.up(Embedding(0, 1, e1), samples=ids).values,
                                  TopK(0.125).decode(TopK(0.125).encode(e1), e1.shape))


def test_fork_copies_state_and_starts_a_fresh_ledger():
    import copy

    tr = CompressedTransport(1, CompressionSpec(up="topk-grad", down="quant-huffman", cache=True))
    for t in range(4, 6):  # online windows of 5 rows: rounds t-4 .. t
        tr.up(Embedding(t, 0, arrays(t)))
        tr.down(Gradient(t, 0, arrays(10 + t)))
    control = copy.deepcopy(tr)  # what the original must still behave like after the fork is used
    twin = tr.fork()
    assert twin.ledger.total == 0 and tr.ledger.total > 0
    twin.down(Gradient(6, 0, 50.0 * arrays(30)))  # other values and scale: new ranking, sigma, cache
    twin.up(Embedding(6, 0, arrays(31)))
    e, g = arrays(20), arrays(21)
    np.testing.assert_array_equal(tr.down(Gradient(6, 0, g)).values, control.down(Gradient(6, 0, g)).values)
    np.testing.assert_array_equal(tr.up(Embedding(6, 0, e)).values, control.up(Embedding(6, 0, e)).values)
    shared = CompressedTransport(1, CompressionSpec(up="topk-grad", down="quant-huffman", cache=True))
    shared.client_ends, shared.server_ends = tr.client_ends, tr.server_ends  # what a shallow fork would be
    shared.down(Gradient(7, 0, 50.0 * arrays(40)))
    assert not np.array_equal(tr.down(Gradient(7, 0, g)).values, control.down(Gradient(7, 0, g)).values)
    plain = InProcessTransport(3)
    plain.up(Embedding(0, 1, e))
    assert plain.fork().ledger.total == 0 and isinstance(plain.fork(), InProcessTransport)


def test_state_dict_restores_every_link():
    spec = CompressionSpec(up="topk-grad", down="quant-huffman", cache=True, levels=8, ratio=0.25)
    a, b = CompressedTransport(2, spec), CompressedTransport(2, spec)
    for t in range(4, 7):
        for m in range(2):
            a.up(Embedding(t, m, arrays(t + 10 * m)))
            a.down(Gradient(t, m, arrays(50 + t + 10 * m, scale=0.01)))
    b.load_state_dict(a.state_dict())
    for m in range(2):
        e, g = arrays(90 + m), arrays(95 + m, scale=0.01)
        assert b.client_ends[m].send(Embedding(7, m, e)) == a.client_ends[m].send(Embedding(7, m, e))
        assert b.server_ends[m].send(Gradient(7, m, g)) == a.server_ends[m].send(Gradient(7, m, g))
        data = a.client_ends[m].send(Embedding(7, m, e))
        filled = a.server_ends[m].receive(data).values
        assert np.count_nonzero(filled) > np.count_nonzero(
            TopK(0.25).decode(data[FRAME_SIZE:], e.shape)
        )  # cache hits
        np.testing.assert_array_equal(b.server_ends[m].receive(data).values, filled)


def test_ranking_weighs_each_rows_entries_by_the_mean_gradient_magnitude_of_their_dimension():
    spec = CompressionSpec(up="topk-grad", ratio=0.25)
    tr = CompressedTransport(1, spec)
    g = np.zeros((3, 8), np.float32)
    g[:, [1, 6]] = 1.0  # columns 1 and 6 matter most on average
    g[0, 3] = -2.5  # the largest single entry, but a smaller mean |g| (2.5 / 3 < 1)
    g[:, [0, 2, 4, 5, 7]] = 0.01
    tr.up(Embedding(0, 0, arrays(0, (3, 8))))
    tr.down(Gradient(0, 0, g))
    w = np.abs(g).mean(axis=0)
    for rows in (3, 2):  # also for a smaller (last) batch
        e = arrays(rows, (rows, 8))
        got = tr.up(Embedding(1, 0, e)).values
        for r in range(rows):
            assert set(np.flatnonzero(got[r])) == set(np.argsort(-(w * np.abs(e[r])), kind="stable")[:2])


def test_two_rows_of_one_batch_send_different_elements():
    """The per-element ranking: each row ranks its own entries, so rows of one message may differ
    (the column-mean ranking sent the same columns in every row)."""
    tr = CompressedTransport(1, CompressionSpec(up="topk-grad", ratio=0.25))
    tr.up(Embedding(0, 0, arrays(0, (2, 8))))
    tr.down(Gradient(0, 0, np.ones((2, 8), np.float32)))  # equal weights: the rows' own |E| decides
    e = np.zeros((2, 8), np.float32)
    e[0, [0, 1]] = [3.0, -2.0]
    e[1, [5, 6]] = [1.5, 4.0]
    e += np.float32(0.01)
    got = tr.up(Embedding(1, 0, e)).values
    assert set(np.flatnonzero(got[0])) == {0, 1} and set(np.flatnonzero(got[1])) == {5, 6}


@pytest.mark.parametrize(
    "spec_from,spec_to,match",
    [
        (
            CompressionSpec(down="sign"),
            CompressionSpec(down="quant-huffman"),
            r"signSGD \(\+-1\), this link is configured for 3-sigma",
        ),
        (
            CompressionSpec(down="sign-scaled"),
            CompressionSpec(down="sign"),
            r"scaled signSGD, this link is configured for signSGD",
        ),
        (CompressionSpec(down="sign"), CompressionSpec(up="topk"), "expects uncompressed messages only"),
    ],
)
def test_receiver_rejects_a_codec_it_was_not_configured_for(spec_from, spec_to, match):
    data = ServerEndpoint(0, spec_from).send(Gradient(0, 0, arrays(0)))
    with pytest.raises(ProtocolError, match=match):
        ClientEndpoint(0, spec_to).receive(data)


def test_malformed_compressed_messages_raise():
    spec = CompressionSpec(up="topk", down="quant-huffman")
    client, server = ClientEndpoint(0, spec), ServerEndpoint(0, spec)
    good = server.send(Gradient(0, 0, arrays(0)))
    with pytest.raises(ProtocolError, match="shorter than"):
        client.receive(good[:FRAME_SIZE - 1])
    with pytest.raises(ProtocolError):  # truncated Huffman bit string
        client.receive(good[:-1])
    bad_codec = good[:HEADER.size] + bytes([77]) + good[FRAME_SIZE:]
    with pytest.raises(ProtocolError, match="unknown codec id 77"):
        client.receive(bad_codec)
    with pytest.raises(ProtocolError, match="for client 0 arrived on client 1"):
        ClientEndpoint(1, spec).receive(good)
    with pytest.raises(ProtocolError, match="arrived at the client end"):  # an embedding sent to a client
        client.receive(ClientEndpoint(0, spec).send(Embedding(0, 0, arrays(1))))
    wrong_shape = frame(Gradient(0, 0, np.zeros((2, 3), np.float32)), QUANT, good[FRAME_SIZE:])
    with pytest.raises(ProtocolError, match="entries"):
        client.receive(wrong_shape)
    with pytest.raises(ProtocolError, match="names client 5"):
        CompressedTransport(2, spec).up(Embedding(0, 5, arrays(2)))


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"up": "gzip"}, "compression.up = 'gzip': expected one of none, topk, topk-grad"),
        (
            {"down": "topk"},
            "compression.down = 'topk': expected one of none, sign, sign-scaled, quant-huffman",
        ),
        ({"up": "topk", "ratio": 0.0}, r"compression.ratio = 0.0: expected a number in \(0, 1\]"),
        ({"up": "topk", "ratio": True}, "compression.ratio"),
        ({"down": "quant-huffman", "levels": 255}, "compression.levels = 255: expected an integer in 1..254"),
        ({"cache": "yes", "up": "topk"}, "compression.cache = 'yes': expected true or false"),
        ({"cache": True}, "compression.cache = true needs compression.up = topk or topk-grad"),
    ],
)
def test_spec_validation_names_the_key_and_allowed_values(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        CompressionSpec(**kwargs)


def test_spec_from_flat_config():
    spec = CompressionSpec.from_config(
        {
            "compression.up": "topk-grad",
            "compression.cache": True,
            "compression.down": "quant-huffman",
            "compression.levels": 12,
            "seed": 3,
        }
    )
    # the run's seed keys the stochastic rounding's draws
    assert spec == CompressionSpec(up="topk-grad", down="quant-huffman", cache=True, levels=12, seed=3)
    assert CompressionSpec.from_config({}) == CompressionSpec()
