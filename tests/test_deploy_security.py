"""TLS between SuperLink and SuperNodes and SuperNode authentication, Flower's way (issue 10).

The credentials come from ``fedstream deploy credentials``; the SuperLink runs with
``--ssl-*`` and ``--enable-supernode-auth``, node 0's public key is registered with ``flwr
supernode register``. A SuperNode with that key is admitted; one whose key was never registered,
one that does not trust the SuperLink's CA, and one that tries without TLS are all refused.
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtensionOID

from fedstream.deploy.credentials import write_credentials
from fedstream.errors import ConfigError
from tests.helpers.crashing import scaled_timeout
from tests.helpers.flower import needs_flower


def test_credentials_are_a_ca_a_server_certificate_for_the_hosts_and_node_keys(tmp_path):
    paths = write_credentials(tmp_path, 3, ["superlink.example.org", "10.1.2.3"])
    assert sorted(paths) == sorted(["ca.crt", "ca.key", "server.pem", "server.key"]
                                   + [f"node-{m}.{ext}" for m in range(3) for ext in ("key", "pub")]
                                   + [f"client-{m}.{ext}" for m in range(3) for ext in ("key", "pem")])
    ca = x509.load_pem_x509_certificate(paths["ca.crt"].read_bytes())
    server = x509.load_pem_x509_certificate(paths["server.pem"].read_bytes())
    server.verify_directly_issued_by(ca)
    names = server.extensions.get_extension_for_oid(ExtensionOID.SUBJECT_ALTERNATIVE_NAME).value
    assert {str(n.value) for n in names} == {"localhost", "127.0.0.1", "superlink.example.org", "10.1.2.3"}
    assert paths["node-0.pub"].read_text().startswith("ecdsa-sha2-nistp384 ")
    for name in ("ca.key", "server.key", "node-2.key"):
        assert paths[name].stat().st_mode & 0o077 == 0  # private keys: owner only
    with pytest.raises(ConfigError, match="--nodes"):
        write_credentials(tmp_path, 0)


def _flwr_nodes(deployment) -> list[dict]:
    """``flwr supernode list --format json``: the SuperLink's view of the registered nodes."""
    done = subprocess.run(
        ["flwr", "supernode", "list", "fedstream-local", "--format", "json"],
        capture_output=True,
        text=True,
        env=deployment.env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout).get("nodes", [])


REFUSED = "Failed to initialize the connection to the SuperLink"
SHOWS = {  # what each intruder's log shows once it has been refused
    "unregistered key": (REFUSED, "Failed to activate SuperNode"),  # TLS fine, the key is not registered
    "untrusted CA": (REFUSED, "CERTIFICATE_VERIFY_FAILED"),
    "no TLS": (REFUSED,),
}


def _wait_for_refusals(folder, logs: dict, procs: dict, timeout: float) -> None:
    """Return once every intruder's log shows that it was refused, or its process has ended (the
    checks after this then say what it logged); ``timeout`` only bounds a hang."""
    deadline = time.monotonic() + timeout
    while True:
        pending = [name for name, log in logs.items() if procs[name].poll() is None
                   and not all(s in (folder / log).read_text(errors="replace") for s in SHOWS[name])]
        if not pending:
            return
        assert time.monotonic() < deadline, f"no refusal logged by {pending} in {timeout} s"
        time.sleep(0.2)


def _online(nodes: list[dict]) -> int:
    return sum(1 for n in nodes if str(n.get("status", "")).lower() == "online")


@pytest.mark.slow
@needs_flower
def test_only_a_supernode_with_registered_credentials_is_admitted(tmp_path):
    from fedstream.deploy.local import LocalDeployment, free_port

    creds = tmp_path / "creds"
    write_credentials(creds, 2)
    other = tmp_path / "other"  # a second CA, which the SuperLink's certificate does not come from
    write_credentials(other, 1)
    with LocalDeployment(1, tmp_path / "deployment", credentials=creds) as deployment:
        deadline = time.monotonic() + scaled_timeout(90)
        while _online(_flwr_nodes(deployment)) < 1:  # node 0: registered key, trusts the CA
            assert time.monotonic() < deadline, "the registered SuperNode did not come online"
            time.sleep(2)
        intruders = {
            "unregistered key": deployment.start_node(0, key=creds / "node-1.key", log="intruder-key.log"),
            "untrusted CA": None, "no TLS": None,
        }
        for name, extra, log in (
            (
                "untrusted CA",
                [
                    "--root-certificates",
                    str(other / "ca.crt"),
                    "--auth-supernode-private-key",
                    str(creds / "node-0.key"),
                ],
                "intruder-ca.log",
            ),
            ("no TLS", ["--insecure"], "intruder-insecure.log"),
        ):
            args = [
                "--superlink",
                deployment.node_superlink,
                "--port",
                str(free_port()),
                "--max-retries",
                "2",
                "--max-wait-time",
                "20",
                "--node-config",
                "client-index=0",
            ]
            intruders[name] = deployment._start(["flower-supernode", *extra, *args], log)
        # wait until every intruder has been refused (its log says so), not for a fixed time
        logs = {"unregistered key": "intruder-key.log", "untrusted CA": "intruder-ca.log",
                "no TLS": "intruder-insecure.log"}
        _wait_for_refusals(tmp_path / "deployment", logs, intruders, timeout=scaled_timeout(180))
        nodes = _flwr_nodes(deployment)
        assert _online(nodes) == 1, nodes  # still only node 0
        assert len(nodes) == 1  # only the registered key is known to the SuperLink
        logs = {name: (tmp_path / "deployment" / log).read_text(errors="replace")
                for name, log in logs.items()}
        for name in intruders:
            assert "SuperNode ID" not in logs[name], (
                f"{name}: the SuperNode was admitted:\n{logs[name][-2000:]}"
            )
            for shown in SHOWS[name]:
                assert shown in logs[name], f"{name}:\n{logs[name][-2000:]}"


def test_the_cli_writes_credentials(tmp_path, capsys):
    from fedstream.cli import main

    assert main(["deploy", "credentials", str(tmp_path / "c"), "--nodes", "2", "--host", "10.0.0.7"]) == 0
    assert "wrote 12 files" in capsys.readouterr().out
    assert (tmp_path / "c" / "node-1.pub").exists()
