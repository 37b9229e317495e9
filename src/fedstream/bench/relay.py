"""A TCP relay on loopback that counts what crosses the wire and, optionally, plays a wide-area link.

``fedstream bench network`` points the client nodes (gRPC) or the SuperNodes (Flower) at a
:class:`TcpRelay` in front of the server, so it counts every byte between them (HTTP/2 frames, message
objects, polls and heartbeats while idle), not just fedstream's payload. The relay forwards bytes
unchanged and in order; with TLS it counts the encrypted bytes.

A wide-area link (``fedstream bench network --rtt-ms R [--mbit BW]``), in user space, without root
or kernel modules (no ``tc netem``):

* **Propagation delay** ``delay`` seconds in each direction (R / 2 for a round-trip time R). Every
  chunk the relay reads is stamped with its arrival time and written on ``delay`` later; reading goes
  on meanwhile, so the link is a pipeline (bytes in flight: throughput is not divided by the delay),
  as a real link is, not a sleep per chunk.
* **Bandwidth** ``mbit`` Mbit/s in each direction: a token bucket per direction of ``burst`` bytes,
  refilled at the rate, taken before a chunk (at most ``burst`` bytes) is written. Over any interval
  of length T a direction forwards at most ``burst + rate * T`` bytes. The queue behind it (bytes
  read, not yet written) is bounded by ``buffer``: beyond it the relay stops reading, and TCP's own
  flow control slows the sender, as a bottleneck router's full queue would (without its losses).

One thread runs an asyncio event loop for all connections: a connection costs no threads, and a
chunk's timer is the loop's (``asyncio.sleep`` until its due time, never earlier).
:class:`RelayProcess` runs the same relay in a process of its own (``python -m
fedstream.bench.relay``), so that its loop never waits for the interpreter lock of the
process it measures (a gRPC server's threads), and the relay's CPU shows apart.
"""

from __future__ import annotations

import asyncio
import math
import socket
import subprocess
import sys
import threading
from collections import deque

CHUNK = 16384  # bytes read at once, and the most written at once under a bandwidth limit
BUFFER = 4 << 20  # bytes queued per direction before the relay stops reading


class TokenBucket:
    """``rate`` bytes per second, at most ``burst`` bytes at once; :meth:`take` says how long to wait.

    Tokens go negative when a take exceeds them: the wait returned is until they are back at zero,
    so over any interval [t0, t1] the bytes taken are at most ``burst + rate * (t1 - t0)``."""

    def __init__(self, rate: float, burst: int, now: float):
        if not (rate > 0 and math.isfinite(rate)):
            raise ValueError(f"bandwidth: {rate} bytes/s, expected a positive finite rate")
        if burst < 1:
            raise ValueError(f"burst: {burst} bytes, expected at least 1")
        self.rate, self.burst = rate, burst
        self.tokens, self.last = float(burst), now

    def take(self, n: int, now: float) -> float:
        """Take ``n`` bytes at time ``now``; the seconds to wait before sending them."""
        self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
        self.last = now
        self.tokens -= n
        return max(0.0, -self.tokens / self.rate)


class _Direction:
    """One direction of one connection: read from ``reader``, write to ``writer`` ``delay`` later."""

    def __init__(self, relay: TcpRelay, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 counter: str):
        self.relay, self.reader, self.writer, self.counter = relay, reader, writer, counter
        self.queue: deque[tuple[float, bytes | None]] = deque()  # (due time, chunk; None: end of stream)
        self.queued = 0
        self.arrived = asyncio.Event()  # set when the queue gets a chunk
        self.room = asyncio.Event()  # set when the queue is below the buffer
        self.room.set()
        self.rate: float | None = None  # the rate of ``bucket`` (the relay's may change: set_link)
        self.bucket: TokenBucket | None = None

    async def read(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while data := await self.reader.read(CHUNK):
                due = loop.time() + self.relay.delay
                self.queue.append((due, data))
                self.queued += len(data)
                self.relay.count("queued", len(data))
                self.arrived.set()
                if self.queued >= self.relay.buffer:
                    self.room.clear()
                    await self.room.wait()
        except (ConnectionError, OSError):
            pass
        self.queue.append((loop.time() + self.relay.delay, None))
        self.arrived.set()

    async def write(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            while not self.queue:
                self.arrived.clear()
                await self.arrived.wait()
            due, data = self.queue[0]
            while (wait := due - loop.time()) > 0:  # the propagation delay: never early
                await asyncio.sleep(wait)
            if data is None:
                if self.writer.can_write_eof():
                    self.writer.write_eof()
                return
            if self.relay.rate != self.rate:
                self.rate = self.relay.rate
                self.bucket = (None if self.rate is None
                               else TokenBucket(self.rate, self.relay.burst, loop.time()))
            if self.bucket is not None:  # the bandwidth: take the tokens of the chunk's bytes
                wait = self.bucket.take(len(data), loop.time())
                end = loop.time() + wait
                while (wait := end - loop.time()) > 0:
                    await asyncio.sleep(wait)
            self.queue.popleft()
            self.queued -= len(data)
            if self.queued < self.relay.buffer:
                self.room.set()
            self.relay.count(self.counter, len(data))  # before the write: the bytes may be read at once
            self.relay.count("queued", -len(data))
            self.writer.write(data)
            await self.writer.drain()


class TcpRelay:
    """Listens on 127.0.0.1:``port`` (0: any free port) and forwards each connection to ``target``.

    ``delay``: seconds each direction's bytes are held (one way: a round trip takes twice it);
    ``mbit``: each direction's bandwidth in Mbit/s (None: unlimited), a token bucket of ``burst``
    bytes; ``buffer``: bytes queued per direction before the relay stops reading. Both may be changed
    between runs (:meth:`set_link`); bytes already queued keep the due time they got."""

    def __init__(self, target: tuple[str, int], port: int = 0, *, delay: float = 0.0,
                 mbit: float | None = None, burst: int = CHUNK, buffer: int = BUFFER):
        self.target = target
        self.burst, self.buffer = burst, buffer
        if buffer < 1:
            raise ValueError(f"buffer: {buffer} bytes, expected at least 1")
        self.set_link(delay, mbit)
        self._server = socket.create_server(("127.0.0.1", port))
        self.port = self._server.getsockname()[1]
        self._lock = threading.Lock()
        self.to_target = self.from_target = 0  # bytes forwarded in each direction
        self.connections = 0
        self.queued = 0  # bytes read and not yet written, all connections and directions
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task] = set()  # each connection's four (read, write each way)
        self._connections: set[asyncio.Task] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="relay", daemon=True)
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(30)

    def set_link(self, delay: float = 0.0, mbit: float | None = None) -> None:
        """The link's one-way ``delay`` (seconds) and bandwidth (``mbit`` Mbit/s, None: unlimited), for
        every byte read (the delay) or written (the bandwidth) from now on."""
        if not (delay >= 0 and math.isfinite(delay)):
            raise ValueError(f"delay: {delay} s, expected a finite number >= 0")
        if mbit is not None and not (mbit > 0 and math.isfinite(mbit)):
            raise ValueError(f"bandwidth: {mbit} Mbit/s, expected a positive finite number")
        self.delay, self.mbit = float(delay), mbit
        self.rate = None if mbit is None else mbit * 1e6 / 8

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def reset(self) -> tuple[int, int]:
        """Return (to target, from target) bytes since the last reset, and start counting again."""
        with self._lock:
            counts = (self.to_target, self.from_target)
            self.to_target = self.from_target = 0
        return counts

    def in_flight(self) -> int:
        """Bytes read and not yet written (held by the delay or the bandwidth), over all connections."""
        with self._lock:
            return self.queued

    def count(self, counter: str, n: int) -> None:
        with self._lock:
            setattr(self, counter, getattr(self, counter) + n)

    async def _listen(self) -> None:
        self._listener = await asyncio.start_server(self._connect, sock=self._server)

    async def _connect(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            up_r, up_w = await asyncio.open_connection(*self.target)
        except OSError:
            client_w.close()
            return
        self._connections.add(asyncio.current_task())
        for w in (client_w, up_w):
            w.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._writers.add(w)
        with self._lock:
            self.connections += 1
        ways = [_Direction(self, client_r, up_w, "to_target"),
                _Direction(self, up_r, client_w, "from_target")]
        tasks = [asyncio.ensure_future(c) for way in ways for c in (way.read(), way.write())]
        self._tasks.update(tasks)
        try:
            await asyncio.gather(*tasks)
        except (ConnectionError, OSError, asyncio.CancelledError):  # cancelled: the relay closes
            pass
        finally:
            for t in tasks:
                t.cancel()
                self._tasks.discard(t)
            for w in (client_w, up_w):
                w.close()
                self._writers.discard(w)
            for way in ways:  # bytes a closed connection still held are no longer in flight
                self.count("queued", -way.queued)
            self._connections.discard(asyncio.current_task())

    async def _shutdown(self) -> None:
        self._listener.close()
        for t in list(self._tasks):
            t.cancel()
        for w in list(self._writers):
            w.close()
        await asyncio.gather(*self._connections, return_exceptions=True)

    def close(self) -> None:
        if self._loop.is_closed():
            return
        try:
            asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(30)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(30)
            self._loop.close()
            self._server.close()

    def __enter__(self) -> TcpRelay:  # noqa: PYI034
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class RelayProcess:
    """A :class:`TcpRelay` in a child process, with the same controls: :attr:`address`,
    :meth:`set_link`, :meth:`reset`, :meth:`in_flight`, :meth:`close`. The child reads one command a
    line on its stdin and answers one line on its stdout (see :func:`main`)."""

    def __init__(self, target: tuple[str, int], *, delay: float = 0.0, mbit: float | None = None):
        self.target = target
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "fedstream.bench.relay", target[0], str(target[1])],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        self.port = int(self._ask("port"))
        self.set_link(delay, mbit)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _ask(self, command: str) -> str:
        if self._proc.poll() is not None:
            raise RuntimeError(f"the relay process exited (code {self._proc.returncode})")
        self._proc.stdin.write(command + "\n")
        self._proc.stdin.flush()
        answer = self._proc.stdout.readline().strip()
        if not answer.startswith("ok"):
            raise RuntimeError(f"the relay process answered {answer or 'nothing'} to {command}")
        return answer[3:]

    def set_link(self, delay: float = 0.0, mbit: float | None = None) -> None:
        """As :meth:`TcpRelay.set_link` (checked here, before the child sees it)."""
        if not (delay >= 0 and math.isfinite(delay)):
            raise ValueError(f"delay: {delay} s, expected a finite number >= 0")
        if mbit is not None and not (mbit > 0 and math.isfinite(mbit)):
            raise ValueError(f"bandwidth: {mbit} Mbit/s, expected a positive finite number")
        self.delay, self.mbit = delay, mbit
        self._ask(f"link {delay!r} {'none' if mbit is None else repr(mbit)}")

    def reset(self) -> tuple[int, int]:
        to_target, from_target = self._ask("reset").split()
        return int(to_target), int(from_target)

    def in_flight(self) -> int:
        return int(self._ask("in_flight"))

    def close(self) -> None:
        if self._proc.poll() is None:
            try:
                self._ask("close")
            except (RuntimeError, OSError):
                pass
            try:
                self._proc.wait(30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        for f in (self._proc.stdin, self._proc.stdout):
            f.close()

    def __enter__(self) -> RelayProcess:  # noqa: PYI034
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def main(argv: list[str]) -> int:
    """``python -m fedstream.bench.relay HOST PORT``: a relay to HOST:PORT, driven by
    lines on stdin: ``port``, ``link DELAY MBIT|none``, ``reset``, ``in_flight``, ``close``; each
    answered by one line on stdout, ``ok [VALUE]`` or ``error MESSAGE``."""
    host, port = argv
    with TcpRelay((host, int(port))) as relay:
        for line in sys.stdin:
            command, *args = line.split()
            try:
                if command == "port":
                    answer = str(relay.port)
                elif command == "link":
                    relay.set_link(float(args[0]), None if args[1] == "none" else float(args[1]))
                    answer = ""
                elif command == "reset":
                    answer = " ".join(map(str, relay.reset()))
                elif command == "in_flight":
                    answer = str(relay.in_flight())
                elif command == "close":
                    print("ok", flush=True)
                    break
                else:
                    raise ValueError(f"unknown command {command}")
            except (ValueError, IndexError) as exc:
                print(f"error {exc}", flush=True)
                continue
            print(f"ok {answer}".rstrip(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
