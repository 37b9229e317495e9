"""``fedstream bench network``'s pieces that run without Flower: the byte-counting relay and the
figures derived from a run's summary (the benchmark itself takes minutes: see docs/deploy.md)."""

from __future__ import annotations

import socket
import threading

import pytest

from fedstream.bench.network import _row, bench_network, format_network_bench
from fedstream.deploy.runtimes.relay import TcpRelay


def echo_server() -> tuple[socket.socket, int]:
    server = socket.create_server(("127.0.0.1", 0))

    def serve():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                while data := conn.recv(4096):
                    conn.sendall(data[::-1])

    threading.Thread(target=serve, daemon=True).start()
    return server, server.getsockname()[1]


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
