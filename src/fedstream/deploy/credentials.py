"""Test credentials for a secure deployment: a CA, the server's TLS certificate, one identity per party.

``fedstream deploy credentials DIR --nodes M [--host NAME ...]`` writes, with the ``cryptography``
package (a Flower dependency):

* ``ca.crt`` / ``ca.key``: a self-signed certificate authority (P-384, valid ``days``). Every
  SuperNode and the ``flwr`` CLI get ``ca.crt`` to check the SuperLink's certificate; keep
  ``ca.key`` away from the parties.
* ``server.pem`` / ``server.key``: the SuperLink's certificate, signed by the CA, for
  ``localhost``, ``127.0.0.1`` and every ``--host`` (the names or IP addresses the SuperNodes use
  to reach the SuperLink).
* ``client-M.pem`` / ``client-M.key`` for M = 0..nodes-1: client party M's certificate for the
  gRPC runtime's mutual TLS (:mod:`fedstream.deploy.runtimes.grpc`), signed by the CA, common name
  ``fedstream client M`` (and the URI ``fedstream:client:M`` as its subject alternative name),
  for client authentication only. The server takes a node's client index from this certificate.
  ``server.pem`` is the gRPC server's certificate too.
* ``node-M.key`` / ``node-M.pub`` for M = 0..nodes-1 (Flower): each SuperNode's P-384 key pair in OpenSSH
  format. ``node-M.key`` stays on node M's machine (``flower-supernode
  --auth-supernode-private-key``); ``node-M.pub`` is registered with the SuperLink (``flwr
  supernode register``), which then admits only registered nodes (``--enable-supernode-auth``).

* ``requester.pem`` / ``requester.key`` (``--requester``, on a folder that holds ``ca.key``): the
  certificate ``fedstream requester``, the only identity a serving server's ``Predict`` method
  answers (:mod:`fedstream.deploy.serving_grpc`); give it to the application that asks for
  predictions.

These are for tests and trials: in production use your organisation's PKI. Private keys are
created with mode 0600. Each CA has a name of its own (a random suffix). A folder that holds
credentials already is refused without ``--force`` (``force``).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import secrets
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from fedstream.deploy.runtimes.grpc_wire import CLIENT_CN
from fedstream.errors import ConfigError

REQUESTER_CN = "fedstream requester"  # the identity a serving server answers Predict for


def _write(path: Path, data: bytes, private: bool = False) -> None:
    """A new file (an old one is removed first): a private key is created with mode 0600, never wider."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _san(hosts: list[str]) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = []
    for host in dict.fromkeys(["localhost", "127.0.0.1", *hosts]):
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(names)


def _write_client(folder: Path, stem: str, cn: str, issuer, start, end,
                  san: x509.SubjectAlternativeName | None = None) -> dict[str, Path]:
    """``stem.pem`` / ``stem.key``: a client-authentication certificate ``cn`` signed by ``issuer``
    (the CA's certificate and key), valid from ``start`` to ``end``."""
    ca, ca_key = issuer
    key = ec.generate_private_key(ec.SECP384R1())
    builder = (x509.CertificateBuilder()
               .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]))
               .issuer_name(ca.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(start).not_valid_after(end))
    if san is not None:
        builder = builder.add_extension(san, critical=False)
    cert = (builder
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA384()))
    paths = {f"{stem}.pem": folder / f"{stem}.pem", f"{stem}.key": folder / f"{stem}.key"}
    _write(paths[f"{stem}.pem"], cert.public_bytes(serialization.Encoding.PEM))
    _write(paths[f"{stem}.key"], _pem_key(key), private=True)
    return paths


def write_requester(folder: Path, *, days: int = 30, force: bool = False) -> dict[str, Path]:
    """``requester.pem`` / ``requester.key`` in ``folder``: the certificate ``fedstream requester``
    that a serving server's ``Predict`` method accepts, signed with the folder's ``ca.key`` (so
    only the operator, who keeps ``ca.key``, can issue it). A requester already there is kept
    unless ``force``."""
    folder = Path(folder)
    if days < 1:
        raise ConfigError(f"--days {days!r}: expected an integer >= 1")
    if not force and (folder / "requester.pem").exists() and (folder / "requester.key").exists():
        return {"requester.pem": folder / "requester.pem", "requester.key": folder / "requester.key"}
    try:
        ca = x509.load_pem_x509_certificate((folder / "ca.crt").read_bytes())
        ca_key = serialization.load_pem_private_key((folder / "ca.key").read_bytes(), password=None)
    except FileNotFoundError as exc:
        raise ConfigError(f"{exc.filename}: not found; a requester is issued with the CA that "
                          "`fedstream deploy credentials` wrote (ca.crt and ca.key)") from None
    except ValueError as exc:
        raise ConfigError(f"{folder}/ca.key or ca.crt: not a PEM certificate and key ({exc})") from None
    start = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)
    return _write_client(folder, "requester", REQUESTER_CN, (ca, ca_key), start,
                         start + datetime.timedelta(days=days))


def write_credentials(
    folder: Path, nodes: int, hosts: list[str] | None = None, *, days: int = 30, force: bool = False,
    start: datetime.datetime | None = None,
) -> dict[str, Path]:
    """Write the files listed in the module doc into ``folder``; return name -> path. A folder that
    holds credentials already is refused (its clients' certificates would stop verifying) unless
    ``force``. ``start``: when the certificates become valid (default: five minutes ago)."""
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        raise ConfigError(f"--nodes {nodes!r}: expected an integer >= 1")
    if days < 1:
        raise ConfigError(f"--days {days!r}: expected an integer >= 1")
    folder = Path(folder)
    if not force and (folder / "ca.crt").exists():
        raise ConfigError(f"{folder} holds credentials already (ca.crt): a new CA would leave its client "
                          "certificates unverifiable; add --force to replace them all")
    folder.mkdir(parents=True, exist_ok=True)
    start = start or datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)
    end = start + datetime.timedelta(days=days)

    ca_key = ec.generate_private_key(ec.SECP384R1())
    # a name of its own: another deployment's certificate shows as signed by an unknown CA
    ca_cn = f"fedstream test CA {secrets.token_hex(6)}"
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ca_cn)])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA384())
    )

    server_key = ec.generate_private_key(ec.SECP384R1())
    server = (x509.CertificateBuilder()
              .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fedstream SuperLink")]))
              .issuer_name(ca_name).public_key(server_key.public_key()).serial_number(x509.random_serial_number())
              .not_valid_before(start).not_valid_after(end)
              .add_extension(_san(list(hosts or [])), critical=False)
              .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
              .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
              .sign(ca_key, hashes.SHA384()))

    paths = {name: folder / name for name in ("ca.crt", "ca.key", "server.pem", "server.key")}
    _write(paths["ca.crt"], ca.public_bytes(serialization.Encoding.PEM))
    _write(paths["ca.key"], _pem_key(ca_key), private=True)
    _write(paths["server.pem"], server.public_bytes(serialization.Encoding.PEM))
    _write(paths["server.key"], _pem_key(server_key), private=True)
    for m in range(nodes):
        uri = x509.SubjectAlternativeName([x509.UniformResourceIdentifier(f"fedstream:client:{m}")])
        paths.update(_write_client(folder, f"client-{m}", f"{CLIENT_CN}{m}", (ca, ca_key), start, end, uri))
        key = ec.generate_private_key(ec.SECP384R1())
        paths[f"node-{m}.key"] = folder / f"node-{m}.key"
        paths[f"node-{m}.pub"] = folder / f"node-{m}.pub"
        _write(
            paths[f"node-{m}.key"],
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
            ),
            private=True,
        )
        _write(
            paths[f"node-{m}.pub"],
            key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
            + b"\n",
        )
    return paths
