"""``fedstream bench network --rtt-ms`` end to end (real client processes behind the delaying relay;
marked slow). The relay itself is tested in the default suite (tests/test_deploy_bench.py)."""

from __future__ import annotations

import pytest

pytest.importorskip("grpc")
pytestmark = pytest.mark.slow


def test_the_wan_bench_adds_a_round_trip_per_batch_and_reports_the_error_per_batch_size(data_root, tmp_path):
    from fedstream.bench.network import bench_network_wan, format_network_wan

    d = bench_network_wan(rtts_ms=(0, 40), batches=(1, 4), rounds=12, min_requests=3, error_rounds=48,
                          sets=[f"data.root={data_root}"], workdir=tmp_path / "bench", log=lambda s: None)
    assert [(r["rtt_ms"], r["batch"], r["events"]) for r in d["rows"]] == [
        (0, 1, 12), (0, 4, 12), (40, 1, 12), (40, 4, 12)]
    for r in d["rows"]:
        assert r["faults"] == 0 and r["tcp_bytes_per_event"] > r["payload_bytes_per_event"]
        if r["rtt_ms"]:
            # each request waits one round trip at least: events/s can only fall short of B / RTT
            # (one request's margin: the first may have been written ahead before the clock started)
            bound = r["latency_bound_events_per_second"]
            assert bound == r["batch"] / 0.040
            assert r["events_per_second"] <= bound * r["requests_per_node"] / (r["requests_per_node"] - 1)
            assert r["fraction_of_bound"] == r["events_per_second"] / bound
    errors = {e["batch"]: e["accumulated_error"] for e in d["errors"]}
    assert set(errors) == {None, 1, 4}
    assert errors[1] == errors[None]  # B = 1 is the simulator's run, bit for bit
    text = format_network_wan(d)
    assert "of bound" in text and "simulator (no batching), 48 rounds" in text
