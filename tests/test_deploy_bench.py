"""``fedstream bench network``'s pieces that run without Flower: the byte-counting relay and the
figures derived from a run's summary (the benchmark itself takes minutes: see docs/deploy.md)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable

import numpy as np
import pytest

from fedstream.bench.network import CpuClock, _row, bench_network, format_network_bench, process_cpu_seconds
from fedstream.bench.relay import RelayProcess, TcpRelay, TokenBucket


def loopback_server(handle: Callable[[socket.socket], None]) -> tuple[socket.socket, int]:
    """A server on a free port of 127.0.0.1 that hands each connection it accepts, one after another,
    to ``handle`` (in a thread of its own, until the server is closed); the server and its port."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                handle(conn)

    threading.Thread(target=serve, daemon=True).start()
    return server, server.getsockname()[1]


def echo_server(reverse: bool = True, chunk: int = 4096) -> tuple[socket.socket, int]:
    """A loopback server that sends back what it receives, each chunk reversed (or as it came)."""
    def echo(conn: socket.socket) -> None:
        while data := conn.recv(chunk):
            conn.sendall(data[::-1] if reverse else data)

    return loopback_server(echo)


def test_the_relay_forwards_bytes_unchanged_and_counts_both_directions():
    server, port = echo_server()
    with server, TcpRelay(("127.0.0.1", port)) as relay:
        with socket.create_connection(("127.0.0.1", relay.port)) as s:
            s.sendall(b"abcdef")
            got = b""
            while len(got) < 6:
                got += s.recv(16)
        assert got == b"fedcba"
        pause = threading.Event()
        for _ in range(100):  # the counters are updated by the relay's threads
            if relay.to_target == 6 and relay.from_target == 6:
                break
            pause.wait(0.02)
        assert relay.reset() == (6, 6) and relay.reset() == (0, 0)
        assert relay.connections == 1


def test_bench_figures_follow_from_the_run_summary():
    summary = {"rounds": 32, "wall_seconds": 8.0, "exchanges": 4, "accumulated_error": 0.5,
               "bytes": {"total": 3200}, "wire_part_bytes": 3300,
               "flower": {"message_bytes_down": 2000, "message_bytes_up": 2800, "mean_handler_seconds": 0.5,
                          "mean_process_imports_seconds": 1.5}}
    row = _row(16, summary, (4000, 2400), {"events_per_second": 100.0, "accumulated_error": 0.4})
    assert (
        row["requests_per_node"] == 2
        and row["events_per_second"] == 4.0
        and row["seconds_per_request"] == 4.0
    )
    assert row["payload_bytes_per_event"] == 100 and row["tcp_bytes_per_event"] == 200
    assert row["overhead_tcp_over_payload"] == 2.0 and row["overhead_flower_message_over_payload"] == 1.5
    assert row["time_per_reply_seconds"] == {"handler": 0.5, "process_imports": 1.5}
    text = format_network_bench({"flwr_version": "1.41.0", "clients": 4, "config": "ovfl-imnist", "cpus": 2,
                                 "load_average_before": [1.0], "load_average_after": [2.0], "rows": [row]})
    assert "   16      32     4.000" in text and "handler 0.50" in text


def test_bench_arguments_are_checked(tmp_path):
    with pytest.raises(ValueError, match="requests"):
        bench_network(requests=0, workdir=tmp_path)
    with pytest.raises(ValueError, match="batch"):
        bench_network(batches=(0,), workdir=tmp_path)


# -- the wide-area relay (fedstream bench network --rtt-ms R --mbit BW) ---------------------------------
def sink_server() -> tuple[socket.socket, int, list]:
    """A server that reads everything, records (time, bytes) of each read, then echoes a 1-byte ack."""
    reads: list = []

    def sink(conn: socket.socket) -> None:
        while data := conn.recv(65536):
            reads.append((time.perf_counter(), data))
        conn.sendall(b"!")

    return *loopback_server(sink), reads


def plain_echo_server() -> tuple[socket.socket, int]:
    return echo_server(reverse=False, chunk=65536)


def recv_exactly(s: socket.socket, n: int) -> bytes:
    got = bytearray()
    while len(got) < n:
        chunk = s.recv(min(65536, n - len(got)))
        assert chunk, f"the connection closed after {len(got)} of {n} bytes"
        got += chunk
    return bytes(got)


def test_a_round_trip_through_the_delaying_relay_takes_at_least_the_rtt():
    server, port = plain_echo_server()
    rtt = 0.06
    with server, TcpRelay(("127.0.0.1", port), delay=rtt / 2) as relay:
        with socket.create_connection(("127.0.0.1", relay.port)) as s:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for i in range(5):
                tic = time.perf_counter()
                s.sendall(bytes([i]) * 10)
                assert recv_exactly(s, 10) == bytes([i]) * 10
                assert time.perf_counter() - tic >= rtt  # a lower bound only: slow machines only add
        relay.set_link(0.0)
        with socket.create_connection(("127.0.0.1", relay.port)) as s:
            s.sendall(b"x")
            assert recv_exactly(s, 1) == b"x"


def test_the_delaying_relay_forwards_every_byte_unchanged_and_in_order_both_ways():
    server, port = plain_echo_server()
    payload = np.random.default_rng(0).integers(0, 256, 3_000_000, dtype=np.uint8).tobytes()
    got: list[bytes] = []
    with server, TcpRelay(("127.0.0.1", port), delay=0.005, mbit=400) as relay:
        with socket.create_connection(("127.0.0.1", relay.port)) as s:
            reader = threading.Thread(target=lambda: got.append(recv_exactly(s, len(payload))))
            reader.start()
            for i in range(0, len(payload), 7919):  # odd-sized writes, while the echo flows back
                s.sendall(payload[i : i + 7919])
            reader.join()
        assert got == [payload]
        assert relay.reset() == (len(payload), len(payload))


def test_the_relay_keeps_many_chunks_in_flight_at_once():
    """A propagation delay, not a sleep per chunk: while the first chunk waits out its delay, the
    relay keeps reading, so both chunks are in flight together (with a serialising sleep the
    second would not be read before the first was written)."""
    server, port, reads = sink_server()
    with server, TcpRelay(("127.0.0.1", port), delay=60.0) as relay:
        with socket.create_connection(("127.0.0.1", relay.port)) as s:
            s.sendall(b"a" * 1000)
            pause = threading.Event()
            for _ in range(1000):  # until the relay has read the first chunk (no upper bound on time:
                if relay.in_flight() == 1000:  # the delay, 60 s, only has to outlast this test)
                    break
                pause.wait(0.01)
            s.sendall(b"b" * 500)
            for _ in range(1000):
                if relay.in_flight() == 1500:
                    break
                pause.wait(0.01)
            assert relay.in_flight() == 1500
        assert reads == [] and relay.to_target == 0


def test_the_bandwidth_limit_bounds_throughput_from_above():
    server, port, reads = sink_server()
    mbit, n = 8.0, 600_000  # 1,000,000 bytes/s
    rate = mbit * 1e6 / 8
    with server, TcpRelay(("127.0.0.1", port), mbit=mbit) as relay:
        with socket.create_connection(("127.0.0.1", relay.port)) as s:
            tic = time.perf_counter()
            s.sendall(b"z" * n)
            s.shutdown(socket.SHUT_WR)
            assert recv_exactly(s, 1) == b"!"
        assert sum(len(d) for _, d in reads) == n
        # at most burst + rate x time bytes: the last byte cannot arrive sooner (it may arrive later)
        assert reads[-1][0] - tic >= (n - relay.burst) / rate


def test_the_token_bucket_never_lets_more_than_burst_plus_rate_times_time_through():
    rate, burst = 1000.0, 100
    bucket = TokenBucket(rate, burst, now=0.0)
    rng = np.random.default_rng(1)
    now, sent = 0.0, []
    for n in rng.integers(1, 250, 300):
        now += rng.uniform(0, 0.3)
        now += bucket.take(int(n), now)  # waits as the relay does, then sends at ``now``
        sent.append((now, int(n)))
    chunk = max(n for _, n in sent)  # the window's first send may overdraw by one chunk
    for i, (t0, _) in enumerate(sent):  # the plain reference: every window [t0, t1]
        total = 0
        for t1, n in sent[i:]:
            total += n
            assert total <= burst + rate * (t1 - t0) + chunk + 1e-6


@pytest.mark.parametrize(("kw", "match"), [({"delay": -0.001}, "delay"), ({"delay": float("nan")}, "delay"),
                                           ({"mbit": 0}, "bandwidth"), ({"mbit": float("inf")}, "bandwidth"),
                                           ({"buffer": 0}, "buffer")])
def test_the_relay_refuses_a_link_it_cannot_play(kw, match):
    with pytest.raises(ValueError, match=match):
        TcpRelay(("127.0.0.1", 9), **kw)


def test_the_relay_in_its_own_process_delays_counts_and_changes_its_link():
    server, port = plain_echo_server()
    with server, RelayProcess(("127.0.0.1", port), delay=0.02) as relay:
        with socket.create_connection(("127.0.0.1", relay.port)) as s:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            tic = time.perf_counter()
            s.sendall(b"hello")
            assert recv_exactly(s, 5) == b"hello"
            assert time.perf_counter() - tic >= 0.04
            relay.set_link(0.05, 100.0)
            tic = time.perf_counter()
            s.sendall(b"again")
            assert recv_exactly(s, 5) == b"again"
            assert time.perf_counter() - tic >= 0.1
        assert relay.reset() == (10, 10) and relay.in_flight() == 0
        with pytest.raises(ValueError, match="bandwidth"):
            relay.set_link(0.0, -1.0)


def test_the_cpu_clock_counts_a_process_busy_and_not_one_asleep():
    """The bench's CPU columns: a child that spins uses CPU seconds, one that sleeps almost none;
    per-unit figures divide by the units; a process that is gone has no CPU time (None)."""
    import subprocess
    import sys

    # the spinning child says when it has spun 0.6 CPU s: no wall-clock wait to outlast a slow machine
    spin = subprocess.Popen([sys.executable, "-c", "import time\nt = time.process_time()\n"
                             "while time.process_time() - t < 0.6: pass\nprint('spun', flush=True)\n"
                             "time.sleep(30)"], stdout=subprocess.PIPE, text=True)
    rest = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        clock = CpuClock([spin.pid, rest.pid])
        assert spin.stdout.readline().strip() == "spun"
        busy, idle = (process_cpu_seconds(p.pid) for p in (spin, rest))
        assert busy >= 0.5 > 0.2 > idle  # the kernel's tick accounting may fall a tick or two short
        per = clock.per(2, "round")
        assert per["node_cpu_ms_per_round"] > 0 and per["server_cpu_ms_per_round"] >= 0
    finally:
        for p in (spin, rest):
            p.kill()
            p.wait()
        spin.stdout.close()
    assert process_cpu_seconds(spin.pid) is None
    assert CpuClock([spin.pid]).per(1, "request")["node_cpu_ms_per_request"] is None
