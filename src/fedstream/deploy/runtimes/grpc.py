"""The gRPC runtime, server side: long-lived client nodes on one bidirectional stream each.

The server party is the gRPC server; each client party is a long-lived process
(:mod:`fedstream.deploy.runtimes.grpc_node`) that connects, says hello and answers the requests on
its stream (``/fedstream.deploy.Node/Session`` of ``protocol.proto``, each message one ``Frame``:
:mod:`~fedstream.deploy.runtimes.grpc_wire`). :class:`GrpcLink` only moves bytes: the parties,
validation, faults and resume are the session layer's (:mod:`fedstream.deploy.session`). How it
times nodes out, lets a node rejoin, sends requests ahead and checks certificates:
docs/deploy-protocol.md, "The gRPC runtime".
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from pathlib import Path

from fedstream.deploy.records import SETUP, Envelope, Failure
from fedstream.deploy.runtimes import grpc_wire as wire
from fedstream.deploy.runtimes.grpc_tls import certificate_index, server_credentials
from fedstream.errors import ConfigError, ProtocolError

try:
    import grpc
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("the gRPC runtime needs grpcio: pip install 'fedstream[deploy]'") from exc

log = logging.getLogger("fedstream.deploy")
SERVICE, METHOD = "fedstream.deploy.Node", "Session"
PATH = f"/{SERVICE}/{METHOD}"
HELLO_TIMEOUT = 30.0  # seconds a new stream has to say hello


def channel_options(limit: int) -> list[tuple[str, int]]:
    """gRPC options of both ends: the message limit, keepalive every 20 s (10 s to answer)."""
    return [("grpc.max_send_message_length", limit), ("grpc.max_receive_message_length", limit),
            ("grpc.keepalive_time_ms", 20_000), ("grpc.keepalive_timeout_ms", 10_000),
            ("grpc.keepalive_permit_without_calls", 1), ("grpc.http2.max_pings_without_data", 0)]


class _Peer:
    """One connected client node: its stream and the replies it owes."""

    def __init__(self, index: int, context, task):
        self.index, self.context, self.task = index, context, task
        self.waiting: dict[int, asyncio.Future] = {}  # sequence number -> its reply
        self.inflight: int | None = None  # a timed-out request whose reply is still due
        self.seq = 0  # sequence number of the last request on this stream
        self.alive = True
        self.then: dict[int, Callable] = {}  # sequence number -> what may go ahead when its reply arrives
        self.ahead: tuple[Envelope, int, asyncio.Future, asyncio.Task] | None = None  # a request sent ahead
        self.writing: asyncio.Task | None = None  # the last write on this stream
        self.dropped: set[int] = set()  # requests sent ahead that the server did not use

    def forget(self, seq: int) -> None:
        """Stop waiting for the reply to request ``seq``."""
        self.waiting.pop(seq, None)
        self.then.pop(seq, None)

    def fail(self, reason: str) -> None:
        for fut in self.waiting.values():
            if not fut.done():
                fut.set_result(Failure(reason))
        self.waiting.clear()
        self.then.clear()


class GrpcLink:
    """The server's end: a gRPC server on ``listen`` (``HOST:PORT``; port 0: any free one) and a
    :class:`~fedstream.deploy.records.Link` to client nodes 0..``n_clients``-1. :meth:`start` it,
    :meth:`wait_for` the nodes, :meth:`close` at the end.

    A node that does not answer within ``timeout`` seconds (a setup, which loads the node's data:
    ``setup_timeout``, never less) gets a :class:`~fedstream.deploy.records.Failure` and is sent
    nothing until its late reply arrives; a node of the same client that connects while the old one
    is gone or hangs takes its place (:meth:`rejoined`). With ``tls_dir`` (mutual TLS) a node's
    client index is its certificate's, never its message's; a node of another index, of an index
    the run does not have, or of a client connected and answering is refused."""

    sends_ahead = True  # exchange takes ``ahead``

    def __init__(self, listen: str, n_clients: int, *, limit: int, tls_dir: Path | None = None,
                 timeout: float = 120.0, setup_timeout: float = 600.0, services: tuple = ()):
        self.listen, self.n_clients, self.limit, self.timeout = listen, n_clients, limit, timeout
        self.setup_timeout = max(setup_timeout, timeout)
        self.services = services  # more gRPC handlers on the same port (serving's Predictor)
        self.tls_dir = Path(tls_dir) if tls_dir is not None else None
        self.port: int | None = None
        self.frames = self.bytes_down = self.bytes_up = 0  # frames sent; bytes of frames each way
        self.frames_ahead = 0  # requests written ahead (exchange), counted in frames too
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="grpc-server", daemon=True)
        self._cond = threading.Condition()
        self._peers: dict[int, _Peer] = {}
        self._ever: set[int] = set()  # clients that connected at least once
        self._rejoined: set[int] = set()
        self._server = None
        self.refused: list[str] = []  # why each refused stream was refused (for tests and logs)

    # -- life cycle ------------------------------------------------------------------------------
    def start(self) -> GrpcLink:
        self._thread.start()
        self.port = self._call(self._start())
        return self

    async def _start(self) -> int:
        # no SO_REUSEPORT (gRPC's default on Linux): a second server on a taken port is refused
        server = grpc.aio.server(options=channel_options(self.limit) + [
            ("grpc.http2.min_recv_ping_interval_without_data_ms", 10_000), ("grpc.so_reuseport", 0)])
        handler = grpc.method_handlers_generic_handler(
            SERVICE, {METHOD: grpc.stream_stream_rpc_method_handler(self._session)})
        server.add_generic_rpc_handlers((handler, *self.services))
        try:
            if self.tls_dir is not None:
                port = server.add_secure_port(self.listen, server_credentials(self.tls_dir))
            else:
                port = server.add_insecure_port(self.listen)
        except RuntimeError:
            port = 0
        if not port:
            raise ConfigError(f"--listen {self.listen}: cannot listen there (the address is in use, by "
                              "another server perhaps, or not this machine's)")
        await server.start()
        self._server = server
        return port

    def _call(self, coro, timeout: float | None = None):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def wait_for(self, n_clients: int, timeout: float = 120.0) -> None:
        """Block until every client 0..n_clients-1 has connected (a Condition: no polling)."""
        with self._cond:
            if not self._cond.wait_for(lambda: all(m in self._peers for m in range(n_clients)), timeout):
                missing = sorted(set(range(n_clients)) - set(self._peers))
                raise ProtocolError(f"clients {missing} did not connect within {timeout} s (start one "
                                    f"`fedstream serve client CONFIG --index M --connect HOST:PORT` each)")
            self._rejoined.clear()

    def close(self, failed: str | None = None) -> None:
        """Tell every node the run is over (bye; ``failed``: why the run failed, the nodes end with it),
        let them hang up, stop the server and its thread."""
        if self._server is not None:
            try:
                self._call(self._close(failed), timeout=15)
            except Exception as exc:  # noqa: BLE001 - closing: report and go on
                log.warning("gRPC server: closing: %s", exc)
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)

    async def _close(self, failed: str | None) -> None:
        bye = wire.encode(wire.BYE, 0, Envelope("", 0, [], {"reason": failed[:2000]}) if failed else None,
                          limit=self.limit)
        peers = [p for p in self._peers.values() if p.alive]
        writing = [p.writing for p in peers if p.writing is not None]
        await asyncio.wait(writing, timeout=2) if writing else None  # one write at a time on a stream
        for peer in peers:
            try:
                await peer.context.write(bye)
            except Exception:  # noqa: BLE001 - a node already gone
                pass
        await asyncio.wait([p.task for p in peers], timeout=5) if peers else None
        await self._server.stop(grace=1)
        self._server = None

    # -- a node's stream ---------------------------------------------------------------------------
    async def _refuse(self, context, code, reason: str) -> None:
        self.refused.append(reason)
        log.warning("gRPC server: refused a client node (%s): %s", context.peer(), reason)
        await context.abort(code, reason)

    async def _session(self, request_iterator, context) -> None:
        try:
            first = await asyncio.wait_for(context.read(), HELLO_TIMEOUT)
        except asyncio.TimeoutError:
            await self._refuse(context, grpc.StatusCode.DEADLINE_EXCEEDED, "no hello")
        if first is grpc.aio.EOF:
            return
        try:
            hello = wire.decode(first, limit=self.limit, sender=wire.NODE)
            if hello.type != wire.HELLO:
                raise ProtocolError(f"expected a hello, received a {wire.TYPES[hello.type]} frame")
        except ProtocolError as exc:
            await self._refuse(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        claimed = hello.env.info.get("client")
        index = claimed
        if self.tls_dir is not None:
            index = certificate_index(context)
            if index is None:
                await self._refuse(context, grpc.StatusCode.PERMISSION_DENIED,
                                   "the certificate names no client (common name 'fedstream client M')")
            if claimed != index:
                await self._refuse(context, grpc.StatusCode.PERMISSION_DENIED,
                                   f"the node says it is client {claimed!r}, its certificate client {index}")
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < self.n_clients:
            await self._refuse(context, grpc.StatusCode.PERMISSION_DENIED,
                               f"client index {index!r}: this run has clients 0..{self.n_clients - 1}")
        peer = _Peer(index, context, asyncio.current_task())
        with self._cond:
            old = self._peers.get(index)
            busy = old is not None and old.alive and old.inflight is None
            if not busy:
                self._peers[index] = peer
                if index in self._ever:
                    self._rejoined.add(index)
                self._ever.add(index)
                self._cond.notify_all()
        if busy:
            await self._refuse(context, grpc.StatusCode.ALREADY_EXISTS,
                               f"client {index} is already connected and answering")
        if old is not None and old.alive:  # it hangs on a request that timed out: replaced
            log.warning("client %d: a new node takes the place of the one that hangs", index)
            old.alive = False
            old.fail("replaced by a new node")
            old.task.cancel()
        log.info("client %d connected (%s)", index, context.peer())
        try:
            while (data := await context.read()) is not grpc.aio.EOF:
                self.bytes_up += len(data)
                self._received(peer, data)
        finally:
            peer.alive = False
            peer.fail("the node's stream closed")
            with self._cond:
                if self._peers.get(index) is peer:
                    del self._peers[index]
            log.info("client %d disconnected", index)

    def _received(self, peer: _Peer, data: bytes) -> None:
        try:
            frame = wire.decode(data, limit=self.limit, sender=wire.NODE)
            if frame.type not in (wire.REPLY, wire.ERROR, wire.ECHO):
                raise ProtocolError(f"a {wire.TYPES[frame.type]} frame from a node")
        except ProtocolError as exc:
            peer.fail(f"client {peer.index}: {exc}")  # which request it answers is unknown: all fail
            return
        fut = peer.waiting.pop(frame.seq, None)
        if fut is None:
            if frame.seq == peer.inflight:
                log.info("client %d: the late reply to a timed-out request arrived (discarded)", peer.index)
                peer.inflight = None
            elif frame.seq in peer.dropped:
                log.info("client %d: the reply to a request sent ahead and not used (discarded)", peer.index)
                peer.dropped.discard(frame.seq)
            else:
                log.warning("client %d: a reply to no request (sequence %d) discarded", peer.index, frame.seq)
            return
        follow = peer.then.pop(frame.seq, None)
        if frame.type == wire.ERROR:
            fut.set_result(Failure(f"the client failed: {frame.env.info.get('reason', '')}"[:500]))
        else:
            fut.set_result(frame.env)
            if follow is not None:
                self._send_ahead(peer, follow, frame.env)

    def _send_ahead(self, peer: _Peer, ahead: Callable, reply: Envelope) -> None:
        """Write the node's next request now when ``ahead(m, reply)`` gives one; the next exchange that
        sends that request takes its reply."""
        try:
            env = ahead(peer.index, reply)
            if env is None or not peer.alive:
                return
            frame = wire.encode(wire.REQUEST, peer.seq + 1, env, limit=self.limit)
        except Exception as exc:  # noqa: BLE001 - nothing goes ahead; past the limit, the exchange stops the run
            log.log(logging.DEBUG if isinstance(exc, ProtocolError) else logging.ERROR,
                    "client %d: no request ahead: %r", peer.index, exc)
            return
        peer.seq += 1
        fut = peer.waiting[peer.seq] = self._loop.create_future()
        peer.ahead = (env, peer.seq, fut, self._write(peer, frame))
        self.frames_ahead += 1

    def _write(self, peer: _Peer, frame: bytes) -> asyncio.Task:
        """Write ``frame`` on the node's stream after the write before it; count it once written."""
        peer.writing = self._loop.create_task(self._put(peer.context, frame, peer.writing))
        peer.writing.add_done_callback(lambda task: task.cancelled() or task.exception() is None or log.info(
            "client %d: a write failed (the node is gone: a fault): %r", peer.index, task.exception()))
        return peer.writing

    async def _put(self, context, frame: bytes, before: asyncio.Task | None) -> None:
        if before is not None and not before.done():
            await asyncio.wait([before])
        await context.write(frame)
        self.frames += 1
        self.bytes_down += len(frame)

    # -- the Link --------------------------------------------------------------------------------
    def available(self) -> set[int]:
        """Clients whose node is connected and not still busy with a request that timed out."""
        with self._cond:
            return {m for m, p in self._peers.items() if p.alive and p.inflight is None}

    def rejoined(self) -> set[int]:
        """Clients whose node connected again since the last call (they need a setup)."""
        with self._cond:
            back, self._rejoined = self._rejoined, set()
        return back

    def exchange(self, requests: dict[int, Envelope], ahead: Callable | None = None
                 ) -> dict[int, Envelope | Failure]:
        """Send every request at once (one sent ahead, the same object, is not sent again);
        ``ahead(m, reply)``, called on the event loop as each reply arrives, may give node m's next
        request to write at once."""
        return self._call(self._exchange(wire.REQUEST, requests, ahead))

    def echo(self, payload: bytes) -> dict[int, Envelope | Failure]:
        """One bare round: ``payload`` to every connected node and back (the benchmark's floor)."""
        requests = {m: Envelope("", 0, [payload]) for m in self.available()}
        return self._call(self._exchange(wire.ECHO, requests))

    async def _exchange(self, ftype: int, requests: dict[int, Envelope], ahead: Callable | None = None
                        ) -> dict[int, Envelope | Failure]:
        out: dict[int, Envelope | Failure] = {}
        sent: dict[int, tuple[_Peer, int, asyncio.Future]] = {}
        writes: dict[int, asyncio.Task] = {}
        for m, env in requests.items():
            peer = self._peers.get(m)
            if peer is None or not peer.alive or peer.inflight is not None:
                out[m] = Failure("the node is not connected, or still busy with a request that timed out")
                continue
            early, peer.ahead = peer.ahead, None
            if early is not None and early[0] is env:  # written already: wait for its reply
                sent[m], writes[m] = (peer, early[1], early[2]), early[3]
                continue
            if early is not None:  # not what the server sends now (a new session): its reply is dropped
                peer.waiting.pop(early[1], None)
                peer.dropped.add(early[1])
            peer.seq += 1
            frame = wire.encode(ftype, peer.seq, env, limit=self.limit)  # past the limit: the run stops
            sent[m] = (peer, peer.seq, self._loop.create_future())
            peer.waiting[peer.seq] = sent[m][2]
            writes[m] = self._write(peer, frame)  # the writes overlap
        if ahead is not None:
            for m, (peer, seq, fut) in sent.items():
                if not fut.done():
                    peer.then[seq] = ahead
                elif isinstance(fut.result(), Envelope):  # a reply to a request sent ahead came already
                    self._send_ahead(peer, ahead, fut.result())
        # a node that does not take its request within the time-out (it stopped reading: its
        # flow-control window is full) is cut off
        timeout = self.setup_timeout if any(env.kind == SETUP for env in requests.values()) else self.timeout
        deadline = self._loop.time() + timeout
        if writes:
            await asyncio.wait(writes.values(), timeout=timeout)
        for m, task in writes.items():
            failed = None
            if not task.done():
                task.cancel()
                sent[m][0].task.cancel()  # its stream ends; started again, the node rejoins
                failed = f"the node did not take the request within {timeout} s"
            elif task.cancelled() or task.exception() is not None:  # the stream broke: that node's fault
                failed = f"could not send to the node: {None if task.cancelled() else task.exception()}"
            if failed:
                peer, seq, _ = sent.pop(m)
                peer.forget(seq)
                out[m] = Failure(failed[:500])
        if sent:
            left = max(0.0, deadline - self._loop.time())
            await asyncio.wait([f for _, _, f in sent.values()], timeout=left)
        for m, (peer, seq, fut) in sent.items():
            if fut.done():
                out[m] = fut.result()
            else:
                fut.cancel()
                peer.forget(seq)
                peer.inflight = seq
                out[m] = Failure(f"no reply within {timeout:g} s")
        return out


class GrpcRuntime:
    """What a task's server needs of the gRPC runtime (:class:`~fedstream.deploy.session.Runtime`):
    the started :class:`GrpcLink`, once every node has connected, and what it adds to the summary."""

    def __init__(self, link: GrpcLink, *, node_timeout: float = 120.0):
        self.link, self.node_timeout = link, node_timeout

    def connect(self, n_clients: int) -> GrpcLink:
        if n_clients != self.link.n_clients:
            raise ProtocolError(f"the gRPC server expects {self.link.n_clients} clients, the run {n_clients}")
        self.link.wait_for(n_clients, self.node_timeout)
        return self.link

    def extra(self) -> dict:
        ln = self.link
        return {"runtime": "grpc", "grpc": {"version": grpc.__version__, "frames": ln.frames,
                                            "frames_ahead": ln.frames_ahead,
                                            "frame_bytes_down": ln.bytes_down, "frame_bytes_up": ln.bytes_up,
                                            "message_limit": ln.limit, "tls": ln.tls_dir is not None,
                                            "counts": "this server process (since its last start)"}}

    def note(self) -> str:
        return f"{self.link.frames} gRPC frames, {self.link.bytes_down + self.link.bytes_up} frame bytes"
