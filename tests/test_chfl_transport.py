"""ModelUpdate bytes: round trip, sizes, per-client/direction counting, malformed input."""

import struct

import numpy as np
import pytest

from fedstream.errors import ProtocolError
from fedstream.transport.tensors import (
    HEADER,
    ModelTransport,
    decode_update,
    encode_update,
)
from fedstream.transport.updates import ModelUpdate


def update(client=1, rnd=7):
    rng = np.random.default_rng(0)
    return ModelUpdate(rnd, client, {"layers.0.weight": rng.standard_normal((4, 3)).astype(np.float32),
                                     "layers.0.bias": np.arange(4, dtype=np.float32),
                                     "scalar": np.full((), 2.5, np.float32)}, 1814)


def test_round_trip():
    msg = update()
    back = decode_update(encode_update(msg))
    assert (back.round, back.client, back.n_samples) == (7, 1, 1814)
    assert list(back.tensors) == list(msg.tensors)
    for k, v in msg.tensors.items():
        assert back.tensors[k].dtype == np.float32 and back.tensors[k].shape == v.shape
        np.testing.assert_array_equal(back.tensors[k], v)


def test_size_is_header_names_shapes_and_float32_payload():
    msg = update()
    desc = sum(2 + len(k) + 1 + 4 * v.ndim for k, v in msg.tensors.items())
    values = sum(v.size for v in msg.tensors.values())
    assert len(encode_update(msg)) == HEADER.size + desc + 4 * values


def test_transport_counts_per_client_and_direction():
    tr = ModelTransport(3)
    a, b = update(client=2), update(client=0)
    tr.up(a)
    tr.down(b)
    tr.down(b)
    n = len(encode_update(a))
    assert tr.ledger.up == [0, 0, n] and tr.ledger.down == [2 * n, 0, 0]
    assert tr.ledger.summary()["messages"] == 3
    with pytest.raises(ProtocolError, match=r"client 3: expected 0\.\.2"):
        tr.up(update(client=3))


def corrupt(data: bytes, offset: int, value: bytes) -> bytes:
    return data[:offset] + value + data[offset + len(value):]


@pytest.mark.parametrize("make,match", [
    (lambda d: d[:5], "shorter than the 13-byte header"),
    (lambda d: corrupt(d, 0, b"\x01"), r"message kind 1: expected 16"),
    (lambda d: d[:-4], r"shapes say 17 float32 values .* but the message holds"),
    (lambda d: d + b"\x00" * 4, r"but the message holds"),
    (lambda d: d[:HEADER.size + 5], r"truncated while reading"),
    (lambda d: corrupt(d, len(d) - 4, struct.pack("<f", float("nan"))), r"tensor 'scalar' holds NaN or inf"),
    (lambda d: corrupt(d, HEADER.size + 2, b"\xff\xfe"), r"tensor 0: name is not UTF-8"),
])
def test_decode_rejects_malformed(make, match):
    with pytest.raises(ProtocolError, match=match):
        decode_update(make(encode_update(update())))


def test_duplicate_names_and_type_checks():
    one = ModelUpdate(0, 0, {"a": np.ones(2, np.float32)}, 1)
    data = encode_update(one)
    two = HEADER.pack(16, 0, 0, 1, 2) + data[HEADER.size:HEADER.size + 8] * 2 + b"\x00" * 16
    with pytest.raises(ProtocolError, match=r"tensor 1: expected a new non-empty name, found 'a'"):
        decode_update(two)
    with pytest.raises(ProtocolError, match=r"expected a ModelUpdate, received dict"):
        encode_update({"a": 1})
    with pytest.raises(
        ProtocolError, match=r"ModelUpdate.tensors\['a'\]: expected a numpy array, received list"
    ):
        encode_update(ModelUpdate(0, 0, {"a": [1.0]}, 1))
    with pytest.raises(ProtocolError, match=r"ModelUpdate.n_samples: expected an integer >= 0, received -1"):
        encode_update(ModelUpdate(0, 0, {"a": np.ones(1)}, -1))
    with pytest.raises(ProtocolError, match=r"round 4294967296 does not fit the u32 field"):
        encode_update(ModelUpdate(2**32, 0, {"a": np.ones(1)}, 1))
