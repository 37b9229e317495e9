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


def test_a_second_server_on_a_taken_port_is_refused(capsys):
    from fedstream.cli import main

    first = GrpcLink("127.0.0.1:0", 2, limit=1 << 20).start()
    try:
        with pytest.raises(ConfigError, match=f"--listen 127.0.0.1:{first.port}: .*in use"):
            GrpcLink(f"127.0.0.1:{first.port}", 2, limit=1 << 20).start()
        capsys.readouterr()
        assert main(["serve", "server", "--listen", f"127.0.0.1:{first.port}"]) == 2
        said = "".join(capsys.readouterr()).strip().splitlines()
        assert len(said) == 1 and f"127.0.0.1:{first.port}" in said[0], said
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


@pytest.fixture(scope="module")
def creds(tmp_path_factory):
    """Two deployments' credentials, an expired set, and a node folder with the right CA but a client
    certificate of the other deployment."""
    pytest.importorskip("cryptography")
    import datetime
    import shutil

    from fedstream.deploy.credentials import write_credentials

    tmp = tmp_path_factory.mktemp("creds")
    write_credentials(tmp / "ours", 2)
    write_credentials(tmp / "theirs", 2)
    write_credentials(tmp / "expired", 2, days=30,
                      start=datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=40))
    (tmp / "mixed").mkdir()
    shutil.copy(tmp / "ours" / "ca.crt", tmp / "mixed" / "ca.crt")
    for name in ("client-0.pem", "client-0.key"):
        shutil.copy(tmp / "theirs" / name, tmp / "mixed" / name)
    return tmp


def _first_attempt(port, config, tmp, tls_dir, index=0):
    """A node that would retry for 300 s: it must give up, saying why, at its first attempt."""
    node = NodeThread(index, port, config, tmp, tls_dir=tls_dir, retry_for=300)
    node.thread.join(timeout=60)
    assert not node.thread.is_alive(), "the node kept retrying"
    return node.error


@pytest.mark.parametrize(("server", "client", "says"), [
    ("ours", "theirs", "unknown CA"),
    ("ours", None, "uses TLS and this node plaintext"),
    (None, "ours", "speaks plaintext and this node TLS"),
    ("ours", "mixed", "refused this node's certificate"),
])
def test_a_tls_failure_is_named_at_the_first_attempt(tmp_path, config, creds, server, client, says):
    link = GrpcLink("127.0.0.1:0", 2, limit=1 << 20, tls_dir=server and creds / server).start()
    try:
        error = _first_attempt(link.port, config, tmp_path, client and creds / client)
    finally:
        link.close()
    assert isinstance(error, ProtocolError) and says in str(error), error
    assert "no server at" not in str(error)


def test_an_expired_certificate_is_named_before_connecting(tmp_path, config, creds):
    with pytest.raises(ConfigError, match=r"server\.pem.* expired on "):
        GrpcLink("127.0.0.1:0", 2, limit=1 << 20, tls_dir=creds / "expired").start()
    link = GrpcLink("127.0.0.1:0", 2, limit=1 << 20, tls_dir=creds / "ours").start()
    try:
        error = _first_attempt(link.port, config, tmp_path, creds / "expired")
    finally:
        link.close()
    assert isinstance(error, ConfigError) and "client-0.pem" in str(error) and "expired on" in str(error)


def test_the_servers_expired_certificate_is_named_by_the_client():
    from fedstream.deploy.runtimes.grpc_tls import tls_failure

    details = ("failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:41523: Tls handshake "
               "failed (TSI_PROTOCOL_FAILURE): SSL_ERROR_SSL: error:1000007d:SSL routines:OPENSSL_internal:"
               "CERTIFICATE_VERIFY_FAILED: certificate has expired: OK")
    assert "the server's certificate has expired" in tls_failure(details, "127.0.0.1:41523", None, 0)


def test_a_node_says_when_its_own_config_differs_from_the_servers(tmp_path, config, caplog):
    import logging

    from fedstream.deploy.runtimes.grpc import GrpcRuntime
    from fedstream.ovfl.deploy.driver import NetworkVFL
    from fedstream.ovfl.deploy.parties import server_stream

    link = GrpcLink("127.0.0.1:0", 2, limit=1 << 20).start()
    own = [config | {"rounds": 999, "optimizer.lr": 0.5, "data.root": "elsewhere"},
           config | {"data.root": "x"}]
    nodes = [NodeThread(m, link.port, config, tmp_path, own_config=own[m]) for m in range(2)]
    try:
        with caplog.at_level(logging.WARNING, logger="fedstream.deploy"):
            links = GrpcRuntime(link, node_timeout=30).connect(2)
            NetworkVFL(config, links, stream=server_stream(config)).run()
    finally:
        link.close()
        for n in nodes:
            n.thread.join(timeout=10)
    said = [r.getMessage() for r in caplog.records if "differs from the server's" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith("client 0:"), said
    assert "rounds = 999 here, 30 from the server" in said[0] and "optimizer.lr" in said[0]
    assert "data.root =" not in said[0]  # the node's data folder is its own
