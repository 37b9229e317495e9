"""The gRPC runtime's frames (issue 19): an envelope round-trips exactly, and a received frame is
checked before anything is decoded: size limit, header, lengths adding up, info a JSON object of
scalars, arrays' dtypes and sizes. A message past the config's limit fails with a clear error."""

from __future__ import annotations

import json
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


def _spoil(frame: bytes, offset: int, fmt: str, value) -> bytes:
    b = bytearray(frame)
    struct.pack_into(fmt, b, offset, value)
    return bytes(b)


@pytest.mark.parametrize("spoil, match", [
    (lambda f: f[:20], "shorter than"),
    (lambda f: b"XYZ" + f[3:], "magic"),
    (lambda f: _spoil(f, 3, "<B", 2), "version"),
    (lambda f: _spoil(f, 4, "<B", 99), "type"),
    (lambda f: _spoil(f, 5, "<B", 9), "kind"),
    (lambda f: _spoil(f, 5, "<B", 0), "kind"),
    (lambda f: _spoil(f, 6, "<H", 1), "reserved"),
    (lambda f: _spoil(f, 12, "<q", -1), "round"),
    (lambda f: _spoil(f, 20, "<I", 2**31), "parts"),
    (lambda f: _spoil(f, 32, "<I", 3), "add up"),
    (lambda f: f + b"x", "add up"),
    (lambda f: _spoil(f, 28, "<I", 1), "add up"),
])
def test_a_malformed_frame_is_refused_before_decoding(spoil, match):
    with pytest.raises(ProtocolError, match=match):
        wire.decode(spoil(_frame()), limit=LIMIT)


@pytest.mark.parametrize("info, match", [
    (b"[1, 2]", "JSON object"), (b"{not json", "not JSON"), (b'{"a": {"b": 1}}', "scalar"),
    (b"\xff\xfe", "not JSON"),
])
def test_info_must_be_a_json_object_of_scalars(info, match):
    frame = wire.HEAD.pack(wire.MAGIC, wire.VERSION, wire.REPLY, 2, 0, 1, 0, 0, len(info), 0) + info
    with pytest.raises(ProtocolError, match=match):
        wire.decode(frame, limit=LIMIT)


def test_arrays_are_checked():
    env = Envelope("finish", 0, [], {}, {"w": np.zeros(4, np.float32)})
    frame = wire.encode(wire.REPLY, 1, env, limit=LIMIT)
    with pytest.raises(ProtocolError, match="dtype code"):  # the dtype code byte
        wire.decode(_spoil(frame, len(frame) - 16 - 8 - 2, "<B", 77), limit=LIMIT)
    with pytest.raises(ProtocolError, match="past the frame"):  # a forged dimension
        wire.decode(_spoil(frame, len(frame) - 16 - 8, "<Q", 2**40), limit=LIMIT)
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


def test_info_that_json_cannot_carry_is_refused_at_the_sender():
    with pytest.raises(ProtocolError, match="cannot travel"):
        wire.encode(wire.REQUEST, 1, Envelope("round", 0, [], {"b": b"bytes"}), limit=LIMIT)
    assert json.loads(wire.encode(wire.HELLO, 0, Envelope("", 0, [], {"client": 3}), limit=LIMIT)[32:]) == \
        {"client": 3}
