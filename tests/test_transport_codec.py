"""Message encoding round-trips, counts what it encodes and rejects malformed bytes."""

import numpy as np
import pytest

from fedstream.errors import ProtocolError
from fedstream.transport import InProcessTransport, decode, encode
from fedstream.transport.codec import HEADER
from fedstream.transport.messages import Embedding, Gradient, Query


def test_roundtrip_each_message_kind():
    v = np.arange(12, dtype=np.float32).reshape(3, 4)
    for msg in (Embedding(7, 2, v), Gradient(9, 1, v), Query(5, 3, rows=10)):
        back = decode(encode(msg))
        assert type(back) is type(msg) and back.round == msg.round and back.client == msg.client
        if not isinstance(msg, Query):
            np.testing.assert_array_equal(back.values, v)
        else:
            assert back.rows == 10


def test_sizes_are_header_plus_float32_payload():
    assert len(encode(Embedding(0, 0, np.zeros((1, 64), np.float32)))) == HEADER.size + 256
    assert len(encode(Query(0, 0))) == HEADER.size


def test_transport_ledger_counts_encoded_bytes():
    tr = InProcessTransport(2)
    e = Embedding(1, 1, np.ones((2, 5), np.float32))
    tr.up(e)
    tr.down(Query(1, 0))
    assert tr.ledger.up == [0, len(encode(e))]
    assert tr.ledger.down == [HEADER.size, 0]
    assert tr.ledger.total == len(encode(e)) + HEADER.size


@pytest.mark.parametrize(
    "data,match",
    [
        (b"\x01\x00", "shorter than"),
        (HEADER.pack(9, 0, 0, 0, 0), "unknown message kind"),
        (HEADER.pack(1, 0, 0, 2, 2) + b"\x00" * 12, "holds 23 bytes"),
        (HEADER.pack(1, 0, 0, 1, 1) + np.array([np.nan], np.float32).tobytes(), "NaN"),
    ],
)
def test_decode_rejects_malformed(data, match):
    with pytest.raises(ProtocolError, match=match):
        decode(data)
