"""Mutual TLS of the gRPC runtime: both ends' credentials from a ``--tls-dir``
(:mod:`fedstream.deploy.credentials`), the client index a peer's certificate names, and why a
node's connection failed when TLS is the reason (:func:`tls_failure`)."""

from __future__ import annotations

import datetime
import logging
import socket
import ssl
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


def check_valid(folder: Path, name: str) -> None:
    """ConfigError when the certificate ``folder/name`` has expired or is not valid yet (no check
    without the ``cryptography`` package)."""
    try:
        from cryptography import x509
    except ImportError:  # pragma: no cover - gRPC's handshake still refuses it
        return
    try:
        cert = x509.load_pem_x509_certificate(read_tls_file(folder, name))
    except ValueError:
        raise ConfigError(f"--tls-dir {folder}: {name} is not a PEM certificate") from None
    now = datetime.datetime.now(datetime.UTC)
    if now > cert.not_valid_after_utc:
        raise ConfigError(f"--tls-dir {folder}: {name} expired on {cert.not_valid_after_utc:%Y-%m-%d %H:%M} "
                          "UTC (write new credentials: fedstream deploy credentials --force)")
    if now < cert.not_valid_before_utc:
        raise ConfigError(f"--tls-dir {folder}: {name} is valid only from "
                          f"{cert.not_valid_before_utc:%Y-%m-%d %H:%M} UTC (is this machine's clock right?)")


def server_credentials(tls_dir: Path) -> grpc.ServerCredentials:
    """TLS with client certificates required, signed by the deployment's CA."""
    check_valid(tls_dir, "server.pem")
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
    check_valid(tls_dir, f"client-{index}.pem")
    key = Path(tls_dir) / f"client-{index}.key"
    if key.is_file() and key.stat().st_mode & 0o077:
        log.warning("%s can be read by others than its owner (mode %o): anyone who reads it can act as "
                    "client %d; chmod 600 %s", key, key.stat().st_mode & 0o777, index, key)
    return grpc.ssl_channel_credentials(read_tls_file(tls_dir, "ca.crt"),
                                        read_tls_file(tls_dir, f"client-{index}.key"),
                                        read_tls_file(tls_dir, f"client-{index}.pem"))


def _probe(target: str, tls_dir: Path | None, index: int) -> str | None:
    """One TLS handshake with ``target`` (this node's certificate with ``tls_dir``): "plaintext" when
    the server does not answer in TLS, "tls" when it does, "hung up" when it closes the connection
    right after the handshake (it refused the certificate), None when it cannot be reached."""
    host, _, port = target.rpartition(":")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE  # who it is does not matter here
    context.set_alpn_protocols(["h2"])
    if tls_dir is not None:
        context.load_cert_chain(Path(tls_dir) / f"client-{index}.pem", Path(tls_dir) / f"client-{index}.key")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=5) as raw:
            try:
                conn = context.wrap_socket(raw)
            except (ssl.SSLError, ConnectionError):
                return "plaintext"
            with conn:
                conn.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")  # a gRPC server answers with its settings
                try:
                    return "tls" if conn.recv(1) else "hung up"
                except (ssl.SSLError, ConnectionError):
                    return "hung up"
    except (OSError, ValueError):
        return None


def tls_failure(details: str, target: str, tls_dir: Path | None, index: int) -> str | None:
    """Why this node (client ``index``, credentials in ``tls_dir``, None: plaintext) could not connect
    to ``target``, when TLS is the reason; ``details``: the UNAVAILABLE error's. None otherwise."""
    ca = f"{tls_dir}/ca.crt"
    if "handshake failed" in details.lower():
        if "WRONG_VERSION_NUMBER" in details:
            return (f"the server at {target} speaks plaintext and this node TLS (--tls-dir): give both "
                    "ends --tls-dir, or neither")
        if "expired" in details:
            return f"the server's certificate has expired ({target}): write new credentials for every party"
        if "CERTIFICATE_VERIFY_FAILED" in details or "BAD_SIGNATURE" in details:
            return (f"the server at {target} presents a certificate of an unknown CA (not signed by {ca}): "
                    "the parties' credentials come from different `fedstream deploy credentials` runs")
        return f"the TLS handshake with the server at {target} failed: {details}"
    if "Socket closed" not in details:
        return None
    seen = _probe(target, tls_dir, index)
    if tls_dir is None and seen in ("tls", "hung up"):
        return f"the server at {target} uses TLS and this node plaintext: give it --tls-dir"
    if tls_dir is not None and seen == "hung up":
        return (f"the server at {target} refused this node's certificate client-{index}.pem (signed by a CA "
                f"the server does not know: {ca} and the certificate come from different credentials?)")
    return None
