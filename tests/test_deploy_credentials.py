"""``fedstream deploy credentials`` (issue 31, defect 6): private keys never exist with a wider mode
than 0600, an existing set is not replaced without --force, every CA has a name of its own, and a
client key others can read is warned about."""

from __future__ import annotations

import logging
import os

import pytest

pytest.importorskip("cryptography")

from cryptography import x509  # noqa: E402

from fedstream.deploy.credentials import write_credentials  # noqa: E402
from fedstream.errors import ConfigError  # noqa: E402

KEYS = ("ca.key", "server.key", "client-0.key", "node-0.key")


def test_private_keys_are_created_owner_only(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "chmod", lambda *a, **k: None)  # no tightening afterwards: only creation counts
    monkeypatch.setattr(os, "fchmod", lambda *a, **k: None)
    old = os.umask(0o022)  # the usual umask, under which the issue saw the race
    try:
        paths = write_credentials(tmp_path / "c", 1)
    finally:
        os.umask(old)
    for name in KEYS:
        assert paths[name].stat().st_mode & 0o777 == 0o600, name
    assert paths["ca.crt"].stat().st_mode & 0o044  # certificates are public


def test_an_existing_set_is_kept_unless_forced(tmp_path, capsys):
    from fedstream.cli import main

    folder = tmp_path / "c"
    write_credentials(folder, 2)
    ca = (folder / "ca.crt").read_bytes()
    with pytest.raises(ConfigError, match=f"{folder}.* holds credentials already.*--force"):
        write_credentials(folder, 2)
    assert main(["deploy", "credentials", str(folder), "--nodes", "2"]) == 2
    err = "".join(capsys.readouterr())
    assert "--force" in err and len(err.strip().splitlines()) == 1
    assert (folder / "ca.crt").read_bytes() == ca
    (folder / "client-0.key").chmod(0o644)
    assert main(["deploy", "credentials", str(folder), "--nodes", "2", "--force"]) == 0
    assert (folder / "ca.crt").read_bytes() != ca
    assert (folder / "client-0.key").stat().st_mode & 0o777 == 0o600


def test_each_ca_has_a_name_of_its_own(tmp_path):
    names = {x509.load_pem_x509_certificate(write_credentials(tmp_path / f"c{i}", 1)["ca.crt"].read_bytes())
             .subject.rfc4514_string() for i in range(2)}
    assert len(names) == 2


def test_a_client_key_others_can_read_is_warned_about(tmp_path, caplog):
    pytest.importorskip("grpc")
    from fedstream.deploy.runtimes.grpc_tls import client_credentials

    write_credentials(tmp_path, 1)
    with caplog.at_level(logging.WARNING, logger="fedstream.deploy"):
        client_credentials(tmp_path, 0)
    assert not caplog.records
    (tmp_path / "client-0.key").chmod(0o640)
    with caplog.at_level(logging.WARNING, logger="fedstream.deploy"):
        client_credentials(tmp_path, 0)
    assert any("client-0.key" in r.getMessage() and "chmod 600" in r.getMessage() for r in caplog.records)


def test_the_requester_is_issued_from_the_command_line_with_the_folders_ca(tmp_path, capsys):
    """Serving's Predict answers only ``fedstream requester``: the operator issues it with the CLI,
    from the folder's ca.key, owner-only; without a CA the command says which file is missing."""
    from fedstream.cli import main
    from fedstream.deploy.credentials import REQUESTER_CN

    folder = tmp_path / "c"
    assert main(["deploy", "credentials", str(folder), "--requester"]) == 2
    assert "ca.crt: not found" in capsys.readouterr().err
    assert main(["deploy", "credentials", str(folder), "--nodes", "1", "--requester"]) == 0
    cert = x509.load_pem_x509_certificate((folder / "requester.pem").read_bytes())
    ca = x509.load_pem_x509_certificate((folder / "ca.crt").read_bytes())
    assert cert.subject.rfc4514_string() == f"CN={REQUESTER_CN}"
    assert cert.issuer == ca.subject
    cert.verify_directly_issued_by(ca)
    assert (folder / "requester.key").stat().st_mode & 0o777 == 0o600
    pem = (folder / "requester.pem").read_bytes()
    assert main(["deploy", "credentials", str(folder), "--requester"]) == 0  # kept: same certificate
    assert (folder / "requester.pem").read_bytes() == pem
    assert main(["deploy", "credentials", str(folder)]) == 2
    assert "--requester" in capsys.readouterr().err
