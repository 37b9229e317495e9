"""The gRPC runtime's frames (issue 19): an envelope round-trips exactly, and a received frame is
checked before anything is decoded: size limit, header, lengths adding up, info a JSON object of
scalars, arrays' dtypes and sizes. A message past the config's limit fails with a clear error."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from fedstream.config import load_config
from fedstream.deploy.records import Envelope
from fedstream.deploy.runtimes import grpc_wire as wire
from fedstream.errors import ProtocolError

LIMIT = 1 << 20


def test_an_envelope_round_trips_exactly():
    env = Envelope("round", 7, [b"abc", b"", b"\x00" * 300], {"events": 2, "grad_rounds": [5, 6], "x": 0.1,
                                                              "keep": True, "s": "é"},
                   {"param0": np.arange(6, dtype=np.float32).reshape(2, 3), "n": np.array([1, 2], np.int64)})
    got = wire.decode(wire.encode(wire.REPLY, 42, env, limit=LIMIT), limit=LIMIT)
    assert got.type == wire.REPLY and got.seq == 42
    e = got.env
    assert (e.kind, e.round, e.parts, e.info) == (env.kind, env.round, env.parts, env.info)
    assert set(e.arrays) == {"param0", "n"}
    for k, v in env.arrays.items():
        assert e.arrays[k].dtype == v.dtype and np.array_equal(e.arrays[k], v)


def _frame() -> bytes:
    return wire.encode(wire.REQUEST, 1, Envelope("setup", 0, [b"ab"], {"a": 1}), limit=LIMIT)


def _set(frame: bytes, offset: int, value: int) -> bytes:
    return frame[:offset] + bytes([value]) + frame[offset + 1:]


# the request above: b"FS", version, type|kind, then varints seq 1, round 0, 1 part, info 5 bytes,
# the part's length 2 (offsets 4..8), then info (offsets 9..13: key 0, name length 1, "a", tag 3,
# zigzag 2) and the part
@pytest.mark.parametrize("spoil, match", [
    (lambda f: f[:3], "magic"),
    (lambda f: b"XY" + f[2:], "magic"),
    (lambda f: _set(f, 2, 2), "version"),
    (lambda f: _set(f, 3, 0x92), "type"),
    (lambda f: _set(f, 3, 0x2F), "kind"),
    (lambda f: _set(f, 3, 0x2A), "add up"),  # says arrays follow
    (lambda f: _set(f, 3, 0x20), "kind"),
    (lambda f: _set(f, 3, 0x51), "kind"),
    (lambda f: f[:6] + b"\xff\xff\xff\xff\x0f" + f[7:], "parts"),
    (lambda f: _set(f, 8, 3), "add up"),
    (lambda f: f + b"x", "add up"),
    (lambda f: _set(f, 7, 1), "add up"),
    (lambda f: f[:5] + b"\xff" * 10 + f[6:], "64 bits"),
    (lambda f: f[:6], "ends in the middle"),
    (lambda f: _set(f, 9, 200), "key code"),
    (lambda f: _set(f, 12, 9), "value tag"),
    (lambda f: _set(f, 11, 0xC3), "UTF-8"),
])
def test_a_malformed_frame_is_refused_before_decoding(spoil, match):
    assert wire.decode(_frame(), limit=LIMIT).env.info == {"a": 1}
    with pytest.raises(ProtocolError, match=match):
        wire.decode(spoil(_frame()), limit=LIMIT)


def _info_frame(info: bytes) -> bytes:
    return b"FS\x01\x32" + bytes([1, 0, 0, len(info)]) + info


@pytest.mark.parametrize("info, match", [
    (b"\x01\x03\x02\x01\x03\x04", "twice"),        # events twice
    (b"\x02\x07\x01\x07\x00", "inside a list"),     # a list in a list
    (b"\x02\x06\x05\x01", "past the end"),          # 5 integers announced, 1 there
    (b"\x00\x05ab", "past the end"),                # a name longer than the frame
    (b"\x01\x04\x00\x00", "past the end"),          # a double cut short
])
def test_info_entries_are_checked(info, match):
    with pytest.raises(ProtocolError, match=match):
        wire.decode(_info_frame(info), limit=LIMIT)


def test_arrays_are_checked():
    env = Envelope("finish", 0, [], {}, {"w": np.zeros(4, np.float32)})
    frame = wire.encode(wire.REPLY, 1, env, limit=LIMIT)
    with pytest.raises(ProtocolError, match="dtype code"):  # the dtype code byte
        wire.decode(frame[:len(frame) - 16 - 8 - 2] + b"\x4d" + frame[len(frame) - 16 - 8 - 1:], limit=LIMIT)
    with pytest.raises(ProtocolError, match="past the frame"):  # a forged dimension
        forged = struct.pack("<Q", 2**40)
        wire.decode(frame[:len(frame) - 16 - 8] + forged + frame[len(frame) - 16:], limit=LIMIT)
    with pytest.raises(ProtocolError, match="cannot travel"):
        wire.encode(wire.REPLY, 1, Envelope("finish", 0, [], {}, {"o": np.array([object()])}), limit=LIMIT)


def test_the_limit_follows_the_configs_shapes_and_is_explained():
    small = load_config(None, {"network.batch": 1})
    big = load_config(None, {"network.batch": 4096})
    assert wire.message_limit(small) < wire.message_limit(big)
    assert wire.message_limit(small, audit=True) > wire.message_limit(small)
    env = Envelope("round", 0, [b"\0" * 5000])
    with pytest.raises(ProtocolError, match="exceeds the message limit of 4096 bytes set from the config"):
        wire.encode(wire.REQUEST, 1, env, limit=4096)
    with pytest.raises(ProtocolError, match="over the message limit"):
        wire.decode(wire.encode(wire.REQUEST, 1, env, limit=LIMIT), limit=4096)


def test_info_a_frame_cannot_carry_is_refused_at_the_sender():
    for info in ({"b": b"bytes"}, {"d": {"x": 1}}, {"l": [[1]]}):
        with pytest.raises(ProtocolError, match="cannot travel"):
            wire.encode(wire.REQUEST, 1, Envelope("round", 0, [], info), limit=LIMIT)


def test_a_batch_request_costs_a_few_bytes_beyond_its_parts():
    """B = 1 of online VFL: a gradient and a query down, an embedding up."""
    request = Envelope("round", 1234, [b"g" * 300, b"q" * 20], {"events": 1, "grad_rounds": [1233]})
    reply = Envelope("round", 1234, [b"e" * 300], {"active": [1]})
    assert len(wire.encode(wire.REQUEST, 99, request, limit=LIMIT)) - 320 <= 20
    assert len(wire.encode(wire.REPLY, 99, reply, limit=LIMIT)) - 300 <= 15
