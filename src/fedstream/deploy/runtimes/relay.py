"""A byte-counting TCP relay on loopback: what really crosses the wire between SuperNodes and SuperLink.

``fedstream bench network`` points the SuperNodes at a :class:`TcpRelay` in front of the SuperLink,
so it counts every byte of Flower's Fleet API traffic (HTTP requests and responses, message
objects, the nodes' polls and heartbeats while idle), not just fedstream's payload. The relay
forwards bytes unchanged; with TLS it counts the encrypted bytes.
"""

from __future__ import annotations

import socket
import threading


class TcpRelay:
    """Listens on 127.0.0.1:``port`` (0: any free port) and forwards each connection to ``target``."""

    def __init__(self, target: tuple[str, int], port: int = 0):
        self.target = target
        self._server = socket.create_server(("127.0.0.1", port))
        self.port = self._server.getsockname()[1]
        self._lock = threading.Lock()
        self.to_target = self.from_target = 0  # bytes forwarded in each direction
        self.connections = 0
        self._closed = False
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, name="relay-accept", daemon=True).start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def reset(self) -> tuple[int, int]:
        """Return (to target, from target) bytes since the last reset, and start counting again."""
        with self._lock:
            counts = (self.to_target, self.from_target)
            self.to_target = self.from_target = 0
        return counts

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            with self._lock:
                self.connections += 1
                self._sockets += [client, upstream]
            threading.Thread(target=self._pipe, args=(client, upstream, "to_target"), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, "from_target"), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, counter: str) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
                with self._lock:
                    setattr(self, counter, getattr(self, counter) + len(data))
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._closed = True
        self._server.close()
        with self._lock:
            for s in self._sockets:
                s.close()
            self._sockets.clear()

    def __enter__(self) -> TcpRelay:  # noqa: PYI034
        return self

    def __exit__(self, *exc) -> None:
        self.close()
