"""Contract checks over every transport (the :class:`fedstream.seams.Transport` seam and its kin).

Registry: one line per transport configuration. For each message of a short exchange (embedding
up, query down, embedding up, gradient down, for every client), the checks are: the ledger grows
by exactly the length of the bytes the link's ends encode for it, and by one message; the receiver
gets exactly what those bytes decode to; the links' state and the ledger saved and loaded into a
fresh transport continue as the original; a fork leaves the original untouched; a message for a
client outside the transport raises ``ProtocolError``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

from fedstream.errors import ConfigError, ProtocolError
from fedstream.seams import ForkableTransport, LinkEnd, StackedTransport, Stateful, Transport
from fedstream.transport import CompressionSpec, encode, make_transport
from fedstream.transport.compressed import ClientEndpoint, CompressedTransport, ServerEndpoint
from fedstream.transport.ledger import ByteLedger
from fedstream.transport.messages import Embedding, Gradient, Query
from fedstream.transport.stacked import StackTransport, encode_frames
from fedstream.transport.tensors import ModelTransport, decode_update, encode_update
from fedstream.transport.updates import ModelUpdate

N_CLIENTS, WIDTH = 3, 16


@dataclass
class TransportCase:
    name: str
    spec: CompressionSpec = field(default_factory=CompressionSpec)

    def make(self):
        return make_transport(N_CLIENTS, self.spec)


TRANSPORTS = [
    TransportCase("in-process"),
    TransportCase("topk", CompressionSpec(up="topk", ratio=0.25)),
    TransportCase("topk-cache", CompressionSpec(up="topk", ratio=0.25, cache=True)),
    TransportCase("topk-grad", CompressionSpec(up="topk-grad", ratio=0.25)),
    TransportCase("sign", CompressionSpec(down="sign")),
    TransportCase("sign-scaled", CompressionSpec(down="sign-scaled")),
    TransportCase("quant-huffman", CompressionSpec(down="quant-huffman", levels=24)),
    TransportCase("topk-grad-cache+quant", CompressionSpec(up="topk-grad", down="quant-huffman", cache=True)),
    TransportCase("topk+sign-scaled", CompressionSpec(up="topk", down="sign-scaled", ratio=0.5)),
]
IDS = [c.name for c in TRANSPORTS]


class Twin:
    """The link ends of every client, built from the same spec: the bytes a transport must count."""

    def __init__(self, spec: CompressionSpec):
        self.client_ends = [ClientEndpoint(m, spec) for m in range(N_CLIENTS)]
        self.server_ends = [ServerEndpoint(m, spec) for m in range(N_CLIENTS)]

    def carry(self, direction: str, msg):
        src, dst = (self.client_ends, self.server_ends) if direction == "up" else (
            self.server_ends, self.client_ends)
        data = src[msg.client].send(msg)
        return data, dst[msg.client].receive(data)


def _exchange(rounds: range, window: int = 1):
    """(direction, message) of ``rounds`` of the online protocol, every client: activated clients
    send an embedding and get a gradient, passive ones get a query and answer it."""
    for t in rounds:
        rng, rows = np.random.default_rng(t), min(window, t + 1)  # SLR: the window fills up first
        for m in range(N_CLIENTS):
            emb = Embedding(t, m, rng.normal(size=(rows, WIDTH)).astype(np.float32))
            if (t + m) % 2:
                yield "down", Query(t, m, rows)
                yield "up", emb
            else:
                yield "up", emb
                yield "down", Gradient(t, m, rng.normal(size=(rows, WIDTH)).astype(np.float32) * 1e-2)


def _same(a, b) -> bool:
    if type(a) is not type(b) or a[:2] != b[:2]:
        return False
    return a.rows == b.rows if isinstance(a, Query) else np.array_equal(a.values, b.values)


def _play(transport, messages) -> list:
    return [getattr(transport, direction)(msg) for direction, msg in messages]


@pytest.mark.parametrize("case", TRANSPORTS, ids=IDS)
def test_transport_satisfies_its_protocols(case):
    t = case.make()
    assert isinstance(t, Transport) and isinstance(t, ForkableTransport)
    assert isinstance(t.ledger, ByteLedger) and isinstance(t.ledger, Stateful)
    if isinstance(t, CompressedTransport):
        assert isinstance(t, Stateful)
        assert all(isinstance(end, LinkEnd) for end in t.client_ends + t.server_ends)
    else:
        assert case.spec.is_none


@pytest.mark.parametrize("rows", [1, 3])
@pytest.mark.parametrize("case", TRANSPORTS, ids=IDS)
def test_bytes_counted_equal_bytes_encoded(case, rows):
    transport, twin = case.make(), Twin(case.spec)
    for direction, msg in _exchange(range(4), rows):
        before = transport.ledger.state_dict()
        received = getattr(transport, direction)(msg)
        data, expected = twin.carry(direction, msg)
        after = transport.ledger.state_dict()
        grown = {k: after[k] - before[k] for k in after}
        other = "down" if direction == "up" else "up"
        assert grown[direction][msg.client] == len(data) and grown["messages"][msg.client] == 1
        assert grown[direction].sum() == len(data) and not grown[other].any()
        assert _same(received, expected)
        if case.spec.is_none:  # the plain format: exactly the wire codec's bytes, a lossless round trip
            assert data == encode(msg) and _same(received, msg)
    summary = transport.ledger.summary()
    assert summary["total"] == summary["up"] + summary["down"] == transport.ledger.total


@pytest.mark.parametrize("case", TRANSPORTS, ids=IDS)
def test_state_save_load_equals_continuing(case):
    whole = case.make()
    out_whole = _play(whole, _exchange(range(9)))
    first = case.make()
    _play(first, _exchange(range(5)))
    resumed = case.make()
    resumed.ledger.load_state_dict(first.ledger.state_dict())
    if isinstance(first, Stateful):
        resumed.load_state_dict(first.state_dict())
    out_resumed = _play(resumed, _exchange(range(5, 9)))
    assert all(_same(a, b) for a, b in zip(out_whole[-len(out_resumed):], out_resumed))
    assert whole.ledger.summary() == resumed.ledger.summary()
    if isinstance(whole, Stateful):
        a, b = whole.state_dict(), resumed.state_dict()
        assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("case", TRANSPORTS, ids=IDS)
def test_fork_leaves_the_original_untouched(case):
    transport, twin = case.make(), case.make()
    _play(transport, _exchange(range(3)))
    _play(twin, _exchange(range(3)))
    fork = transport.fork()
    assert isinstance(fork, type(transport)) and fork.ledger.total == 0
    _play(fork, _exchange(range(3, 6)))
    assert transport.ledger.summary() == twin.ledger.summary()
    rest = range(3, 6)
    assert all(_same(a, b) for a, b in zip(_play(transport, _exchange(rest)), _play(twin, _exchange(rest))))


@pytest.mark.parametrize("case", TRANSPORTS, ids=IDS)
@pytest.mark.parametrize("client", [N_CLIENTS, 70000])
def test_message_for_an_unknown_client_raises_protocol_error(case, client):
    transport = case.make()
    with pytest.raises(ProtocolError):
        transport.up(Embedding(0, client, np.zeros((1, WIDTH), np.float32)))
    with pytest.raises(ProtocolError):
        transport.down(Gradient(0, client, np.zeros((1, WIDTH), np.float32)))


@pytest.mark.parametrize("case", TRANSPORTS, ids=IDS)
def test_message_that_does_not_encode_raises_protocol_error(case):
    transport = case.make()
    with pytest.raises(ProtocolError):
        transport.up(Embedding(-1, 0, np.zeros((1, WIDTH), np.float32)))
    with pytest.raises(ProtocolError):
        transport.down(Gradient(0, 0, np.zeros(WIDTH, np.float32)))  # not 2-D
    assert transport.ledger.total == 0


def test_bad_compression_settings_raise_config_error():
    for bad in ({"up": "zip"}, {"down": "topk"}, {"ratio": 0}, {"levels": 255}, {"cache": 1},
                {"cache": True}):
        with pytest.raises(ConfigError):
            CompressionSpec(**bad)
    with pytest.raises(ConfigError):
        CompressedTransport(2, {"up": "topk"})


def test_link_end_rejects_another_clients_bytes():
    spec = CompressionSpec(up="topk", down="sign")
    data = ClientEndpoint(1, spec).send(Embedding(0, 1, np.ones((1, WIDTH), np.float32)))
    with pytest.raises(ProtocolError):
        ServerEndpoint(0, spec).receive(data)
    with pytest.raises(ProtocolError):  # a compressed embedding arriving at a client's end
        ClientEndpoint(1, spec).receive(data)


# --- the model transport of CHFL ------------------------------------------------------------------
def _update(t: int, m: int) -> ModelUpdate:
    rng = np.random.default_rng([t, m])
    return ModelUpdate(t, m, {"w": rng.normal(size=(4, 3)).astype(np.float32),
                              "b": rng.normal(size=3).astype(np.float32)}, 10 + m)


def test_model_transport_counts_the_bytes_it_encodes():
    transport = ModelTransport(N_CLIENTS)
    assert isinstance(transport, Transport)
    for t in range(2):
        for m in range(N_CLIENTS):
            for direction in ("down", "up"):
                msg = _update(t, m)
                before = transport.ledger.state_dict()
                got = getattr(transport, direction)(msg)
                data = encode_update(msg)
                assert transport.ledger.state_dict()[direction][m] - before[direction][m] == len(data)
                back = decode_update(data)
                assert all(np.array_equal(got.tensors[k], back.tensors[k]) for k in msg.tensors)
    with pytest.raises(ProtocolError):
        transport.up(_update(0, N_CLIENTS))
    with pytest.raises(ProtocolError):
        transport.up(ModelUpdate(0, 0, {}, 1))


# --- the stacked transport of K runs ---------------------------------------------------------------
def test_stacked_transport_credits_each_run_its_own_frames():
    k, runs = 3, np.array([0, 2])
    ledgers = [ByteLedger(N_CLIENTS) for _ in range(k)]
    transport = StackTransport(ledgers)
    assert isinstance(transport, StackedTransport)
    rng = np.random.default_rng(0)
    expected = [ByteLedger(N_CLIENTS) for _ in range(k)]
    for t in range(3):
        for m in range(N_CLIENTS):
            values = rng.normal(size=(2, 1, WIDTH)).astype(np.float32)
            for direction, msg in (("down", Query(t, m, 1, runs)), ("up", Embedding(t, m, values, runs)),
                                   ("down", Gradient(t, m, values * 0.5, runs))):
                got = getattr(transport, direction)(msg)
                frames = encode_frames(msg)
                for j, r in enumerate(runs):
                    single = msg._replace(runs=None) if isinstance(msg, Query) else msg._replace(
                        runs=None, values=msg.values[j])
                    assert frames[j].tobytes() == encode(single)
                    expected[r].add(m, direction, len(encode(single)))
                if not isinstance(msg, Query):
                    assert np.array_equal(got.values, msg.values)
    transport.write_back()
    assert [lg.summary() for lg in ledgers] == [lg.summary() for lg in expected]
    with pytest.raises(ProtocolError):
        transport.up(Embedding(0, 0, np.zeros((1, WIDTH), np.float32)))  # no runs
