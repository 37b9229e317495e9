"""Mutual TLS of the gRPC runtime (:mod:`fedstream.deploy.runtimes.grpc`): the credentials of both
ends from a ``--tls-dir`` (written by ``fedstream deploy credentials``,
:mod:`fedstream.deploy.credentials`) and the client index a peer's certificate names."""

from __future__ import annotations

import logging
from pathlib import Path

from fedstream.deploy.runtimes import grpc_wire as wire
from fedstream.errors import ConfigError

try:
    import grpc
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("the gRPC runtime needs grpcio: pip install 'fedstream[deploy]'") from exc

log = logging.getLogger("fedstream.deploy")


def read_tls_file(folder: Path, name: str) -> bytes:
    path = Path(folder) / name
    if not path.is_file():
        raise ConfigError(f"--tls-dir {folder}: no {name} (write the files with "
                          "`fedstream deploy credentials`)")
    return path.read_bytes()


def server_credentials(tls_dir: Path) -> grpc.ServerCredentials:
    """TLS with client certificates required, signed by the deployment's CA."""
    pair = (read_tls_file(tls_dir, "server.key"), read_tls_file(tls_dir, "server.pem"))
    return grpc.ssl_server_credentials([pair], root_certificates=read_tls_file(tls_dir, "ca.crt"),
                                       require_client_auth=True)


def certificate_index(context) -> int | None:
    """The client index of the peer's certificate (common name ``fedstream client M``), or None."""
    names = context.auth_context().get("x509_common_name", [])
    if len(names) != 1:
        return None
    name = names[0].decode(errors="replace")
    digits = name[len(wire.CLIENT_CN):]
    return int(digits) if name.startswith(wire.CLIENT_CN) and digits.isdigit() else None


def client_credentials(tls_dir: Path, index: int) -> grpc.ChannelCredentials:
    """The deployment's CA (to check the server) and client ``index``'s certificate and key (a
    warning when others than its owner may read the key)."""
    key = Path(tls_dir) / f"client-{index}.key"
    if key.is_file() and key.stat().st_mode & 0o077:
        log.warning("%s can be read by others than its owner (mode %o): anyone who reads it can act as "
                    "client %d; chmod 600 %s", key, key.stat().st_mode & 0o777, index, key)
    return grpc.ssl_channel_credentials(read_tls_file(tls_dir, "ca.crt"),
                                        read_tls_file(tls_dir, f"client-{index}.key"),
                                        read_tls_file(tls_dir, f"client-{index}.pem"))
