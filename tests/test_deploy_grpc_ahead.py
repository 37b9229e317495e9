"""Requests ahead on the gRPC runtime (issue 19: "several requests may be in flight where the
protocol allows it"). A node that an event leaves passive owes no gradient, so the server writes its
next request as soon as its reply arrives (:meth:`LinkTransport.begin_batch`'s ``after``); the node
computes while the server waits for the others. The fast path is checked against the plain one
(``NetworkVFL(ahead=False)``) and the simulator: the same models bit for bit, every message's size,
the same frames and frame bytes; with ``topl``, inside a chunk only; at B > 1 for batches that
leave a node passive throughout; and a node that fails a request sent ahead with an error is a
fault of that round, one that drops its stream rejoins."""

from __future__ import annotations

import time

import pytest

from fedstream.config import load_config
from fedstream.deploy.records import ROUND
from fedstream.errors import ProtocolError
from tests.helpers.crashing import scaled_timeout
from tests.helpers.data import write_learnable_mnist
from tests.helpers.grpc_deploy import grpc_nodes
from tests.helpers.ovfl_deploy import assert_same_as_simulator, overrides, party_models, simulate, topl_config

grpc = pytest.importorskip("grpc")

from fedstream.deploy.runtimes.grpc import GrpcRuntime  # noqa: E402
from fedstream.ovfl.deploy.driver import NetworkVFL  # noqa: E402
from fedstream.ovfl.deploy.parties import server_stream  # noqa: E402


def grpc_run(config: dict, tmp, *, ahead: bool, before=None):
    """One run over an in-process gRPC server; ``before(node, env)`` runs ahead of each request a
    node handles. Returns the server, its nodes' reports and the link's frame counts."""
    with grpc_nodes(config, tmp) as (link, nodes):
        for node in nodes if before is not None else []:
            handle = node.node.node.handle
            node.node.node.handle = lambda env, node=node, handle=handle: (before(node, env), handle(env))[1]
        net = NetworkVFL(config, GrpcRuntime(link, node_timeout=30).connect(config["vfl.clients"]),
                         stream=server_stream(config), record_sizes=True, ahead=ahead)

        def back(t, y, prediction):  # a node that dropped its stream reconnects before the run ends
            deadline = time.monotonic() + scaled_timeout(120)
            while t == 60 and len(link.available()) < len(nodes) and time.monotonic() < deadline:
                time.sleep(0.05)

        net.run(on_round=back)
        reports = net.finish(models=True)
        frames = (link.frames, link.bytes_down, link.bytes_up, link.frames_ahead)
    assert all(n.error is None for n in nodes), [n.error for n in nodes]
    return net, reports, frames


def assert_same_runs(fast, plain) -> None:
    (a, a_reports, a_frames), (b, b_reports, b_frames) = fast, plain
    for x, y in zip(party_models(a, a_reports).values(), party_models(b, b_reports).values()):
        assert all((p == q).all() for p, q in zip(x, y))
    assert a.transport.sizes == b.transport.sizes
    sa, sb = a.summary(), b.summary()
    for key in ("bytes", "activation_rate", "accumulated_error", "interval_errors", "exchanges", "faults",
                "wire_part_bytes"):
        assert sa.get(key) == sb.get(key), key
    assert a_frames[:3] == b_frames[:3]  # the same frames, byte for byte
    assert a_frames[3] > 0 and b_frames[3] == 0


def test_requests_ahead_give_the_plain_run_and_the_simulators(tmp_path):
    """B = 1, Random(0.5), 2 clients, 160 rounds: about half the requests go ahead."""
    config = load_config(None, overrides(write_learnable_mnist(tmp_path), 160))
    engine, sizes, _ = simulate(config)
    fast = grpc_run(config, tmp_path / "fast", ahead=True)
    plain = grpc_run(config, tmp_path / "plain", ahead=False)
    assert_same_runs(fast, plain)
    assert_same_as_simulator(engine, party_models(fast[0], fast[1]))
    assert fast[0].transport.sizes == sizes
    passive = sum(160 - round(r * 160) for r in fast[0].summary()["activation_rate"])
    assert 0.7 * passive <= fast[2][3] <= passive  # none past the last round


def test_requests_ahead_with_topl_stay_inside_a_chunk(few_classes_root, small_chunks, tmp_path):
    """The server's policy decides a chunk's activations at its start: a request goes ahead only
    within the chunk (the policy learns at its end); the simulator's run, bit for bit."""
    config = topl_config(few_classes_root, 200)
    engine, sizes, summary = simulate(config)
    fast = grpc_run(config, tmp_path / "fast", ahead=True)
    assert_same_runs(fast, grpc_run(config, tmp_path / "plain", ahead=False))
    assert_same_as_simulator(engine, party_models(fast[0], fast[1]))
    assert fast[0].transport.sizes == sizes
    assert fast[0].summary()["selection_updates"] == summary["selection_updates"]


def test_requests_ahead_at_b_2_give_the_plain_run(tmp_path):
    """B = 2: a node that neither event of a batch activated gets the next batch's request ahead."""
    config = load_config(None, overrides(write_learnable_mnist(tmp_path), 120) | {"network.batch": 2})
    fast = grpc_run(config, tmp_path / "fast", ahead=True)
    assert_same_runs(fast, grpc_run(config, tmp_path / "plain", ahead=False))
    # requests went ahead (frames ahead): at most one per node and batch, none after the last batch
    assert 0 < fast[2][3] <= config["vfl.clients"] * (120 // 2 - 1)


@pytest.mark.parametrize("how", ["error", "drop"])
def test_a_node_that_fails_a_request_sent_ahead_is_a_fault_of_its_round(tmp_path, how):
    """Client 1 fails its first request from round 40 on that follows an event that left it passive:
    a request the server wrote ahead. An error reply is that round's fault; a dropped stream ends in
    a rejoin (the node reconnects); the run goes on."""
    config = load_config(None, overrides(write_learnable_mnist(tmp_path), 80))
    failed = []

    def fail(node, env):
        host = node.node.node.host
        if (node.node.index != 1 or env.kind != ROUND or env.round < 40 or failed
                or host.pending != [(env.round - 1, False)]):
            return
        failed.append(env.round)
        if how == "error":
            raise ProtocolError("refused on purpose")
        raise grpc.aio.AioRpcError(grpc.StatusCode.UNAVAILABLE, None, None, details="cable pulled")

    net, _, frames = grpc_run(config, tmp_path, ahead=True, before=fail)
    s = net.summary()
    assert s["rounds"] == 80 and failed and frames[3] > 0 and s["missed_events"][0] == 0
    faults = [(f["round"], f["client"]) for f in s["faults"]]
    if how == "error":
        assert faults == [(failed[0], 1)] and s["missed_events"][1] >= 1 and s["rejoins"] == []
    else:  # the stream dropped while the server still played the round before: by the time it sends
        # the round's request the node may be gone (a fault, or left out between batches) or back
        # already (the request goes to its new stream); either way it is set up again
        assert set(faults) <= {(failed[0], 1)}
        assert [r["client"] for r in s["rejoins"]] == [1]
