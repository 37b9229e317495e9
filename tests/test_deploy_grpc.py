"""Online VFL, batch VFL and CHFL on the gRPC runtime give the simulator's results (issue 19, B = 1).

The server's :class:`~fedstream.deploy.runtimes.grpc.GrpcLink` on 127.0.0.1 (an ephemeral port) and
one client node per thread, each a real gRPC client on its own stream with its party in memory:
the models are compared bitwise, every message's size one by one.
"""

from __future__ import annotations

import pytest

from fedstream.config import load_config
from fedstream.deploy.runtimes.grpc import GrpcRuntime
from fedstream.ovfl.deploy.driver import NetworkVFL
from fedstream.ovfl.deploy.parties import server_stream
from tests.helpers.data import write_learnable_mnist
from tests.helpers.grpc_deploy import grpc_nodes
from tests.helpers.ovfl_deploy import assert_same_as_simulator, overrides, party_models, simulate

pytest.importorskip("grpc")


def grpc_run(config: dict, tmp, **kwargs):
    with grpc_nodes(config, tmp, **kwargs) as (link, nodes):
        runtime = GrpcRuntime(link, node_timeout=30)
        net = NetworkVFL(config, runtime.connect(config["vfl.clients"]), stream=server_stream(config),
                         record_sizes=True)
        net.run()
        reports = net.finish(models=True)
    assert all(n.error is None for n in nodes), [n.error for n in nodes]
    return net, reports, runtime


@pytest.mark.parametrize("activation", ["random", "event"])
def test_online_vfl_over_grpc_equals_the_simulator(tmp_path, activation):
    """200 rounds at B = 1: models bit for bit, every message's size, interval errors."""
    config = load_config(None, overrides(write_learnable_mnist(tmp_path), 200) | {
        "activation.name": activation, "activation.threshold": 0.0})
    engine, sizes, summary = simulate(config)
    net, reports, runtime = grpc_run(config, tmp_path)
    assert_same_as_simulator(engine, party_models(net, reports))
    assert net.transport.sizes == sizes
    got = net.summary()
    for key in ("bytes", "activation_rate", "accumulated_error", "interval_errors"):
        assert got.get(key) == summary.get(key), key
    assert got["exchanges"] == 200 + 2 and got["faults"] == []
    assert runtime.extra()["grpc"]["frames"] == config["vfl.clients"] * (200 + 2)


def test_batch_vfl_over_grpc_equals_the_simulator(data_root, tmp_path):
    """The compression paper's split learning over gRPC: the simulator's epochs, bytes and models
    (torch's tolerance, as over the in-process link); the server reads the labels only."""
    from fedstream.vfl.deploy.data import load_labels
    from fedstream.vfl.deploy.driver import NetworkBatchVFL
    from tests.helpers.models import assert_same_models
    from tests.helpers.vfl_deploy import ATOL, assert_same_run, deployed_models, simulate_vfl, vfl_tiny_config

    config = vfl_tiny_config(data_root)
    want, want_models = simulate_vfl(config)
    server_config = dict(config, **{"data.root": str(tmp_path / "the-server-has-no-images")})
    with grpc_nodes(config, tmp_path) as (link, nodes):
        net = NetworkBatchVFL(server_config, GrpcRuntime(link).connect(3),
                              labels=load_labels(config, str(data_root)))
        got = net.run(models=True)
    assert all(n.error is None for n in nodes) and got["faults"] == []
    assert_same_run(got, want)
    assert_same_models(deployed_models(net), want_models, atol=ATOL)


def test_chfl_batch_federation_over_grpc_equals_the_simulator(covertype_root, tmp_path):
    """CHFL's FedAvg rounds run on the gRPC runtime too (Flower stays its default runtime)."""
    from fedstream.chfl.deploy.driver import NetworkCHFL
    from tests.helpers.chfl_deploy import assert_same_result, chfl_tiny_config, server_config, simulate_chfl

    config = chfl_tiny_config(covertype_root)
    want, _ = simulate_chfl(config)
    with grpc_nodes(config, tmp_path) as (link, nodes):
        net = NetworkCHFL(server_config(config, tmp_path), GrpcRuntime(link).connect(config["chfl.clients"]))
        got = net.run()
    assert all(n.error is None for n in nodes) and got["faults"] == []
    assert_same_result(got, want)
