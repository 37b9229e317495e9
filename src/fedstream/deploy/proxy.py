"""The server's side of the wire: stand-ins for remote clients and a transport over a link.

:func:`fedstream.vfl.protocol.play_round` calls its clients directly (``observe``, ``on_event``,
``on_query``, ``on_gradient``) and moves every message through ``transport.up`` / ``down``. On
the server's machine of a deployment the clients are :class:`RemoteClient` objects and the
transport is a :class:`LinkTransport`, so the very same function runs the round:

* ``transport.down(msg)`` encodes the message and counts its bytes. A Query goes out at once (one
  request to that node; its reply is the embedding). A Gradient is held and rides on the node's
  next request, the next round's or the final one: the client applies it before it does anything
  else, exactly where the simulator applies it.
* ``RemoteClient.on_event`` / ``on_query`` return the still-encoded reply of the node (a
  :class:`Wire`); ``transport.up`` decodes it with :func:`fedstream.transport.codec.decode`
  (which validates it) and counts its bytes.
* ``observe`` and ``on_gradient`` do nothing here: the node observes its own data, and learns when
  its gradient arrives.

Which clients an event activated is known from the round's replies (an activated client pushes its
embedding): :meth:`LinkTransport.begin_round` asks every node for round t before ``play_round``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from fedstream.deploy.link import QUERY, ROUND, Envelope, Link
from fedstream.errors import ProtocolError
from fedstream.transport.codec import decode, encode
from fedstream.transport.ledger import ByteLedger
from fedstream.vfl.messages import Embedding, Gradient, Message, Query


class Wire(NamedTuple):
    """A message as it arrived from client ``client``: still encoded."""

    client: int
    data: bytes


class LinkTransport:
    """Carries play_round's messages to client nodes over a :class:`~fedstream.deploy.link.Link`."""

    def __init__(self, link: Link, *, record_sizes: bool = False):
        self.link = link
        self.ledger = ByteLedger(link.n_clients)
        self.sizes: list[tuple[str, int, int]] | None = [] if record_sizes else None  # (direction, client, bytes)
        self.round = -1
        self.exchanges = 0  # requests sent to the link (each one round trip, nodes in parallel)
        self._outbox: dict[int, bytes] = {}  # gradient waiting for the node's next request
        self._pushed: dict[int, bytes] = {}  # this round's embeddings of activated clients
        self._answers: dict[int, bytes] = {}  # embeddings that answered a query

    # -- rounds ------------------------------------------------------------------------------
    def begin_round(self, t: int) -> np.ndarray:
        """Tell every node that round t's sample arrived; return which clients it activated."""
        replies = self._exchange({m: Envelope(ROUND, t, self._outbox.pop(m, b"")) for m in range(self.link.n_clients)})
        self.round = t
        self._pushed = {m: r.payload for m, r in replies.items() if r.payload}
        return np.array([m in self._pushed for m in range(self.link.n_clients)])

    def flush(self, kind: str, t: int, info: dict | None = None) -> dict[int, Envelope]:
        """One last request to every node, carrying what is still held for it (``finish``)."""
        return self._exchange({m: Envelope(kind, t, self._outbox.pop(m, b""), dict(info or {}))
                               for m in range(self.link.n_clients)})

    def _exchange(self, requests: dict[int, Envelope]) -> dict[int, Envelope]:
        self.exchanges += 1
        replies = self.link.exchange(requests)
        for m, env in requests.items():
            reply = replies.get(m)
            if reply is None or reply.kind != env.kind or reply.round != env.round:
                got = "nothing" if reply is None else f"a {reply.kind!r} reply for round {reply.round}"
                raise ProtocolError(f"client {m}: expected a {env.kind!r} reply for round {env.round}, received {got}")
        return replies

    # -- the transport play_round uses -------------------------------------------------------
    def down(self, msg: Message) -> Message:
        """Server -> client ``msg.client``: queries go now, gradients with the node's next request."""
        data = encode(msg)
        self._count(msg.client, "down", len(data))
        if isinstance(msg, Query):
            reply = self._exchange({msg.client: Envelope(QUERY, msg.round, data)})[msg.client]
            self._answers[msg.client] = reply.payload
        elif isinstance(msg, Gradient):
            if msg.client in self._outbox:
                raise ProtocolError(f"client {msg.client}: a second gradient for round {msg.round}")
            self._outbox[msg.client] = data
        else:
            raise ProtocolError(f"the server cannot send a {type(msg).__name__}")
        return msg

    def up(self, wire: Wire) -> Embedding:
        """Client -> server: decode (and so validate) what the node sent, and count it."""
        msg = decode(wire.data)
        if not isinstance(msg, Embedding) or msg.client != wire.client:
            raise ProtocolError(f"client {wire.client}: expected its Embedding, received a {type(msg).__name__} "
                                f"for client {msg.client}")
        self._count(wire.client, "up", len(wire.data))
        return msg

    def _count(self, client: int, direction: str, n: int) -> None:
        self.ledger.add(client, direction, n)
        if self.sizes is not None:
            self.sizes.append((direction, client, n))

    # -- what RemoteClient reads -------------------------------------------------------------
    def pushed(self, m: int, t: int) -> Wire:
        if t != self.round or m not in self._pushed:
            raise ProtocolError(f"client {m}: no embedding pushed for round {t}")
        return Wire(m, self._pushed.pop(m))

    def answer(self, m: int, t: int) -> Wire:
        if t != self.round or m not in self._answers:
            raise ProtocolError(f"client {m}: no answer to the query of round {t}")
        return Wire(m, self._answers.pop(m))


class RemoteClient:
    """Stands in, on the server's machine, for the client party on node ``index``."""

    def __init__(self, index: int, transport: LinkTransport):
        self.index, self.transport = index, transport

    def observe(self, t: int, x) -> None:
        """The node reads its own features; here only check that the round was announced."""
        if t != self.transport.round:
            raise ProtocolError(f"client {self.index}: round {t} was not announced (at {self.transport.round})")

    def on_event(self, t: int) -> Wire:
        return self.transport.pushed(self.index, t)

    def on_query(self, query: Query) -> Wire:
        return self.transport.answer(self.index, query.round)

    def on_gradient(self, grad: Gradient) -> None:
        """Nothing: the gradient reaches the node with its next request (see LinkTransport.down)."""
