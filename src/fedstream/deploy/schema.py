"""The typed records of :mod:`fedstream.deploy.records` as messages of the party protocol
(``protocol.proto``), and back: generic, by field name.

A record class travels as the message named by its task and class (``RoundRequest`` of
``fedstream.ovfl.deploy.records`` as ``OvflRoundRequest``), each field as the field of the same
name; a field with the option ``(rounds)`` holds round numbers and travels as differences. A plain
mapping travels as the one message that has a field of each of its keys."""

from __future__ import annotations

import functools
from collections.abc import Mapping

from fedstream.errors import ProtocolError

SCALAR, LIST, ROUNDS = 0, 1, 2  # how a message field maps to a record field


class Info(dict):
    """``Envelope.info`` as a record wrote it: its keys, and the record class (``record``) whose
    message they travel as. A copy (:meth:`copy`) keeps the record; ``dict(info)`` does not."""

    __slots__ = ("record",)

    def __init__(self, values: Mapping = (), record: type | None = None):
        super().__init__(values)
        self.record = record

    def copy(self) -> Info:
        return Info(self, self.record)


def protocol():
    """The generated module (imported on first use: only the gRPC runtime needs protobuf)."""
    from fedstream.deploy import protocol_pb2

    return protocol_pb2


def message_name(record: type) -> str:
    """The protocol's message for a record class: its task's name (the package after
    ``fedstream``; none for ``fedstream.deploy``), capitalised, and the class's name."""
    parts = record.__module__.split(".")
    task = parts[1] if len(parts) > 2 and parts[0] == "fedstream" and parts[1] != "deploy" else ""
    return task.capitalize() + record.__name__


@functools.cache
def slots() -> dict[str, str]:
    """Message name -> the name of its field in the frame's ``info`` oneof."""
    frame = protocol().Frame.DESCRIPTOR
    return {f.message_type.name: f.name for f in frame.oneofs_by_name["info"].fields}


@functools.cache
def fields(slot: str) -> dict[str, int]:
    """The fields of the message in the frame's field ``slot``: name -> SCALAR, LIST or ROUNDS."""
    pb = protocol()
    out = {}
    for f in pb.Frame.DESCRIPTOR.fields_by_name[slot].message_type.fields:
        if f.is_repeated:
            out[f.name] = ROUNDS if f.GetOptions().Extensions[pb.rounds] else LIST
        else:
            out[f.name] = SCALAR
    return out


def slot_of(info: Mapping) -> str:
    """The frame's field that carries ``info`` (see the module doc); ProtocolError if none."""
    record = getattr(info, "record", None)
    if record is not None:
        return _record_slot(record)
    keys = set(info)
    fits = [slot for slot in slots().values() if keys <= set(fields(slot))]
    if len(fits) != 1:
        raise ProtocolError(f"info with keys {sorted(keys)} fits {len(fits)} messages of the protocol "
                            f"({', '.join(fits[:5])}): write it from its record (Record.info)"[:300])
    return fits[0]


def message(info: Mapping, base: int, slot: str | None = None) -> tuple[str, object]:
    """``info`` as its message, and the frame's field that carries it (``slot``: that field, else
    :func:`slot_of`); ``base``: the frame's round. ProtocolError for a key the message lacks or a
    value its field cannot hold."""
    slot = slot or slot_of(info)
    kinds = fields(slot)
    values = {}
    for key, value in info.items():
        kind = kinds.get(key)
        if kind is None:
            raise ProtocolError(f"info {key!r} is not a field of {_message_type(slot).__name__} "
                                "(protocol.proto)")
        if value is None:
            continue
        if kind != SCALAR:
            if not isinstance(value, list):
                raise _cannot(slot, key, value, f"a list expected, not a {type(value).__name__}")
            if kind == ROUNDS:
                value = [v - prev for prev, v in zip([base, *value], value)]
        values[key] = value
    cls = _message_type(slot)
    try:
        return slot, cls(**values)
    except (TypeError, ValueError):
        for key, value in values.items():  # which one
            try:
                cls(**{key: value})
            except (TypeError, ValueError) as exc:
                raise _cannot(slot, key, info[key], str(exc)) from None
        raise


@functools.cache
def _record_slot(record: type) -> str:
    """The frame's field for a record class's message (once per class: it is looked up per frame)."""
    name = message_name(record)
    slot = slots().get(name)
    if slot is None:
        raise ProtocolError(f"record {record.__name__} of {record.__module__}: protocol.proto has no "
                            f"message {name} (add it and run scripts/protocol.sh)")
    return slot


@functools.cache
def _message_type(slot: str) -> type:
    pb = protocol()
    return getattr(pb, pb.Frame.DESCRIPTOR.fields_by_name[slot].message_type.name)


def _cannot(slot: str, key: str, value, why: str) -> ProtocolError:
    return ProtocolError(f"info {key!r} = {value!r} cannot travel as {_message_type(slot).__name__}.{key}: "
                         f"{why}"[:300])


def read(frame, base: int) -> dict:
    """The ``info`` keys of ``frame``'s message (absent fields and empty lists left out); ``base``:
    the frame's round."""
    slot = frame.WhichOneof("info")
    if slot is None:
        return {}
    kinds = fields(slot)
    out = {}
    for f, value in getattr(frame, slot).ListFields():
        kind = kinds[f.name]
        if kind == SCALAR:
            out[f.name] = value
        elif kind == LIST:
            out[f.name] = list(value)
        else:
            items = []
            for d in value:
                base += d
                items.append(base)
            out[f.name] = items
    return out
