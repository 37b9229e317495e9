"""Private entity alignment in one process: the PSI parties (openmined-psi) against a plain set
intersection, the bytes counted from the encoded messages, and hostile peers (a client lying about
its set size, malformed or out-of-turn messages, a server naming ids the client lacks)."""

import random

import numpy as np
import pytest

pytest.importorskip("private_set_intersection.python", reason="openmined-psi: pip install 'fedstream[psi]'")

from fedstream.alignment import (  # noqa: E402
    AlignmentClient,
    AlignmentServer,
    Intersection,
    PsiReply,
    PsiRequest,
    align,
    decode,
)
from fedstream.alignment.messages import Placement  # noqa: E402
from fedstream.alignment.session import ClientEndpoint  # noqa: E402
from fedstream.errors import ProtocolError  # noqa: E402


def sets(seed: int, n_server: int, sizes: list[int]):
    rng = random.Random(seed)
    universe = [f"id-{i}" for i in range(3 * n_server)] + ["ünï-1", "7", "007", "a,b", "x\ny"]
    server = rng.sample(universe, n_server)
    return server, [rng.sample(universe, n) for n in sizes]


@pytest.mark.parametrize("seed", [0, 1])
def test_psi_finds_exactly_the_plain_intersection(seed):
    server, clients = sets(seed, 300, [250, 40, 600])
    out = align(server, clients, names=["bank", "shop", "telecom"])
    rows = out.server_to_client()
    for m, ids in enumerate(clients):
        shared = sorted(set(server) & set(ids))  # the reference: a plain intersection
        got = out.clients[m]
        assert [server[i] for i in got.rows] == shared  # the server's rows, sorted by id
        assert [ids[i] for i in out.client_rows[m]] == shared  # the client's rows of the same ids
        assert got.n_ids == len(ids)
        expect = np.array([ids.index(v) if v in ids else -1 for v in server])
        np.testing.assert_array_equal(rows[m], expect)


def test_threads_split_the_points_and_find_the_same_intersection():
    server, (ids,) = sets(6, 1500, [1300])
    out = align(server, [ids], workers=3)  # 1500 points: 3 chunks on each side
    assert [server[i] for i in out.clients[0].rows] == sorted(set(server) & set(ids))
    assert [ids[i] for i in out.client_rows[0]] == sorted(set(server) & set(ids))


def test_bytes_are_those_of_the_encoded_messages():
    server, (ids,) = sets(2, 120, [90])
    out = align(server, [ids])
    s, c = AlignmentServer(server), AlignmentClient(ids)
    request = s.request().encode()
    reply = c.reply(decode(request, PsiRequest))
    _, shared = s.conclude("client 0", reply)
    placement = Placement(out.ranks()[0])
    got = out.clients[0]
    # the request, the intersection and the placement do not depend on the keys; the reply's set size
    # may vary by a byte
    assert got.bytes_down == len(request) + len(shared.encode()) + len(placement.encode())
    assert abs(got.bytes_up - len(reply.encode())) <= 8
    assert got.bytes_up > 33 * len(server)  # the server's points, blinded again, come back
    assert out.summary()["bytes"] == got.bytes_down + got.bytes_up


def test_messages_round_trip():
    for msg in (PsiRequest(3, b"abc"), PsiReply(5, b"set", b"resp"), Intersection(("a", "b", "ü")),
                Intersection(())):
        assert decode(msg.encode()) == msg


def exchange():
    server, (ids,) = sets(3, 50, [40])
    s, c = AlignmentServer(server), AlignmentClient(ids)
    return s, c, c.reply(s.request())


def test_a_client_lying_about_its_set_size_is_refused():
    s, _, reply = exchange()
    for lie in (reply.n_items // 2, reply.n_items * 3, 1):
        with pytest.raises(ProtocolError, match=r"bank announced \d+ ids"):
            s.conclude("bank", PsiReply(lie, reply.setup, reply.response))


def test_a_client_set_sized_for_another_rate_is_refused():
    server, (ids,) = sets(4, 50, [40])
    s, c = AlignmentServer(server), AlignmentClient(ids, fpr=1e-3)  # more false positives than agreed
    with pytest.raises(ProtocolError, match="not sized for them"):
        s.conclude("bank", c.reply(s.request()))


@pytest.mark.parametrize("data,match", [
    (b"", "do not start with"),
    (b"XXXX\x01" + bytes(8), "do not start with"),
    (b"FSA1\x09abc", "is not a message"),
    (b"FSA1\x02" + bytes(11), "is not a message"),
    (b"FSA1\x01" + bytes(8), "announces 0 ids"),
    (b"FSA1\x02" + (3).to_bytes(8, "big") + (99).to_bytes(4, "big") + b"short", "announced in"),
    (b"FSA1\x03" + (2).to_bytes(8, "big") + (9).to_bytes(8, "big") + b"not zlib", "do not decompress"),
])
def test_malformed_messages_are_protocol_errors(data, match):
    with pytest.raises(ProtocolError, match=match):
        decode(data)


def test_malformed_payloads_are_protocol_errors():
    s, c, reply = exchange()
    request = s.request()
    with pytest.raises(ProtocolError, match="points, expected"):  # fewer points than announced
        c.reply(PsiRequest(request.n_items + 1, request.payload))
    with pytest.raises(ProtocolError, match="not a PSI Request"):
        c.reply(PsiRequest(2, b"\xff\xff\xff"))
    with pytest.raises(ProtocolError, match="not a PSI ServerSetup"):
        s.conclude("bank", PsiReply(reply.n_items, b"\xff\xff\xff", reply.response))
    with pytest.raises(ProtocolError, match="PSI response: holds"):  # a response cut short
        s.conclude("bank", PsiReply(reply.n_items, reply.setup, reply.response[: len(reply.response) // 2]))
    flipped = bytearray(reply.response)
    assert flipped[-33] in (2, 3)  # the last point's prefix: a compressed point
    flipped[-33] = 5  # no point at all
    with pytest.raises(ProtocolError, match="bank's PSI response"):
        s.conclude("bank", PsiReply(reply.n_items, reply.setup, bytes(flipped)))


def test_a_server_naming_ids_the_client_lacks_is_refused():
    _, c, _ = exchange()
    with pytest.raises(ProtocolError, match="does not hold"):
        c.accept(Intersection(("id-0-never", "zzz")))
    with pytest.raises(ProtocolError, match="not sorted and distinct"):
        decode(Intersection(("b", "a")).encode())


def test_messages_out_of_turn_are_refused():
    server, (ids,) = sets(5, 30, [30])
    s, endpoint = AlignmentServer(server), ClientEndpoint(AlignmentClient(ids))
    with pytest.raises(ProtocolError, match="out of turn"):
        endpoint.handle(Intersection(()).encode())  # before any request
    request = s.request().encode()
    endpoint.handle(request)
    with pytest.raises(ProtocolError, match="out of turn"):
        endpoint.handle(request)  # a second request
    with pytest.raises(ProtocolError, match="expected a PsiReply"):
        decode(request, PsiReply)
