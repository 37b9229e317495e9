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


# the request above: mark and version 0xF2, info|type|kind 0xA1, then varints seq 1, round - seq
# (zigzag -1 = 1), 1 part, info 5 bytes, the part's length 2 (offsets 2..6), then info (offsets
# 7..11: key 0, name length 1, "a", tag 3, zigzag 2) and the part
@pytest.mark.parametrize("spoil, match", [
    (lambda f: f[:1], "mark and version"),
    (lambda f: b"FS" + f[2:], "mark and version"),
    (lambda f: _set(f, 0, 0xF1), "version 2"),
    (lambda f: _set(f, 1, 0xF1), "type"),
    (lambda f: _set(f, 1, 0xA7), "kind"),
    (lambda f: _set(f, 1, 0xA9), "add up"),  # says arrays follow
    (lambda f: _set(f, 1, 0x21), "add up"),  # says no info follows
    (lambda f: _set(f, 1, 0xA0), "kind"),
    (lambda f: _set(f, 1, 0xD1), "kind"),
    (lambda f: _set(f, 3, 3), "round -1"),
    (lambda f: f[:4] + b"\xff\xff\xff\xff\x0f" + f[5:], "parts"),
    (lambda f: _set(f, 6, 3), "add up"),
    (lambda f: f + b"x", "add up"),
    (lambda f: _set(f, 5, 1), "add up"),
    (lambda f: f[:3] + b"\xff" * 10 + f[4:], "64 bits"),
    (lambda f: f[:4], "ends in the middle"),
    (lambda f: _set(f, 7, 200), "key code"),
    (lambda f: _set(f, 10, 9), "value tag"),
    (lambda f: _set(f, 9, 0xC3), "UTF-8"),
])
def test_a_malformed_frame_is_refused_before_decoding(spoil, match):
    assert wire.decode(_frame(), limit=LIMIT).env.info == {"a": 1}
    with pytest.raises(ProtocolError, match=match):
        wire.decode(spoil(_frame()), limit=LIMIT)


def _info_frame(info: bytes) -> bytes:
    return b"\xF2\xA1" + bytes([1, 1, 0, len(info)]) + info  # a setup request, sequence 1, round 0


@pytest.mark.parametrize("info, match", [
    (b"\x01\x03\x02\x01\x03\x04", "twice"),        # events twice
    (b"\x02\x07\x01\x07\x00", "inside a list"),     # a list in a list
    (b"\x02\x07\x01\x08\x00", "inside a list"),     # a list of differences in a list
    (b"\x02\x08\x05\x01", "past the end"),          # 5 differences announced, 1 there
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
    """B = 1 of online VFL: a gradient and a query down, an embedding up (the sequence number moves
    with the round; the held gradient's round is the one before)."""
    request = Envelope("round", 1234, [b"g" * 300, b"q" * 20], {"events": 1, "grad_rounds": [1233]})
    reply = Envelope("round", 1234, [b"e" * 300], {"active": [1]})
    assert len(wire.encode(wire.REQUEST, 1236, request, limit=LIMIT)) - 320 == 17  # version 1: 20
    assert len(wire.encode(wire.REPLY, 1236, reply, limit=LIMIT)) - 300 == 13  # version 1: 15
    assert len(wire.encode(wire.REPLY, 1236, Envelope("round", 1234, [b"e" * 300]), limit=LIMIT)) - 300 == 8


def test_lists_of_integers_round_trip_in_either_form():
    """Short int lists travel as differences when that is shorter (tag 8), others plain (tag 6)."""
    for rnd, values in [(1234, [1233]), (5, [1, 0]), (0, [-3, 70000, 2]), (9, list(range(100))), (3, [])]:
        env = Envelope("round", rnd, [], {"grad_rounds": values})
        assert wire.decode(wire.encode(wire.REQUEST, 7, env, limit=LIMIT), limit=LIMIT).env.info == env.info
    got = wire.decode(_info_frame(b"\x02\x08\x02\x03\x02"), limit=LIMIT).env.info
    assert got == {"grad_rounds": [-2, -1]}
    frame = wire.encode(wire.REQUEST, 1236, Envelope("round", 1234, [], {"grad_rounds": [1233]}), limit=LIMIT)
    assert frame.endswith(b"\x02\x08\x01\x01")  # key, tag 8, one item, zigzag(-1)
