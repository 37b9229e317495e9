"""The server's link over a Flower ``Grid``: envelopes as Flower Messages, faults as :class:`Failure`.

An envelope travels as a ``RecordDict``: ``"fedstream"`` (a ``ConfigRecord`` of ``kind``,
``round`` and ``parts``, the fedstream messages the ledgers count), optional ``"info"``
(``ConfigRecord``) and ``"arrays"`` (``ArrayRecord``, only an audited run's final report).
:class:`GridLink` pushes one Message per node and polls for the replies; a node's fault (an error
reply, a reply that does not parse, none within ``timeout``) is a Failure, never an exception.
"""

from __future__ import annotations

import logging
import math
import time

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, RecordDict
from flwr.serverapp import Grid
from flwr.supercore.inflatable.inflatable_object import get_all_nested_objects

from fedstream.deploy.records import KINDS, MAX_PAYLOAD, Envelope, Failure
from fedstream.errors import ProtocolError

log = logging.getLogger("fedstream.deploy")

HELLO = "query.hello"
TIMING = "timing."  # info keys of a reply that time the ClientApp (stripped by GridLink)


# -- envelopes <-> records ---------------------------------------------------------------------
def to_record(env: Envelope) -> RecordDict:
    records = {"fedstream": ConfigRecord({"kind": env.kind, "round": int(env.round),
                                          "parts": [bytes(p) for p in env.parts]})}
    if env.info:
        records["info"] = ConfigRecord(dict(env.info))
    if env.arrays:
        records["arrays"] = ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in env.arrays.items()})
    return RecordDict(records)


def from_record(content: RecordDict, where: str) -> Envelope:
    """Parse and check a received RecordDict (``where`` names the sender for error messages)."""
    head = content.get("fedstream") if isinstance(content, RecordDict) else None
    if not isinstance(head, ConfigRecord):
        raise ProtocolError(f"{where}: expected a RecordDict with a 'fedstream' ConfigRecord, "
                            f"received {type(head).__name__ if head is not None else 'none'}")
    kind, rnd, parts = head.get("kind"), head.get("round"), head.get("parts")
    if kind not in KINDS:
        raise ProtocolError(f"{where}: expected kind in {KINDS}, received {kind!r}"[:300])
    if isinstance(rnd, bool) or not isinstance(rnd, int) or rnd < 0:
        raise ProtocolError(f"{where}: expected a round >= 0, received {rnd!r}"[:300])
    if not isinstance(parts, list) or not all(isinstance(p, bytes) for p in parts):
        raise ProtocolError(f"{where}: expected a list of bytes in 'parts', received {type(parts).__name__}")
    if (size := sum(map(len, parts))) > MAX_PAYLOAD:
        raise ProtocolError(f"{where}: payload of {size} bytes exceeds the {MAX_PAYLOAD}-byte limit")
    extra = set(content) - {"fedstream", "info", "arrays"}
    if extra:
        raise ProtocolError(f"{where}: unexpected records {sorted(extra)}"[:300])
    info = content.get("info")
    arrays = content.get("arrays")
    if info is not None and not isinstance(info, ConfigRecord):
        raise ProtocolError(f"{where}: 'info' must be a ConfigRecord, received {type(info).__name__}")
    if arrays is not None and not isinstance(arrays, ArrayRecord):
        raise ProtocolError(f"{where}: 'arrays' must be an ArrayRecord, received {type(arrays).__name__}")
    if arrays is not None and (size := sum(len(a.data) for a in arrays.values())) > MAX_PAYLOAD:
        raise ProtocolError(f"{where}: arrays of {size} bytes exceed the {MAX_PAYLOAD}-byte limit")
    return Envelope(kind, rnd, parts, dict(info or {}),
                    {k: np.array(v.numpy()) for k, v in (arrays or {}).items()})


def serialised_size(msg: Message) -> int:
    """Bytes of a Message as Flower ships it: its metadata and every object of its content, deflated."""
    return sum(len(obj.deflate()) for obj in get_all_nested_objects(msg).values())


# -- the link ----------------------------------------------------------------------------------
class GridLink:
    """A :class:`~fedstream.deploy.records.Link` over a Flower ``Grid``: client index -> node ID."""

    def __init__(self, grid: Grid, nodes: dict[int, int], n_clients: int, *, poll: float = 0.005,
                 timeout: float = 120.0):
        self.grid, self.poll, self.timeout = grid, poll, timeout
        self.n_clients = n_clients
        self.nodes = dict(nodes)  # client index -> node ID
        self.messages = 0
        # per reply, seconds (see runtimes.flower.TIMINGS): Flower delivering the message and starting
        # a ClientApp process, the process importing Flower and fedstream, to the handler, in the
        # handler, reply back here
        self.timings: list[tuple[float, ...]] = []
        self.bytes_down = self.bytes_up = 0  # Flower's serialised messages (objects of each Message)
        self._inflight: dict[int, str] = {}  # client -> ID of a timed-out message whose reply is still due
        self._known: set[int] = set(self.nodes.values())  # node IDs already asked their client index
        # new node ID -> the client it claims, while that client's node is fine
        self._claims: dict[int, int] = {}
        self._connected: set[int] = set(self.nodes.values())
        self._pulled_at: dict[int, float] = {}

    @classmethod
    def connect(cls, grid: Grid, n_clients: int, *, poll: float = 0.005, timeout: float = 120.0,
                node_timeout: float = 120.0) -> GridLink:
        """Wait for ``n_clients`` nodes, ask each its client index and map indices to nodes."""
        deadline = time.monotonic() + node_timeout
        while len(nodes := sorted(grid.get_node_ids())) < n_clients:
            if time.monotonic() > deadline:
                raise ProtocolError(
                    f"{len(nodes)} SuperNodes connected within {node_timeout} s, {n_clients} "
                    "(vfl.clients or chfl.clients) needed (start one per client with "
                    '--node-config "client-index=M")'
                )
            time.sleep(0.2)
        link = cls(grid, {}, n_clients, poll=poll, timeout=timeout)
        link.adopt(nodes)
        return link

    def adopt(self, nodes: list[int]) -> None:
        """Ask each of ``nodes`` its client index and map indices to nodes (one node per client)."""
        index_of = self._hello(nodes)
        if sorted(index_of.values()) != list(range(self.n_clients)):
            raise ProtocolError(
                f"the SuperNodes report client indices {sorted(index_of.values())}, expected "
                f'{list(range(self.n_clients))} (one SuperNode per client, --node-config "client-index=M")'
            )
        self.nodes = {m: node for node, m in index_of.items()}
        self._known = self._connected = set(nodes)

    # -- availability --------------------------------------------------------------------------
    def available(self) -> set[int]:
        """Clients whose node is connected and not still running a timed-out request."""
        self._connected = set(self.grid.get_node_ids())
        if self._inflight:
            done = {
                r.metadata.reply_to_message_id for r in self.grid.pull_messages(list(self._inflight.values()))
            }
            for m in [m for m, mid in self._inflight.items() if mid in done]:
                log.info("client %d: the late reply to a timed-out request arrived (discarded)", m)
                del self._inflight[m]
        return {m for m, node in self.nodes.items() if node in self._connected and m not in self._inflight}

    def rejoined(self) -> set[int]:
        """Ask new nodes their client index; a new node takes a client's place when the client's node
        has left or has a request that timed out (it crashed or hangs); return those clients."""
        self._connected = set(self.grid.get_node_ids())
        new = sorted(self._connected - self._known)
        self._known |= set(new)
        for node, m in self._hello(new).items():
            if 0 <= m < self.n_clients:
                self._claims[node] = m
            else:
                log.warning("SuperNode %d reports client index %d, expected 0..%d: ignored", node, m,
                            self.n_clients - 1)
        back = set()
        for node, m in sorted(self._claims.items()):
            old = self.nodes.get(m)
            if node not in self._connected or node == old:
                del self._claims[node]
            elif old not in self._connected or m in self._inflight:
                log.warning("client %d rejoins on SuperNode %d (was %s)", m, node, old)
                self.nodes[m] = node
                self._inflight.pop(m, None)
                del self._claims[node]
                back.add(m)
        return back

    def _hello(self, nodes: list[int]) -> dict[int, int]:
        """node ID -> the client index it reports (nodes that fail or do not say are left out)."""
        out = {}
        for node, reply in self._send({node: (HELLO, RecordDict()) for node in nodes}).items():
            head = None if isinstance(reply, Failure) else reply.content.get("fedstream")
            index = head.get("client") if isinstance(head, ConfigRecord) else None
            if isinstance(index, int) and not isinstance(index, bool):
                out[node] = index
            else:
                log.warning("SuperNode %d did not report a client index: %s", node,
                            reply.reason if isinstance(reply, Failure) else f"got {index!r}")
        return out

    # -- requests --------------------------------------------------------------------------------
    def exchange(self, requests: dict[int, Envelope]) -> dict[int, Envelope | Failure]:
        sent = {self.nodes[m]: (f"train.{env.kind}", to_record(env)) for m, env in requests.items()}
        pushed = time.time()
        replies = self._send(sent, group=str(next(iter(requests.values())).round))
        out: dict[int, Envelope | Failure] = {}
        for m in requests:
            node = self.nodes[m]
            reply = replies[node]
            if isinstance(reply, Failure):
                out[m] = reply
                continue
            try:
                env = from_record(reply.content, f"client {m} (node {node})")
            except ProtocolError as exc:
                out[m] = Failure(str(exc))
                continue
            stamps = [env.info.pop(TIMING + k, None) for k in ("born", "ready", "start", "end")]
            if all(isinstance(s, float) for s in stamps):
                born, ready, start, end = stamps
                born = ready if math.isnan(born) else born  # no /proc: start-up counted as delivery
                self.timings.append((born - pushed, ready - born, start - ready, end - start,
                                     self._pulled_at[node] - end))
            out[m] = env
        return out

    def _send(
        self, requests: dict[int, tuple[str, RecordDict]], group: str = ""
    ) -> dict[int, Message | Failure]:
        """Push one message per node, poll until every node replied or ``timeout``; node ID -> reply."""
        node_of: dict[str, int] = {}
        out: dict[int, Message | Failure] = {}
        for node, (mtype, content) in requests.items():
            msg = Message(content, dst_node_id=node, message_type=mtype, group_id=group)
            size = serialised_size(msg)
            try:
                (mid,) = list(self.grid.push_messages([msg]))
            except Exception as exc:  # noqa: BLE001 - the SuperLink refused it (e.g. the node left): that node's fault
                out[node] = Failure(f"the SuperLink did not take the message: {exc}"[:500])
                continue
            self.bytes_down += size
            self.messages += 1
            node_of[mid] = node
        waiting = set(node_of)
        deadline = time.monotonic() + self.timeout
        while waiting:
            for reply in self.grid.pull_messages(list(waiting)):
                mid = reply.metadata.reply_to_message_id
                if mid not in waiting:
                    continue
                waiting.discard(mid)
                node = node_of[mid]
                self._pulled_at[node] = time.time()
                self.bytes_up += serialised_size(reply)
                if reply.has_error():
                    out[node] = Failure(f"the ClientApp failed: {reply.error.reason}"[:500])
                elif reply.metadata.src_node_id != node:
                    out[node] = Failure(f"the reply came from node {reply.metadata.src_node_id}")
                else:
                    out[node] = reply
            if waiting:
                if time.monotonic() > deadline:
                    for mid in waiting:
                        node = node_of[mid]
                        out[node] = Failure(f"no reply within {self.timeout:g} s")
                        client = next((m for m, n in self.nodes.items() if n == node), None)
                        if client is not None:
                            self._inflight[client] = mid
                    break
                time.sleep(self.poll)
        return out
