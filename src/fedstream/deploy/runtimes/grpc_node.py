"""The gRPC runtime, client side: one long-lived process per client party.

:func:`run_node` connects to the server (:mod:`fedstream.deploy.runtimes.grpc`), says hello (its
client index; with mutual TLS its certificate ``client-M.pem`` says it too, and only that counts)
and answers every request on the open stream with a :class:`~fedstream.deploy.session.LiveNode`:
the party of the run's task, kept in memory, its state written to the cache folder every
``save_every`` seconds at most, at every boundary the server checkpoints, at setup and at finish
(a node started again rejoins from it). No process start, no polling, no sleep on the request
path: the node blocks on the stream's next frame.

A dropped connection (the server restarting, the network) is retried with backoff (0.1 s doubling
to 5 s) for ``retry_for`` seconds since the last contact, not treated as fatal; a refusal (another
client's index, an index the run does not have, a certificate of another deployment is refused at
the handshake and looks like an unreachable server) ends the node with an error. The node ends
when the server says bye (the run is over).
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

from fedstream.deploy.runtimes import grpc_wire as wire
from fedstream.deploy.runtimes.grpc import PATH, channel_options
from fedstream.deploy.runtimes.grpc_tls import client_credentials
from fedstream.deploy.session import LiveNode, default_cache_dir
from fedstream.errors import FedstreamError, ProtocolError

try:
    import grpc
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("the gRPC runtime needs grpcio: pip install 'fedstream[deploy]'") from exc

log = logging.getLogger("fedstream.deploy")
FATAL = (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.UNAUTHENTICATED)


class NodeRefused(FedstreamError):
    """The server refused this node (its index or certificate)."""


class GrpcNode:
    """Client ``index``'s node: connects to ``target`` (``HOST:PORT``) and answers the server."""

    def __init__(self, index: int, target: str, *, limit: int, tls_dir: Path | None = None,
                 data_root: str | None = None, cache_dir: Path | None = None, retry_for: float = 300.0,
                 server_name: str | None = None, save_every: float = 1.0):
        self.index, self.target, self.limit, self.retry_for = index, target, limit, retry_for
        self.tls_dir = Path(tls_dir) if tls_dir is not None else None
        self.server_name = server_name
        store = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        self.node = LiveNode(index, store=store, save_every=save_every, data=lambda adapter, config, m:
                             adapter.node_data(config, m, data_root=data_root, cache_dir=store))
        self.requests = 0  # requests answered
        self.last_contact = time.monotonic()  # when the server last sent a frame

    def run(self) -> None:
        """Serve until the server says bye; raise NodeRefused, or ProtocolError when the server stayed
        unreachable for ``retry_for`` seconds."""
        asyncio.run(self._run())

    async def _run(self) -> None:
        backoff = 0.1
        while True:
            try:
                if await self._session():
                    return
                backoff = 0.1  # the stream ended without a bye: reconnect
            except grpc.aio.AioRpcError as exc:
                if exc.code() in FATAL:
                    raise NodeRefused(f"client {self.index}: the server refused this node: {exc.details()}") \
                        from None
                if time.monotonic() - self.last_contact > self.retry_for:
                    raise ProtocolError(f"client {self.index}: no server at {self.target} for "
                                        f"{self.retry_for} s ({exc.code().name}: {exc.details()})") from None
                log.info("client %d: %s (%s); retrying in %.1f s", self.index, exc.code().name, exc.details(),
                         backoff)
            await asyncio.sleep(backoff)  # reconnecting, not the request path
            backoff = min(backoff * 2, 5.0)

    def _channel(self):
        options = channel_options(self.limit)
        if self.tls_dir is None:
            return grpc.aio.insecure_channel(self.target, options=options)
        if self.server_name:
            options.append(("grpc.ssl_target_name_override", self.server_name))
        credentials = client_credentials(self.tls_dir, self.index)
        return grpc.aio.secure_channel(self.target, credentials, options=options)

    async def _session(self) -> bool:
        """One connection: hello, then answer until bye (True) or the stream ends (False)."""
        async with self._channel() as channel:
            call = channel.stream_stream(PATH)()
            await call.write(wire.hello(self.index, limit=self.limit))
            while (data := await call.read()) is not grpc.aio.EOF:
                self.last_contact = time.monotonic()
                out = self._answer(data)
                if out is None:  # bye
                    await call.done_writing()
                    await call.code()
                    return True
                await call.write(out)
            code = await call.code()
            if code != grpc.StatusCode.OK:
                raise grpc.aio.AioRpcError(code, None, None, details=await call.details())
            return False

    def _answer(self, data: bytes) -> bytes | None:
        """The frame answering ``data`` (None: the server said bye)."""
        try:
            frame = wire.decode(data, limit=self.limit, sender=wire.SERVER)
        except ProtocolError as exc:
            return wire.error(wire.sequence(data), f"client {self.index}: {exc}", limit=self.limit)
        if frame.type == wire.BYE:
            return None
        if frame.type == wire.ECHO:
            return wire.encode(wire.ECHO, frame.seq, frame.env, limit=self.limit)
        if frame.type != wire.REQUEST:
            what = f"client {self.index}: a {wire.TYPES[frame.type]} frame from the server"
            return wire.error(frame.seq, what, limit=self.limit)
        self.requests += 1
        try:
            reply = self.node.handle(frame.env)
            return wire.encode(wire.REPLY, frame.seq, reply, limit=self.limit)
        except (FedstreamError, ValueError) as exc:  # a malformed request or this node's data: say why
            log.warning("client %d: %s request for round %d refused: %s", self.index, frame.env.kind,
                        frame.env.round, exc)
            return wire.error(frame.seq, str(exc), limit=self.limit)
