"""The gRPC runtime's frames (issues 19, 29): ``Frame`` messages of the party protocol
(``fedstream/deploy/protocol.proto``). An envelope round-trips exactly, every typed record has its
message, and a received frame is checked: size limit first, then that it parses, type, round, the
arrays' dtypes and sizes. A message past the config's limit fails with a clear error."""

from __future__ import annotations

import subprocess
import sys
import types
import typing
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
import pytest
from google.protobuf.descriptor import FieldDescriptor as FD

from fedstream.chfl.deploy import records as chfl_records
from fedstream.config import load_config
from fedstream.deploy import protocol_pb2 as pb
from fedstream.deploy import records, schema
from fedstream.deploy.host import FinishReply
from fedstream.deploy.records import Envelope, Record, Setup
from fedstream.deploy.runtimes import grpc_wire as wire
from fedstream.errors import ProtocolError
from fedstream.ovfl.deploy import records as ovfl_records
from fedstream.ovfl.deploy.records import FinishRequest, RoundReply, RoundRequest
from fedstream.vfl.deploy import records as vfl_records

LIMIT = 1 << 20
REPO = Path(__file__).resolve().parents[1]


def _round_trip(ftype: int, seq: int, env: Envelope) -> wire.Frame:
    sender = wire.SERVER if ftype == wire.REQUEST else wire.NODE
    return wire.decode(wire.encode(ftype, seq, env, limit=LIMIT), limit=LIMIT, sender=sender)


def test_an_envelope_round_trips_exactly():
    info = FinishReply(client=2, round=70000, up=123456789, down=5, messages=9, digest="é" * 3).info()
    env = Envelope("finish", 7, [b"abc", b"", b"\x00" * 300], info,
                   {"param0": np.arange(6, dtype=np.float32).reshape(2, 3), "n": np.array([1, 2], np.int64),
                    "big": np.arange(3, dtype=">f8"), "scalar": np.array(True)})
    got = _round_trip(wire.REPLY, 42, env)
    assert got.type == wire.REPLY and got.seq == 42
    e = got.env
    assert (e.kind, e.round, e.parts, e.info) == (env.kind, env.round, env.parts, dict(env.info))
    assert FinishReply.read(e.info, "test") == FinishReply.read(info, "test")
    assert set(e.arrays) == set(env.arrays)
    for k, v in env.arrays.items():
        assert e.arrays[k].dtype == v.dtype.newbyteorder("<") and np.array_equal(e.arrays[k], v)
    # the same frame read by a node is a request; the runtime's own frames keep their type
    request = Envelope("round", 5, [b"q"], RoundRequest(events=3, grad_rounds=[2, 4], keep=True,
                                                         boundary=8, active=[0, 1, 1]).info())
    got = _round_trip(wire.REQUEST, 6, request)
    assert got.type == wire.REQUEST and RoundRequest.read(got.env.info, "t", ) == RoundRequest.read(
        request.info, "t")
    for ftype in (wire.BYE, wire.ECHO):
        assert _round_trip(ftype, 3, Envelope("", 0, [b"x"])).type == ftype
    hello = wire.decode(wire.hello(3, limit=LIMIT), limit=LIMIT, sender=wire.NODE)
    assert (hello.type, hello.env.info) == (wire.HELLO, {"client": 3})
    err = wire.decode(wire.error(9, "no ☃", limit=LIMIT), limit=LIMIT, sender=wire.NODE)
    assert (err.type, err.seq, err.env.info) == (wire.ERROR, 9, {"reason": "no ☃"})


def _records() -> list[type]:
    """Every record class a party sends: the records modules' Record subclasses that no other
    record extends (Keep and batch VFL's Request are bases)."""
    found = {c for m in (records, ovfl_records, vfl_records, chfl_records) for c in vars(m).values()
             if isinstance(c, type) and issubclass(c, Record) and c.__module__ == m.__name__}
    return sorted((c for c in found if not any(o is not c and issubclass(o, c) for o in found)),
                  key=lambda c: (c.__module__, c.__name__))


_PROTO_TYPES = {int: (FD.TYPE_SINT64,), bool: (FD.TYPE_BOOL,), str: (FD.TYPE_STRING,),
                float: (FD.TYPE_DOUBLE,)}


@pytest.mark.parametrize("record", _records(), ids=lambda c: schema.message_name(c))
def test_every_record_has_its_message_field_for_field(record):
    """The .proto and the dataclasses cannot drift apart: same names, compatible types, presence for
    every scalar (a missing required field is told from a zero)."""
    name = schema.message_name(record)
    assert name in schema.slots(), f"protocol.proto has no message {name} for {record.__qualname__}"
    msg = getattr(pb, name).DESCRIPTOR
    hints = typing.get_type_hints(record)
    assert {f.name for f in fields(record)} == set(msg.fields_by_name)
    for f in fields(record):
        kind = hints[f.name]
        if typing.get_origin(kind) in (typing.Union, types.UnionType):
            (kind,) = [k for k in typing.get_args(kind) if k is not type(None)]
        pf = msg.fields_by_name[f.name]
        if typing.get_origin(kind) is list:
            (kind,) = typing.get_args(kind)
            assert pf.is_repeated, f"{name}.{f.name} must be repeated"
        else:
            assert not pf.is_repeated and pf.has_presence, f"{name}.{f.name} must be an optional scalar"
        assert pf.type in _PROTO_TYPES[kind], f"{name}.{f.name}: protobuf type {pf.type} for {kind}"


def test_the_checked_in_code_is_what_the_proto_generates(tmp_path):
    """protocol_pb2.py is regenerated from protocol.proto (scripts/protocol.sh) whenever it changes."""
    pytest.importorskip("grpc_tools", reason="grpcio-tools is not installed: pip install 'fedstream[proto]'")
    src = REPO / "src"
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{src}", f"--python_out={tmp_path}",
                    f"--pyi_out={tmp_path}", f"--grpc_python_out={tmp_path}",
                    str(src / "fedstream/deploy/protocol.proto")], check=True)
    for name in ("protocol_pb2.py", "protocol_pb2.pyi", "protocol_pb2_grpc.py"):
        made, kept = (p / "fedstream/deploy" / name for p in (tmp_path, src))
        assert made.read_text() == kept.read_text(), f"{name} is stale: run scripts/protocol.sh"


def _frame(**fields) -> bytes:
    base = dict(type=pb.SETUP, seq=1, round=-1, parts=[b"ab"])
    return pb.Frame(**{**base, **fields}).SerializeToString()


def test_a_frame_decodes_into_its_envelope():
    got = wire.decode(_frame(setup=pb.Setup(config="{}", run="r1")), limit=LIMIT, sender=wire.SERVER)
    assert got == wire.Frame(wire.REQUEST, 1, Envelope("setup", 0, [b"ab"], {"config": "{}", "run": "r1"}))


@pytest.mark.parametrize("data, match", [
    (b"\xff" * 10, "not a protocol Frame"),
    (_frame()[:-1], "not a protocol Frame"),  # cut in the middle of a part
    (b"\xF2\x21\x01\x01\x00\x02ab", "not a protocol Frame"),  # a frame of the old format (version 2)
    (b"\x10" + b"\xff" * 10 + b"\x01", "not a protocol Frame"),  # a varint longer than 64 bits
    (_frame(type=9), "type 9"),
    (_frame(round=-2), "round -1"),
    (_frame(setup=pb.Setup(config="x")).replace(b"\x0a\x01x", b"\x0a\x01\xc3"), "not a protocol"),  # no UTF-8
    (_frame(arrays=[pb.Tensor(name="w", dtype=77, shape=[1], data=b"\0")]), "dtype code 77"),
    (_frame(arrays=[pb.Tensor(name="w", dtype=pb.UINT8, shape=[1] * 9, data=b"\0")]), "9 dimensions"),
    (_frame(arrays=[pb.Tensor(name="w", dtype=pb.FLOAT32, shape=[2**40, 2**40], data=b"\0" * 4)]), "needs"),
    (_frame(arrays=[pb.Tensor(name="w", dtype=pb.FLOAT32, shape=[2], data=b"\0" * 12)]), "needs 8 bytes"),
    (_frame(arrays=[pb.Tensor(name="w", dtype=pb.UINT8, shape=[1], data=b"\0")] * 2), "second array"),
    (_frame(parts=[b"\0" * 5000]), "over the message limit"),
])
def test_a_malformed_frame_is_refused(data, match):
    with pytest.raises(ProtocolError, match=match):
        wire.decode(data, limit=4096, sender=wire.SERVER)
    assert wire.sequence(data) in (0, 1)  # what a node's error reply then carries


def test_info_a_message_cannot_carry_is_refused_at_the_sender():
    for info in (RoundReply(active=[1]).info() | {"x": 1},  # not a field of OvflRoundReply
                 RoundRequest(events=2**70).info(),  # past 64 bits
                 FinishRequest(grad_rounds="12").info(),  # a string for a list
                 Setup(config=1.5, run="r").info(),  # a number for a string
                 {"keep": True},  # a plain dict of keys several messages have
                 {"nonsense": 1}):  # ... or none has
        with pytest.raises(ProtocolError, match="cannot travel|not a field|fits"):
            wire.encode(wire.REQUEST, 1, Envelope("round", 0, [], info), limit=LIMIT)

    @dataclass(kw_only=True)
    class Unknown(Record):
        x: int

    with pytest.raises(ProtocolError, match="has no message Unknown"):
        wire.encode(wire.REQUEST, 1, Envelope("round", 0, [], Unknown(x=1).info()), limit=LIMIT)
    with pytest.raises(ProtocolError, match="kind 'later'"):
        wire.encode(wire.REQUEST, 1, Envelope("later", 0), limit=LIMIT)
    with pytest.raises(ProtocolError, match="cannot travel"):
        wire.encode(wire.REPLY, 1, Envelope("finish", 0, [], {}, {"o": np.array([object()])}), limit=LIMIT)


def test_a_plain_dict_travels_as_the_one_message_of_its_keys():
    """A copy made with dict() lost its record: it travels as the one message holding its keys."""
    info = dict(Setup(config="{}", run="r1", rejoin=True).info())
    got = _round_trip(wire.REQUEST, 1, Envelope("setup", 0, [], info))
    assert got.env.info == info


def test_the_limit_follows_the_configs_shapes_and_is_explained():
    small = load_config(None, {"network.batch": 1})
    big = load_config(None, {"network.batch": 4096})
    assert wire.message_limit(small) < wire.message_limit(big)
    assert wire.message_limit(small, audit=True) > wire.message_limit(small)
    env = Envelope("round", 0, [b"\0" * 5000])
    with pytest.raises(ProtocolError, match="exceeds the message limit of 4096 bytes set from the config"):
        wire.encode(wire.REQUEST, 1, env, limit=4096)
    with pytest.raises(ProtocolError, match="over the message limit"):
        wire.decode(wire.encode(wire.REQUEST, 1, env, limit=LIMIT), limit=4096, sender=wire.SERVER)


def test_a_batch_request_costs_a_few_bytes_beyond_its_parts():
    """B = 1 of online VFL: a gradient and a query down, an embedding up (the sequence number moves
    with the round; the held gradient's round is the one before). As few bytes as the hand-written
    format of version 2 took: 17, 13 and 8."""
    info = RoundRequest(events=1, grad_rounds=[1233]).info()
    request = Envelope("round", 1234, [b"g" * 300, b"q" * 20], info)
    reply = Envelope("round", 1234, [b"e" * 300], RoundReply(active=[1]).info())
    assert len(wire.encode(wire.REQUEST, 1236, request, limit=LIMIT)) - 320 == 17
    assert len(wire.encode(wire.REPLY, 1236, reply, limit=LIMIT)) - 300 == 13
    assert len(wire.encode(wire.REPLY, 1236, Envelope("round", 1234, [b"e" * 300]), limit=LIMIT)) - 300 == 8


def test_rounds_travel_as_differences():
    """A field marked (rounds) holds the first round minus the frame's, then each minus the one before."""
    for rnd, values in [(1234, [1233]), (5, [1, 0]), (0, [3, 70000, 2]), (9, list(range(100))), (3, [])]:
        env = Envelope("round", rnd, [], FinishRequest(grad_rounds=values).info())
        assert _round_trip(wire.REQUEST, 7, env).env.info.get("grad_rounds", []) == values
    env = Envelope("finish", 1234, [], FinishRequest(grad_rounds=[1233]).info())
    frame = wire.encode(wire.REQUEST, 1236, env, limit=LIMIT)
    msg = pb.Frame.FromString(frame)
    assert list(msg.ovfl_finish_request.grad_rounds) == [-1] and frame.endswith(b"\x01")  # zigzag(-1)
