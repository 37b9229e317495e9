"""What travels between the server's machine and a client node, whatever carries it.

An :class:`Envelope` is one request (server -> client node) or its reply. Its ``parts`` are
fedstream messages exactly as :func:`fedstream.transport.codec.encode` made them; these are the
bytes the ledgers count. ``info`` and ``arrays`` hold control data that is not part of the
algorithm's traffic (the config at setup, which events a batch activated, the final report). A
*link* moves envelopes: :class:`LoopbackLink` inside one process (tests, and the overhead-free
baseline of a benchmark), :class:`fedstream.deploy.runtimes.flower_grid.GridLink` over Flower.

Kinds of request:

* ``setup``: the run's config; the node builds its party.
* ``round``: rounds ``round .. round + info["events"] - 1`` have arrived (a batch of
  ``network.batch`` events, B). Its parts are first the gradients of the node's activated
  events of the previous batch, in round order (they ride along instead of costing messages of
  their own), then the server's Query of every event of the batch, in round order: the server
  queries every passive client (:func:`fedstream.ovfl.protocol.play_round`), so the node answers
  at once when an event leaves it passive, and the query of an activated event goes unused (it
  is not counted as payload). The reply holds one Embedding per event, in round order, and
  ``info["active"]``, which events activated the node: one round trip per batch.
  With a server-side activation policy (``topl``) the server decides: the request's
  ``info["active"]`` lists the B events' activations (zeros and ones) and its parts are only the
  gradients (the policy queries nobody); the reply echoes the list and holds one Embedding per
  activated event, nothing for the others (the server pads them). A batch then never crosses the
  end of a chunk, where the policy learns (:class:`fedstream.ovfl.deploy.driver.NetworkVFL`).
* ``finish``: the last pending gradients; the reply reports the node's byte counts and a digest
  of its model (the model itself only when asked, for tests: VFL parties keep their models).

With compression (``compression.up`` / ``compression.down``) the embeddings and gradients among
the parts are compressed frames (:mod:`fedstream.transport.wire`), made by the sender's end of the
client's link (:class:`~fedstream.transport.compressed.ClientEndpoint` on the node,
:class:`~fedstream.transport.compressed.ServerEndpoint` on the server); queries stay plain. Each
receiver first checks a part with :func:`peek` (no link state touched), and only a part of a
request or reply that passed every check reaches its stateful end of the link.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from fedstream.errors import FedstreamError, ProtocolError
from fedstream.ovfl.messages import Message
from fedstream.transport.codec import decode
from fedstream.transport.links import Receiver
from fedstream.transport.wire import CODEC_NAMES, is_compressed, unframe

SETUP, ROUND, FINISH = "setup", "round", "finish"
KINDS = (SETUP, ROUND, FINISH)


@dataclass
class Envelope:
    """One request to a client node or its reply."""

    kind: str
    round: int
    parts: list[bytes] = field(default_factory=list)  # encoded fedstream messages
    info: dict = field(
        default_factory=dict
    )  # str -> int | float | str | bool | bytes, or a list of one of them
    arrays: dict[str, np.ndarray] = field(default_factory=dict)


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
    """Moves envelopes to client nodes (by client index) and returns their replies."""

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
