"""Mutual TLS on the gRPC runtime (issue 19): the client index comes from the certificate, and a node
without a certificate of the deployment's CA, one presenting another party's index, one of an
index the run does not have and a plaintext one are refused. In-process server on 127.0.0.1."""

from __future__ import annotations

import shutil

import pytest

from fedstream.config import load_config
from fedstream.errors import ProtocolError
from tests.helpers.data import write_learnable_mnist
from tests.helpers.grpc_deploy import NodeThread, grpc_nodes
from tests.helpers.ovfl_deploy import assert_same_as_simulator, overrides, party_models, simulate

pytest.importorskip("grpc")
pytest.importorskip("cryptography")

from fedstream.deploy.credentials import write_credentials  # noqa: E402
from fedstream.deploy.runtimes.grpc import GrpcRuntime  # noqa: E402
from fedstream.deploy.runtimes.grpc_node import NodeRefused  # noqa: E402
from fedstream.ovfl.deploy.driver import NetworkVFL  # noqa: E402
from fedstream.ovfl.deploy.parties import server_stream  # noqa: E402


@pytest.fixture(scope="module")
def creds(tmp_path_factory):
    """Credentials for 3 parties (the runs below have 2) and a second deployment's, for 2."""
    tmp = tmp_path_factory.mktemp("creds")
    write_credentials(tmp / "ours", 3)
    write_credentials(tmp / "theirs", 2)
    return tmp


@pytest.fixture()
def config(tmp_path):
    return load_config(None, overrides(write_learnable_mnist(tmp_path), 30))


def test_credentials_name_each_party_in_its_certificate(creds):
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    for m in range(3):
        cert = x509.load_pem_x509_certificate((creds / "ours" / f"client-{m}.pem").read_bytes())
        assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == f"fedstream client {m}"
        assert (creds / "ours" / f"client-{m}.key").stat().st_mode & 0o777 == 0o600


def test_a_secure_run_equals_the_simulator(tmp_path, config, creds):
    engine, sizes, _ = simulate(config)
    with grpc_nodes(config, tmp_path, tls_dir=creds / "ours") as (link, nodes):
        net = NetworkVFL(config, GrpcRuntime(link, node_timeout=30).connect(2), stream=server_stream(config),
                         record_sizes=True)
        net.run()
        reports = net.finish(models=True)
    assert all(n.error is None for n in nodes)
    assert_same_as_simulator(engine, party_models(net, reports))
    assert net.transport.sizes == sizes and link.refused == []


def _lone_node(link, config, tmp, index, tls_dir, **kw) -> NodeThread:
    node = NodeThread(index, link.port, config, tmp, tls_dir=tls_dir, retry_for=1.5, **kw)
    node.thread.join(timeout=30)
    assert not node.thread.is_alive()
    return node


def test_a_node_with_another_deployments_certificate_is_refused(tmp_path, config, creds):
    with grpc_nodes(config, tmp_path, tls_dir=creds / "ours", clients=[0]) as (link, _):
        node = _lone_node(link, config, tmp_path, 1, creds / "theirs")
        assert isinstance(node.error, ProtocolError)  # the handshake fails: never connected
        link.wait_for(1, 30)  # node 1 gives up at once: node 0 may still be in its handshake
        assert link.available() == {0}


def test_a_node_without_a_client_certificate_is_refused(tmp_path, config, creds):
    folder = tmp_path / "no-cert"
    folder.mkdir()
    shutil.copy(creds / "ours" / "ca.crt", folder / "ca.crt")
    for suffix in ("pem", "key"):  # the server's own certificate: not a client's
        shutil.copy(creds / "ours" / f"server.{suffix}", folder / f"client-1.{suffix}")
    with grpc_nodes(config, tmp_path, tls_dir=creds / "ours", clients=[0]) as (link, _):
        node = _lone_node(link, config, tmp_path, 1, folder)
        link.wait_for(1, 30)
        assert node.error is not None and link.available() == {0}


def test_plaintext_is_refused_by_a_secure_server(tmp_path, config, creds):
    with grpc_nodes(config, tmp_path, tls_dir=creds / "ours", clients=[0]) as (link, _):
        node = _lone_node(link, config, tmp_path, 1, None)
        link.wait_for(1, 30)
        assert isinstance(node.error, ProtocolError) and link.available() == {0}


def test_a_node_claiming_another_partys_index_is_refused(tmp_path, config, creds):
    folder = tmp_path / "stolen"
    shutil.copytree(creds / "ours", folder)
    for suffix in ("pem", "key"):  # node 1 presents client 0's certificate
        shutil.copy(folder / f"client-0.{suffix}", folder / f"client-1.{suffix}")
    with grpc_nodes(config, tmp_path, tls_dir=creds / "ours", clients=[0]) as (link, _):
        node = _lone_node(link, config, tmp_path, 1, folder)
        assert isinstance(node.error, NodeRefused) and "certificate client 0" in str(node.error)
        link.wait_for(1, 30)  # the real node 0 may still be in its handshake on a loaded machine
        assert link.available() == {0}


def test_a_second_node_of_a_connected_client_is_refused(tmp_path, config, creds):
    with grpc_nodes(config, tmp_path, tls_dir=creds / "ours", clients=[0]) as (link, _):
        link.wait_for(1, 30)
        node = _lone_node(link, config, tmp_path, 0, creds / "ours")
        assert isinstance(node.error, ProtocolError)  # refused each time it retried
        assert any("already connected" in r for r in link.refused)
        assert link.available() == {0} and link.rejoined() == set()


def test_an_index_the_run_does_not_have_is_refused(tmp_path, config, creds):
    with grpc_nodes(config, tmp_path, tls_dir=creds / "ours", clients=[0]) as (link, _):
        node = _lone_node(link, config, tmp_path, 2, creds / "ours")
        assert isinstance(node.error, NodeRefused) and "clients 0..1" in str(node.error)
