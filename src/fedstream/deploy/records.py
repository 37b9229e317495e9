"""What travels between the server and a client node, whatever carries it.

An :class:`Envelope` is one request or its reply: its ``parts`` are fedstream messages exactly as
:func:`fedstream.transport.codec.encode` made them (the bytes the ledgers count), its ``info`` a
typed :class:`Record` (checked by the field rules of :mod:`fedstream.fields`, as the config is),
its ``arrays`` control data. The session's records (:class:`Setup`, :class:`Keep`) are here; each
task's live in ``fedstream.<task>.deploy.records``. :func:`peek` checks a received part before it
reaches the stateful end of its link; a :class:`Link` (a runtime's) moves envelopes."""

from __future__ import annotations

import typing
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Protocol, TypeVar

import numpy as np

from fedstream.deploy.schema import Info
from fedstream.errors import ConfigError, FedstreamError, ProtocolError
from fedstream.fields import checker, type_name
from fedstream.transport.codec import decode
from fedstream.transport.links import Receiver
from fedstream.transport.messages import Message
from fedstream.transport.wire import CODEC_NAMES, is_compressed, unframe

SETUP, ROUND, FINISH = "setup", "round", "finish"
PSI = "psi"  # before setup, one file per party: private entity alignment (fedstream.deploy.psi)
KINDS = (SETUP, ROUND, FINISH, PSI)
# bytes of fedstream parts in one message, Flower's limit: batch VFL's VF-PS distances, evaluation
# embeddings and models, CHFL's models (online VFL's frames are sized by its adapter's frame_limit);
# a larger message is refused before decoding
MAX_PAYLOAD = 64 * 2**20


@dataclass
class Envelope:
    """One request to a client node or its reply."""

    kind: str
    round: int
    parts: list[bytes] = field(default_factory=list)  # encoded fedstream messages
    info: dict = field(default_factory=dict)  # str -> int | float | str | bool | bytes, or a list of them
    arrays: dict[str, np.ndarray] = field(default_factory=dict)


R = TypeVar("R", bound="Record")
# each Record class's fields: (name, type, required, checker), built once (typing's helpers are slow)
_READERS: dict[type, list[tuple[str, Any, bool, Callable[[Any], bool]]]] = {}


def _reader(cls: type) -> list[tuple[str, Any, bool, Callable[[Any], bool]]]:
    hints = typing.get_type_hints(cls)
    reader = [(f.name, hints[f.name], f.default is MISSING and f.default_factory is MISSING,
               checker(hints[f.name])) for f in fields(cls)]
    _READERS[cls] = reader
    return reader


@dataclass(kw_only=True)
class Record:
    """A typed control record: a dataclass whose fields travel as ``Envelope.info`` keys.

    :meth:`read` checks each key's type from the field's annotation (a missing key takes the
    field's default; a field without one is required), then the record's own :meth:`check`;
    :meth:`info` writes the keys back, leaving out fields that are None. On the gRPC runtime a
    record travels as the message of its name in ``protocol.proto`` (:mod:`fedstream.deploy.schema`)."""

    @classmethod
    def read(cls: type[R], info: Mapping, where: str, **context) -> R:
        """The record ``info`` holds, checked; ProtocolError saying ``where`` what is wrong.
        ``context``: what :meth:`check` needs to know of the receiver (sizes, limits)."""
        values = {}
        for name, kind, required, ok in _READERS.get(cls) or _reader(cls):
            value = info.get(name)
            if value is None:
                if required:
                    raise ProtocolError(f"{where}: info {name!r} is missing ({type_name(kind)})")
                continue
            if not ok(value):
                raise ProtocolError(
                    f"{where}: info {name!r} must be {type_name(kind)}, received {value!r}"[:300])
            values[name] = value
        record = cls(**values)
        record.check(where, **context)
        return record

    def check(self, where: str, **context) -> None:
        """The record's own rules beyond its types (ranges, consistency); ProtocolError if broken."""

    def info(self) -> Info:
        """The record as ``Envelope.info`` keys (None fields left out), tagged with the record's class
        (on the gRPC runtime it travels as that record's message: :mod:`fedstream.deploy.schema`)."""
        out = Info(record=type(self))
        for name, *_ in _READERS.get(type(self)) or _reader(type(self)):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out


@dataclass(kw_only=True)
class Keep(Record):
    """The session fields of any request: ``keep`` asks the node to keep its state of ``boundary``
    after answering (the server checkpoints there too; :mod:`fedstream.deploy.session`)."""

    keep: bool | None = None
    boundary: int | None = None

    def check(self, where: str, **context) -> None:
        if self.keep and (self.boundary is None or self.boundary < 0):
            raise ProtocolError(f"{where}: a request with info 'keep' needs a boundary >= 0, "
                                f"received {self.boundary!r}")

    def kept(self) -> int | None:
        """The boundary to keep (None: none)."""
        return self.boundary if self.keep else None


@dataclass(kw_only=True)
class Setup(Record):
    """A setup request: the run's config (JSON) and token; with ``rejoin`` the node reloads its
    latest state of this run, with ``resume = B`` its state kept at boundary B."""

    config: str
    run: str
    rejoin: bool | None = None
    resume: int | None = None

    def check(self, where: str, **context) -> None:
        if not self.run.isalnum():
            raise ProtocolError(f"{where}: a setup request needs info 'config' (JSON) and 'run' (token)")
        if self.resume is not None and self.resume < 0:
            raise ProtocolError(f"{where}: setup 'resume' must be a round >= 0, received {self.resume!r}")


def check_client_index(index: Any, clients: int, key: str, *, name: str = "client-index") -> int:
    """A node's ``client-index`` (its node config), an integer in 0..clients - 1 (``key``: the config
    key that sets ``clients``, ``name`` what gave the index, for the error); ConfigError otherwise."""
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < clients:
        raise ConfigError(f"{name} = {index!r}: expected an integer between 0 and {key} - 1 = "
                          f"{clients - 1}")
    return index


def peek(data: bytes, receiver: Receiver | None, compressed: type, setting: str,
         shape: tuple[int, int] | None = None) -> Message:
    """Decode one part a party received, without touching the state of its end of the link.

    ``compressed`` is the message type this direction may compress (Embedding up, Gradient down),
    ``receiver`` a stateless decoder of the configured codec (None: the direction is ``none``) and
    ``setting`` the config it stands for (``"compression.up = 'topk'"``, for errors). A part of that
    type must be compressed exactly when the direction is, with the configured codec; any other
    part is plain (:func:`fedstream.transport.codec.decode`). A compressed frame's shape is checked
    against ``shape`` (when given) before its payload is decoded, so a forged header cannot make the
    receiver allocate; its decoded values must be finite. Raises :class:`ProtocolError` (or
    :class:`~fedstream.errors.NonFiniteError`) naming what is wrong; the stateful end decodes the
    part again once the whole request or reply has passed (the server's embedding cache is only
    updated from embeddings it accepted)."""
    if not is_compressed(data):
        msg = decode(data)  # header, length, finite values
        if type(msg) is compressed and receiver is not None:
            raise ProtocolError(f"an uncompressed {compressed.__name__} for round {msg.round}, but {setting}")
        return msg
    try:
        f = unframe(data)
        if f.type is not compressed or receiver is None:
            raise ProtocolError(
                f"a compressed {f.type.__name__} for round {f.round}, but {setting}"
                + ("" if f.type is compressed else f" and only {compressed.__name__}s are compressed")
            )
        if f.codec != receiver.wire:
            raise ProtocolError(
                f"{f.type.__name__} for round {f.round}: payload coded with {CODEC_NAMES[f.codec]}, "
                f"but {setting} ({CODEC_NAMES[receiver.wire]})"
            )
        if shape is not None and tuple(f.shape) != tuple(shape):
            raise ProtocolError(
                f"{f.type.__name__} for round {f.round}: expected shape {tuple(shape)}, the frame "
                f"says {tuple(f.shape)}"
            )
        values = receiver.values(f.payload, f.shape, round=f.round)
    except FedstreamError:
        raise
    except Exception as exc:  # noqa: BLE001 - untrusted bytes: any decoding failure is the sender's
        raise ProtocolError(f"undecodable compressed message: {exc}"[:500]) from None
    if not np.isfinite(values).all():
        raise ProtocolError(
            f"compressed {f.type.__name__} for round {f.round} from/to client {f.client} holds NaN or inf"
        )
    return f.type(f.round, f.client, values)


@dataclass
class Failure:
    """What a link returns instead of a node's reply: the node failed, timed out, or sent something
    that is not a well-formed reply (``reason`` says which; the server logs it and goes on)."""

    reason: str


class Link(Protocol):
    """Moves envelopes to client nodes (by client index) and returns their replies. A link whose
    ``sends_ahead`` is true (the gRPC runtime's) also takes ``exchange(requests, ahead)``: see
    :class:`fedstream.deploy.runtimes.grpc.GrpcLink`."""

    n_clients: int

    def exchange(self, requests: dict[int, Envelope]) -> dict[int, Envelope | Failure]:
        """Send every request at once; return each client's reply or a :class:`Failure` (never raise
        for a node's fault)."""
        ...

    def available(self) -> set[int]:
        """Clients a request can go to now (connected, not still busy with a timed-out request)."""
        ...

    def rejoined(self) -> set[int]:
        """Clients whose node (re)connected since the last call: they need a setup before a round."""
        ...
