"""The server's side of the wire: a transport over a link and stand-ins for the remote clients.

On the server's machine the engine's loop plays :func:`fedstream.ovfl.protocol.play_round` with
:class:`RemoteClient` stand-ins over a :class:`LinkTransport`. :meth:`LinkTransport.begin_batch`
sends each node one request for a batch of rounds and checks every reply whole before any of it is
used; ``up`` and ``down`` then count each message in ``play_round``'s order, and
:meth:`LinkTransport.learned` counts a batch played at once the same way. The protocol, requests
ahead, faults and compression: docs/deploy-protocol.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from fedstream.deploy.host import FinishReply
from fedstream.deploy.reconcile import counts_report
from fedstream.deploy.records import FINISH, ROUND, Envelope, Failure, Link, peek
from fedstream.deploy.remote import RemoteNodes
from fedstream.errors import ProtocolError
from fedstream.ovfl.deploy.records import FinishRequest, RoundReply, RoundRequest
from fedstream.ovfl.party_kernels import batched, pack, unpack
from fedstream.transport.codec import decode, encode
from fedstream.transport.compressed import CompressionSpec, ServerEnds
from fedstream.transport.messages import Embedding, Gradient, Message, Query

FINISH_FIELDS = ("client", "round", "up", "down", "messages", "digest")  # what an online VFL node reports


class Wire(NamedTuple):
    """An embedding as it arrived from client ``client``: its bytes and the checked message."""

    client: int
    data: bytes
    msg: Embedding


@dataclass
class Batch:
    """The batch being played: rounds ``start .. start + size - 1``, the server's activations
    (``decided``; None: each node decides), the queries each request carried and each live node's
    checked reply: its activation flags and embeddings, or its parts and values when checked at once."""

    start: int = 0
    size: int = 0
    decided: np.ndarray | None = None
    queries: dict[int, list[bytes]] = field(default_factory=dict)
    replies: dict[int, tuple[list[int], list[Wire | None] | None]] = field(default_factory=dict)
    values: dict[int, tuple[list[bytes], np.ndarray]] = field(default_factory=dict)


@dataclass
class Ahead:
    """Requests sent ahead: the next batch's request per node (``sent``), those counted in
    ``wire_bytes`` as they went (``counted``), and the next batch's plan with its queries (``prepared``)."""

    sent: dict[int, Envelope] = field(default_factory=dict)
    counted: dict[int, Envelope] = field(default_factory=dict)
    prepared: tuple[tuple, dict[int, list[bytes]]] | None = None


class LinkTransport(RemoteNodes):
    """Carries play_round's messages to client nodes over a :class:`~fedstream.deploy.records.Link`.

    ``query(t, m)`` gives the Query the server will send client m in round t (the batch carries
    them ahead; :meth:`down` checks the server sends exactly those); ``embedding`` is the width
    of an embedding row; ``spec`` the run's compression (default none)."""

    def __init__(
        self,
        link: Link,
        query: Callable[[int, int], Query],
        *,
        embedding: int,
        record_sizes: bool = False,
        spec: CompressionSpec | None = None,
        config: dict | None = None,
    ):
        super().__init__(link, config)
        self.query, self.embedding = query, embedding
        M = link.n_clients
        self.ends = ServerEnds(M, spec or CompressionSpec())
        # (direction, client, bytes) of every message, when recorded
        self.sizes: list[tuple[str, int, int]] | None = [] if record_sizes else None
        self.wire_bytes = 0  # bytes of every part sent or received, used or not (see exchange)
        self.missed = np.zeros(M, dtype=np.int64)  # events each client was down for (padded)
        self.outbox: dict[int, list[tuple[int, bytes]]] = {}  # (round, gradient) for the next request
        self.batch, self.ahead = Batch(), Ahead()

    def set_up(self, clients: Iterable[int], t: int, info: dict, accept: Callable, **kwargs) -> dict:
        """The setup (:meth:`RemoteNodes.set_up <fedstream.deploy.remote.RemoteNodes.set_up>`) of the
        reachable ones of ``clients``."""
        targets = set(clients) & self.link.available()
        for m in targets:  # a node set up again starts from a setup: nothing went ahead
            self.ahead.sent.pop(m, None)
        return super().set_up(targets, t, info, accept, **kwargs)

    def finish(self, t: int, *, models: bool = False) -> list[dict]:
        """The ``finish`` request (the gradients still held for it) to every ready, reachable node;
        return the nodes' reports (their models too if ``models``, as ``params``), whose byte counts
        must equal the server's."""
        requests = {}
        for m in self.reachable(self.ready, t, FINISH, once=True):
            held = self.outbox.pop(m, [])
            info = FinishRequest(grad_rounds=[r for r, _ in held], models=models).info()
            requests[m] = Envelope(FINISH, t, [g for _, g in held], info)

        def report(m: int, reply: Envelope, got: FinishReply) -> dict:
            report = got.info() | counts_report(self, m, t, got)
            if models:
                report["params"] = [reply.arrays[f"param{i}"] for i in range(len(reply.arrays))]
            return report

        self.finish_reports(requests, t, FINISH_FIELDS, report)
        return self.reports

    def forget(self, m: int) -> int:
        """A node rejoined with an older state: drop what was held for it; return how many gradients."""
        self.ahead.sent.pop(m, None)
        return len(self.outbox.pop(m, []))

    def state(self) -> dict[str, np.ndarray]:
        """Its part of a server checkpoint: the gradients held for the nodes (``outbox.{client}.{round}``)."""
        return {f"outbox.{m}.{r}": np.frombuffer(g, np.uint8)
                for m, held in self.outbox.items() for r, g in held}

    def load_state(self, arrays: dict[str, np.ndarray]) -> None:
        """Go back to :meth:`state`'s boundary (other keys of ``arrays`` are ignored)."""
        self.outbox = {}
        keys = (k for k in arrays if k.startswith("outbox."))
        for key in sorted(keys, key=lambda k: tuple(map(int, k.split(".")[1:]))):
            _, m, r = key.split(".")
            self.outbox.setdefault(int(m), []).append((int(r), arrays[key].tobytes()))
        self.ahead.sent, self.ahead.prepared = {}, None

    def begin_batch(
        self, t0: int, n: int, *, keep: bool = False, active: np.ndarray | None = None,
        after: tuple[int, bool, np.ndarray | None] | None = None,
    ) -> set[int]:
        """One request to every ready, reachable node for rounds t0..t0+n-1; return the live ones.
        ``keep``: the nodes keep their state of the batch's end; ``active`` (n, clients): the server's
        activations (``topl``), carried instead of queries; ``after``: the next batch's (events, keep,
        active), when known: a node this batch leaves passive is sent that request as it replies."""
        targets = self.reachable(self.ready, t0, ROUND, once=True)  # every event it misses: a fault
        plan = (t0, n, keep, None if active is None else active.tobytes())
        early = self.ahead.sent
        prepared = self.ahead.prepared[1] if self.ahead.prepared and self.ahead.prepared[0] == plan else {}
        self.batch = batch = Batch(t0, n, active, {
            m: prepared[m] if m in prepared else self._encode_queries(t0, n, m, active) for m in targets})
        requests = {}
        for m in targets:
            held = self.outbox.pop(m, [])
            if m in early and (held or not prepared):  # sent ahead: the very request, or a server bug
                raise ProtocolError(f"client {m}: its request for round {t0} went ahead, but the server "
                                    f"now holds {len(held)} gradient(s) for it or another plan")
            requests[m] = early[m] if m in early else self._request(t0, n, keep, active, m, held,
                                                                    batch.queries[m])
        self.ahead.sent, self.ahead.prepared = {}, None
        ahead = after is not None and getattr(self.link, "sends_ahead", False)
        then = self._prepare(t0 + n, *after, targets, zero=[0] * n, t0=t0) if ahead else None
        batch.replies = self.answers(requests, t0, lambda m, reply: self._check_batch(m, reply, t0, n),
                                     kind=ROUND, ahead=then)
        self.missed += n * ~self.live()
        return set(batch.replies)

    def _encode_queries(self, t0: int, n: int, m: int, active: np.ndarray | None) -> list[bytes]:
        """The queries of rounds t0..t0+n-1 for client m (none when the server decides)."""
        if active is not None:
            return []
        rows = self.query(t0, m).rows
        if batched(n) and self.query(t0 + n - 1, m).rows == rows:
            return pack(Query, np.arange(t0, t0 + n), m, np.empty((n, rows, 0), np.float32))
        return [encode(self.query(t, m)) for t in range(t0, t0 + n)]

    @staticmethod
    def _request(t0: int, n: int, keep: bool, active: np.ndarray | None, m: int, held: list, queries: list
                 ) -> Envelope:
        """Client m's request for rounds t0..t0+n-1: the gradients ``held`` for it, then ``queries``."""
        decided = None if active is None else [int(a) for a in active[:, m]]
        info = RoundRequest(events=n, grad_rounds=[r for r, _ in held], keep=keep,
                            boundary=t0 + n if keep else None, active=decided).info()
        return Envelope(ROUND, t0, [g for _, g in held] + queries, info)

    def _prepare(self, t1: int, n1: int, keep1: bool, active1: np.ndarray | None, targets: list[int],
                 *, zero: list[int], t0: int) -> Callable[[int, Envelope], Envelope | None]:
        """Prepare the next batch's queries; return what the link calls with each reply of this batch:
        the node's next request when no event of this batch activated it (it awaits no gradient)."""
        queries = {m: self._encode_queries(t1, n1, m, active1) for m in targets}
        self.ahead.prepared = ((t1, n1, keep1, None if active1 is None else active1.tobytes()), queries)
        sent = self.ahead.sent

        def then(m: int, reply: Envelope) -> Envelope | None:
            if reply.kind != ROUND or reply.round != t0 or m not in queries:
                return None
            if reply.info.get("active") != zero:  # an activated node's next request waits for its gradient
                return None
            sent[m] = self.ahead.counted[m] = self._request(t1, n1, keep1, active1, m, [], queries[m])
            self.wire_bytes += sum(len(p) for p in sent[m].parts)  # it goes now, used or not
            return sent[m]

        return then

    def _check_batch(self, m: int, reply: Envelope, t0: int, n: int) -> tuple[list[int], list[Wire | None]]:
        """Validate a node's ``round`` reply to a batch request; raise ProtocolError naming what is wrong."""
        active = RoundReply.read(reply.info, f"the reply for round {t0}", events=n).active
        if self.batch.decided is None:
            events = list(range(n))  # an embedding for every event: pushed or the answer to its query
        else:
            decided = [int(a) for a in self.batch.decided[:, m]]
            if active != decided:
                raise ProtocolError(
                    f"the node reports activations {active}, the server decided {decided}"[:300]
                )
            events = [i for i in range(n) if decided[i]]  # the events it was left out of send nothing
        if len(reply.parts) != len(events):
            raise ProtocolError(f"expected {len(events)} embeddings, received {len(reply.parts)} messages")
        queries = self.batch.queries[m]
        at_once = self.ends.probe is None and batched(len(queries))  # plain embeddings, every event
        rows = decode(queries[0]).rows if queries else 0
        if at_once and rows == decode(queries[-1]).rows:
            values = unpack(reply.parts, Embedding, np.arange(t0, t0 + n), m, (rows, self.embedding))
            if values is not None:
                self.batch.values[m] = (reply.parts, values)
                return list(active), None
        wires: list[Wire | None] = [None] * n
        for i, data in zip(events, reply.parts):
            t = t0 + i
            rows = decode(queries[i]).rows if self.batch.decided is None else self.query(t, m).rows
            # header, codec, length and finite values; a compressed frame's shape before its payload
            msg = peek(data, self.ends.probe, Embedding, self.ends.setting, (rows, self.embedding))
            if type(msg) is not Embedding or msg.client != m or msg.round != t:
                raise ProtocolError(f"message {i}: expected client {m}'s Embedding for round {t}, received a "
                                    f"{type(msg).__name__} from client {msg.client} for round {msg.round}")
            if msg.values.shape != (rows, self.embedding):
                raise ProtocolError(f"round {t}: expected an embedding of shape {(rows, self.embedding)}, "
                                    f"received {msg.values.shape}")
            wires[i] = Wire(m, data, msg)
        return list(active), wires

    def live(self) -> np.ndarray:
        """bool (clients,): whose reply to the batch was valid (the others are padded in it)."""
        return np.array([m in self.batch.replies for m in range(self.link.n_clients)])

    def activations(self, t0: int, t1: int) -> np.ndarray:
        """bool (t1 - t0, clients): which live clients rounds t0..t1-1 of the batch activated."""
        b = self.batch
        active = np.zeros((t1 - t0, self.link.n_clients), bool)
        for m, (flags, _) in b.replies.items():
            active[:, m] = flags[t0 - b.start:t1 - b.start]
        return active

    def at_once(self, t0: int, t1: int) -> bool:
        """Whether rounds t0..t1-1 of the batch can be played at once: every node live, its reply
        checked at once (:meth:`stacked`)."""
        return len(self.batch.values) == self.link.n_clients and t1 <= self.batch.start + self.batch.size

    def stacked(self, t0: int, t1: int) -> np.ndarray:
        """The server's stacked embeddings (n, R, M*e) of rounds t0..t1-1 (see :meth:`at_once`)."""
        i0, i1 = t0 - self.batch.start, t1 - self.batch.start
        return np.concatenate([self.batch.values[m][1][i0:i1] for m in range(self.link.n_clients)], axis=2)

    def learned(self, t0: int, GH: np.ndarray, active: np.ndarray) -> None:
        """Rounds t0.. of :meth:`stacked`, played: count their messages in play_round's order and hold
        the activated clients' gradients (d loss / d input ``GH``) for their next request."""
        b, e = self.batch, self.embedding
        n, M = active.shape
        i0, rounds = t0 - b.start, np.arange(t0, t0 + n)
        sizes = []  # per client: (embedding, query, gradient) bytes
        for m in range(M):
            on = np.flatnonzero(active[:, m])
            grads = pack(Gradient, rounds[on], m, GH[on, :, m * e:(m + 1) * e])
            self.outbox.setdefault(m, []).extend(zip(rounds[on].tolist(), grads))
            sizes.append((len(b.values[m][0][i0]), len(b.queries[m][i0]), len(grads[0]) if grads else 0))
            self.ledger.up[m] += n * sizes[m][0]
            self.ledger.down[m] += (n - on.size) * sizes[m][1] + on.size * sizes[m][2]
            self.ledger.messages[m] += 2 * n
        if self.sizes is not None:
            for row in active:
                self.sizes += [("up", m, sizes[m][0]) for m in range(M) if row[m]]
                for m in np.flatnonzero(~row).tolist():
                    self.sizes += [("down", m, sizes[m][1]), ("up", m, sizes[m][0])]
                self.sizes += [("down", m, sizes[m][2]) for m in range(M) if row[m]]

    def exchange(self, requests: dict[int, Envelope], ahead: Callable | None = None
                 ) -> dict[int, Envelope | Failure]:
        """The session's exchange, counting the bytes of every part sent or received (``wire_bytes``);
        a request sent ahead was counted as it went."""
        counted, self.ahead.counted = self.ahead.counted, {}
        self.wire_bytes += sum(len(p) for m, env in requests.items() if counted.get(m) is not env
                               for p in env.parts)
        replies = super().exchange(requests, ahead)
        self.wire_bytes += sum(
            len(p) for r in replies.values() if not isinstance(r, Failure) for p in r.parts
        )
        return replies

    # -- the transport play_round uses -------------------------------------------------------
    def down(self, msg: Message) -> Message:
        """Server -> client ``msg.client``: a query was delivered with the batch (it must be the one
        the batch carried); a gradient goes with the node's next request, encoded by the server's end
        of the client's link."""
        m = msg.client
        if isinstance(msg, Query):
            data = encode(msg)
            if data != self.batch.queries[m][msg.round - self.batch.start]:
                raise ProtocolError(f"client {m}: the server's query for round {msg.round} differs from the "
                                    "one the batch carried")
        else:  # a compressing end's state moves on once per gradient
            data = self.ends[m].send(msg)
            self.outbox.setdefault(m, []).append((msg.round, data))
        self._count(m, "down", len(data))
        return msg

    def up(self, wire: Wire) -> Embedding:
        """Client -> server: the embedding checked with its batch; count its bytes. A compressed one
        is decoded now by the server's end of the client's link."""
        self._count(wire.client, "up", len(wire.data))
        if self.ends.probe is None:
            return wire.msg  # plain: what the check decoded is what the server's end would
        return self.ends[wire.client].receive(wire.data)

    def _count(self, client: int, direction: str, n: int) -> None:
        self.ledger.add(client, direction, n)
        if self.sizes is not None:
            self.sizes.append((direction, client, n))

    def wire(self, m: int, t: int) -> Wire:
        """Client m's embedding of round t, as its reply to the batch brought it."""
        b = self.batch
        i = t - b.start
        flags, wires = b.replies[m]
        if wires is None:  # checked at once
            parts, values = b.values[m]
            return Wire(m, parts[i], Embedding(t, m, values[i]))
        return wires[i]


class RemoteClient:
    """Stands in, on the server's machine, for the client party on node ``index``: its embeddings are
    those its node sent with the batch; its gradients go with its next request."""

    def __init__(self, index: int, transport: LinkTransport):
        self.index, self.transport = index, transport

    def observe(self, t: int, x) -> None:
        """Nothing: the node reads its own features."""

    def on_event(self, t: int) -> Wire:
        return self.transport.wire(self.index, t)

    def on_query(self, query: Query) -> Wire:
        return self.transport.wire(self.index, query.round)

    def on_gradient(self, grad: Gradient) -> None:
        """Nothing: the gradient reaches the node with its next request (:meth:`LinkTransport.down`)."""
