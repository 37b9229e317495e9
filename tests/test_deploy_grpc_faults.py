"""Faults on the gRPC runtime (issue 19), in one process: the session layer's fault, rejoin and resume
logic over real gRPC streams. A node that hangs is timed out, padded and recorded, and a new node of
its client takes its place; a dropped connection is retried with backoff and the node rejoins; a
server restarted from its checkpoint continues bit for bit at B = 1. (Over real processes, killed
with SIGKILL: tests/test_deploy_grpc_processes.py, marked slow.)"""

from __future__ import annotations

import threading
import time

import pytest

from fedstream.config import load_config
from fedstream.deploy.records import ROUND
from tests.helpers.crashing import scaled_timeout
from tests.helpers.data import write_learnable_mnist
from tests.helpers.grpc_deploy import NodeThread, grpc_nodes
from tests.helpers.ovfl_deploy import assert_same_as_simulator, overrides, party_models, simulate

grpc = pytest.importorskip("grpc")

from fedstream.deploy.runtimes.grpc import GrpcLink, GrpcRuntime  # noqa: E402
from fedstream.ovfl.deploy.driver import NetworkVFL  # noqa: E402
from fedstream.ovfl.deploy.parties import server_stream  # noqa: E402


def _server(config, link) -> NetworkVFL:
    return NetworkVFL(config, GrpcRuntime(link, node_timeout=30).connect(config["vfl.clients"]),
                      stream=server_stream(config), record_sizes=True)


def _wrap(node: NodeThread, before) -> None:
    """Call ``before(env)`` ahead of each request node ``node`` handles."""
    handle = node.node.node.handle

    def wrapped(env):
        before(env)
        return handle(env)

    node.node.node.handle = wrapped


def until_back(link, m: int, *, at: int):
    """An ``on_round`` that waits at round ``at`` until client m's node is connected again (it
    reconnects with backoff; the test wants it back before the run ends)."""
    def wait(t, y, prediction):
        deadline = time.monotonic() + scaled_timeout(120)
        while t == at and m not in link.available() and time.monotonic() < deadline:
            time.sleep(0.05)

    return wait


@pytest.fixture()
def config(tmp_path):
    return load_config(None, overrides(write_learnable_mnist(tmp_path), 80))


def test_a_node_that_hangs_is_timed_out_padded_and_replaced(tmp_path, config):
    """Client 1's node really hangs at round 30 (it waits on an event the test sets at the end), so
    it is timed out whatever the machine's load; the reply time-out is scaled to the load so that
    client 0, healthy, never is, and the setups have their own, longer time-out."""
    release = threading.Event()
    timeout = scaled_timeout(3.0)  # a healthy node answers a round in milliseconds
    with grpc_nodes(config, tmp_path, timeout=timeout) as (link, nodes):
        def hang(env):
            if env.kind == ROUND and env.round == 30:
                spare = NodeThread(1, link.port, config, tmp_path)  # its replacement starts meanwhile
                nodes.append(spare)
                release.wait()  # set once the run is over

        _wrap(nodes[1], hang)
        try:
            net = _server(config, link)
            net.run(on_round=until_back(link, 1, at=31))
            net.finish()
        finally:
            nodes[1].node.retry_for = 0.5  # the hung node, released, finds its place taken: let it give up
            release.set()
    s = net.summary()
    assert s["rounds"] == 80 and s["faults"][0]["round"] == 30 and s["faults"][0]["client"] == 1
    assert f"no reply within {timeout:g} s" in s["faults"][0]["reason"]
    assert {f["client"] for f in s["faults"]} == {1}, s["faults"]
    assert s["missed_events"][1] >= 1 and s["missed_events"][0] == 0
    assert [r["client"] for r in s["rejoins"]] == [1]
    assert len(s["clients"]) == 2  # both nodes reported at the finish


def test_a_dropped_connection_is_retried_and_the_node_rejoins(tmp_path, config):
    with grpc_nodes(config, tmp_path) as (link, nodes):
        dropped = []

        def drop(env):
            if env.kind == ROUND and env.round == 40 and not dropped:
                dropped.append(env.round)
                raise grpc.aio.AioRpcError(grpc.StatusCode.UNAVAILABLE, None, None, details="cable pulled")

        _wrap(nodes[0], drop)
        net = _server(config, link)
        net.run(on_round=until_back(link, 0, at=41))
        net.finish()
    assert all(n.error is None for n in nodes)
    s = net.summary()
    assert s["rounds"] == 80 and {f["client"] for f in s["faults"]} == {0}
    assert [r["client"] for r in s["rejoins"]] == [0]


def test_a_restarted_server_resumes_bit_for_bit(tmp_path, config):
    """The server dies at round 50 (checkpoints every 20 rounds); a new server loads its checkpoint
    at 40, the same nodes go back to their state of round 40: the uninterrupted run's models."""
    from tests.helpers.crashing import crash_then_load

    config = dict(config, **{"checkpoint.every": 20})
    engine, sizes, _ = simulate(config)
    with grpc_nodes(config, tmp_path) as (link, nodes):
        second = crash_then_load(lambda: _server(config, link), at=50, checkpoint=tmp_path / "ckpt.npz")
        second.run(checkpoint=tmp_path / "ckpt.npz")
        reports = second.finish(models=True)
    assert all(n.error is None for n in nodes)
    assert second.summary()["faults"] == []
    assert_same_as_simulator(engine, party_models(second, reports))


def test_a_setup_has_its_own_time_out_longer_than_a_rounds(tmp_path, config):
    """A setup loads the node's data (and may import and compile): it waits ``setup_timeout``, not
    the round's reply time-out. Client 1's setup takes twice the reply time-out and the run goes on
    without a fault; the setup time-out is never shorter than the reply time-out."""
    from fedstream.deploy.records import SETUP

    timeout = scaled_timeout(2.0)
    short = GrpcLink("127.0.0.1:0", 2, limit=1 << 20, timeout=timeout, setup_timeout=1.0)
    assert short.setup_timeout == timeout  # never shorter than a round's
    with grpc_nodes(config, tmp_path, timeout=timeout, setup_timeout=4 * timeout) as (link, nodes):
        slow = threading.Event()

        def load_slowly(env):
            if env.kind == SETUP:
                slow.wait(2 * timeout)  # never set: the setup takes 2 x the reply time-out

        _wrap(nodes[1], load_slowly)
        net = _server(config, link)
        net.run()
        net.finish()
    s = net.summary()
    assert s["rounds"] == 80 and s["faults"] == [] and s["missed_events"] == [0, 0]


def test_a_node_that_hangs_in_its_first_setup_stops_the_run_after_the_setup_time_out(tmp_path, config):
    """A node whose setup never answers is timed out after ``setup_timeout`` (it really hangs), and
    the run stops before round 0 naming it."""
    from fedstream.deploy.records import SETUP
    from fedstream.errors import ProtocolError

    release = threading.Event()
    with grpc_nodes(config, tmp_path, timeout=0.5, setup_timeout=1.0) as (link, nodes):
        def hang(env):
            if env.kind == SETUP:
                release.wait()

        _wrap(nodes[1], hang)
        try:
            with pytest.raises(ProtocolError) as caught:
                _server(config, link).run()
        finally:
            release.set()
    message = str(caught.value)
    assert "did not set up" in message and "client 1: no reply within 1 s" in message
    assert "before round 0" in message
