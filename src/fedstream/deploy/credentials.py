"""Test credentials for a secure deployment (``fedstream deploy credentials``; which file goes on
which machine: docs/deploy.md, section 3), written with the ``cryptography`` package:

* ``ca.crt`` / ``ca.key``: a self-signed CA (P-384) with a name of its own; ``ca.key`` stays with
  the operator;
* ``server.pem`` / ``server.key``: the server's certificate for ``localhost``, ``127.0.0.1`` and
  every ``--host`` (the gRPC server's and Flower's SuperLink's);
* ``client-M.pem`` / ``client-M.key``: client M's certificate for the gRPC runtime's mutual TLS,
  common name ``fedstream client M`` (the server takes the client index from it);
* ``node-M.key`` / ``node-M.pub``: SuperNode M's OpenSSH key pair (Flower's node authentication);
* ``requester.pem`` / ``requester.key`` (:func:`write_requester`): the one identity a serving
  server's ``Predict`` answers.

For tests and trials: in production use your organisation's PKI. Private keys get mode 0600.
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


def _certificate(cn: str, key, issuer, start, end, extensions) -> x509.Certificate:
    """A certificate of common name ``cn`` for ``key``, signed by ``issuer`` (a CA's certificate and
    key; None: self-signed), valid from ``start`` to ``end``, with ``extensions`` (extension,
    critical) in order."""
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    issuer_name, issuer_key = (name, key) if issuer is None else (issuer[0].subject, issuer[1])
    builder = (x509.CertificateBuilder().subject_name(name).issuer_name(issuer_name)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(start).not_valid_after(end))
    for extension, critical in extensions:
        builder = builder.add_extension(extension, critical=critical)
    return builder.sign(issuer_key, hashes.SHA384())


def _write_pair(folder: Path, stem: str, cert: x509.Certificate, key, suffix: str = ".pem"
                ) -> dict[str, Path]:
    """``stem.pem`` (or ``suffix``) and ``stem.key``: a certificate and its private key."""
    paths = {f"{stem}{suffix}": folder / f"{stem}{suffix}", f"{stem}.key": folder / f"{stem}.key"}
    _write(paths[f"{stem}{suffix}"], cert.public_bytes(serialization.Encoding.PEM))
    _write(paths[f"{stem}.key"], _pem_key(key), private=True)
    return paths


def _write_client(folder: Path, stem: str, cn: str, issuer, start, end, *san) -> dict[str, Path]:
    """``stem.pem`` / ``stem.key``: a client-authentication certificate ``cn`` signed by ``issuer``
    (the CA's certificate and key), valid from ``start`` to ``end``."""
    key = ec.generate_private_key(ec.SECP384R1())
    cert = _certificate(cn, key, issuer, start, end, [
        *((name, False) for name in san), (x509.BasicConstraints(ca=False, path_length=None), True),
        (x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), False)])
    return _write_pair(folder, stem, cert, key)


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
    usage = x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                          key_encipherment=False, data_encipherment=False, key_agreement=False,
                          encipher_only=False, decipher_only=False)
    ca = _certificate(f"fedstream test CA {secrets.token_hex(6)}", ca_key, None, start, end,
                      [(x509.BasicConstraints(ca=True, path_length=0), True), (usage, True)])
    server_key = ec.generate_private_key(ec.SECP384R1())
    server = _certificate("fedstream SuperLink", server_key, (ca, ca_key), start, end, [
        (_san(list(hosts or [])), False), (x509.BasicConstraints(ca=False, path_length=None), True),
        (x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False)])
    paths = _write_pair(folder, "ca", ca, ca_key, ".crt") | _write_pair(folder, "server", server, server_key)
    for m in range(nodes):
        uri = x509.SubjectAlternativeName([x509.UniformResourceIdentifier(f"fedstream:client:{m}")])
        paths.update(_write_client(folder, f"client-{m}", f"{CLIENT_CN}{m}", (ca, ca_key), start, end, uri))
        key = ec.generate_private_key(ec.SECP384R1())
        private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                    serialization.NoEncryption())
        ssh = serialization.Encoding.OpenSSH
        public = key.public_key().public_bytes(ssh, serialization.PublicFormat.OpenSSH)
        paths[f"node-{m}.key"], paths[f"node-{m}.pub"] = folder / f"node-{m}.key", folder / f"node-{m}.pub"
        _write(paths[f"node-{m}.key"], private, private=True)
        _write(paths[f"node-{m}.pub"], public + b"\n")
    return paths
