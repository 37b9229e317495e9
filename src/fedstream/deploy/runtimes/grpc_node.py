"""The gRPC runtime, client side: one long-lived process per client party.

A :class:`GrpcNode` connects to the server (:mod:`fedstream.deploy.runtimes.grpc`), says hello and
answers every request on its stream with a :class:`~fedstream.deploy.session.Node` (the party kept
in memory, its state written at most every ``save_every`` seconds and at every boundary). A
dropped connection is retried with backoff for ``retry_for`` seconds; a refusal or a TLS failure
ends the node with an error, as does a bye saying the server's run failed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path

from fedstream.deploy.records import SETUP
from fedstream.deploy.runtimes import grpc_wire as wire
from fedstream.deploy.runtimes.grpc import PATH, channel_options
from fedstream.deploy.runtimes.grpc_tls import client_credentials, tls_failure
from fedstream.deploy.session import Node, default_cache_dir, machine_data
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
                 server_name: str | None = None, save_every: float = 1.0, own_config: dict | None = None):
        self.index, self.target, self.limit, self.retry_for = index, target, limit, retry_for
        self.own_config = own_config  # the node's own config and --set: said where the server's differs
        self.tls_dir = Path(tls_dir) if tls_dir is not None else None
        self.server_name = server_name
        store = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        self.node = Node(index, store=store, save_every=save_every, data=machine_data(data_root, store))
        self.requests = 0  # requests answered
        self.server_failed: str | None = None  # why the server's run failed, as its bye said
        self.last_contact = time.monotonic()  # when the server last sent a frame
        self.heard = False  # whether the server ever sent a frame (then TLS worked: a failure now is not its)

    def run(self) -> None:
        """Serve until the server says bye; raise NodeRefused, or ProtocolError when the server stayed
        unreachable for ``retry_for`` seconds or its bye says its run failed."""
        asyncio.run(self._run())

    async def _run(self) -> None:
        backoff = 0.1
        while True:
            try:
                if await self._session():
                    if self.server_failed is not None:
                        raise ProtocolError(
                            f"client {self.index}: the server's run failed: {self.server_failed}")
                    return
                backoff = 0.1  # the stream ended without a bye: reconnect
            except grpc.aio.AioRpcError as exc:
                if exc.code() in FATAL:
                    raise NodeRefused(f"client {self.index}: the server refused this node: {exc.details()}") \
                        from None
                first = not self.heard and exc.code() == grpc.StatusCode.UNAVAILABLE
                why = first and await asyncio.to_thread(tls_failure, exc.details() or "", self.target,
                                                        self.tls_dir, self.index)
                if why:  # retrying cannot mend the credentials
                    raise ProtocolError(f"client {self.index}: {why}") from None
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
                self.last_contact, self.heard = time.monotonic(), True
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
            self.server_failed = frame.env.info.get("reason")
            return None
        if frame.type == wire.ECHO:
            return wire.encode(wire.ECHO, frame.seq, frame.env, limit=self.limit)
        if frame.type != wire.REQUEST:
            what = f"client {self.index}: a {wire.TYPES[frame.type]} frame from the server"
            return wire.error(frame.seq, what, limit=self.limit)
        self.requests += 1
        if frame.env.kind == SETUP and self.own_config is not None:
            self._compare(frame.env.info.get("config"))
        try:
            reply = self.node.handle(frame.env)
            return wire.encode(wire.REPLY, frame.seq, reply, limit=self.limit)
        except (FedstreamError, ValueError) as exc:  # a malformed request or this node's data: say why
            log.warning("client %d: %s request for round %d refused: %s", self.index, frame.env.kind,
                        frame.env.round, exc)
            return wire.error(frame.seq, str(exc), limit=self.limit)

    def _compare(self, sent: str | None) -> None:
        """Warn once when the config the server sent differs from the node's own (which it ignores but
        for ``data.root``)."""
        own, self.own_config = json.loads(json.dumps(self.own_config, default=str)), None
        try:
            theirs = json.loads(sent or "")
        except ValueError:  # the setup request itself says what is wrong
            return
        keys = sorted(k for k in set(own) | set(theirs) if k != "data.root" and own.get(k) != theirs.get(k))
        differ = [f"{k} = {own.get(k, '(unset)')} here, {theirs.get(k, '(unset)')} from the server"
                  for k in keys]
        more = f"; and {len(differ) - 8} more" if len(differ) > 8 else ""
        if differ:
            log.warning("client %d: this node's config differs from the server's, which it follows (the "
                        "server's config holds for every party; only the data folder is the node's own): "
                        "%s%s", self.index, "; ".join(differ[:8]), more)
