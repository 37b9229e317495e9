"""The commands of the gRPC runtime (issue 19): ``deploy local`` picks gRPC for online and batch VFL
and Flower for CHFL, ``--runtime`` overrides it; ``serve server|client`` parse; a local Flower
deployment finds Flower's executables beside its own interpreter."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from fedstream.cli import build_parser
from fedstream.cli import deploy as command


@pytest.mark.parametrize("config, runtime, want", [
    ("ovfl-imnist", None, "grpc"), ("vfl-mnist", None, "grpc"), ("chfl-covertype", None, "flower"),
    ("ovfl-imnist", "flower", "flower"), ("chfl-covertype", "grpc", "grpc"),
])
def test_deploy_local_picks_the_runtime_by_task(monkeypatch, tmp_path, config, runtime, want):
    class Chosen(Exception):
        pass

    def chose(name):
        def stop(*args, **kwargs):
            raise Chosen(name)
        return stop

    monkeypatch.setattr(command, "_local_grpc", chose("grpc"))
    monkeypatch.setattr(command, "write_app", chose("flower"))  # the Flower path's first step
    argv = ["deploy", "local", config, "--out", str(tmp_path)] + (["--runtime", runtime] if runtime else [])
    with pytest.raises(Chosen, match=f"^{want}$"):
        command.cmd_deploy(build_parser().parse_args(argv))


def test_serve_commands_parse():
    args = build_parser().parse_args(["serve", "server", "ovfl-imnist", "--listen", "0.0.0.0:7070", "--out",
                                      "o", "--tls-dir", "creds", "--resume", "--set", "rounds=10"])
    assert (args.command, args.action, args.listen, args.resume, args.sets) == \
        ("serve", "server", "0.0.0.0:7070", True, ["rounds=10"])
    args = build_parser().parse_args(["serve", "client", "--index", "2", "--connect", "h:1"])
    assert (args.index, args.connect, args.config, args.tls_dir) == (2, "h:1", "ovfl-imnist", None)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "client", "--connect", "h:1"])  # --index is required


def test_a_flower_deployment_finds_its_executables_beside_the_interpreter(monkeypatch, tmp_path):
    from fedstream.deploy.local import LocalDeployment

    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # the virtual environment not activated
    dep = LocalDeployment(2, tmp_path)
    assert dep.env["PATH"].split(os.pathsep)[0] == str(Path(sys.executable).parent)
    assert dep.env["PATH"].split(os.pathsep)[1:] == ["/usr/bin", "/bin"]


def test_deploy_local_over_grpc_passes_a_data_root_with_spaces_whole(monkeypatch, tmp_path):
    """The gRPC runtime takes --set values with spaces (Flower does not): the data root found from
    here reaches the parties' processes whole, pinned to its absolute path."""
    root = tmp_path / "my data"
    root.mkdir()
    got = {}
    monkeypatch.setattr(command, "_local_grpc", lambda args, config, sets, tls: got.update(sets=sets))
    argv = ["deploy", "local", "ovfl-imnist", "--set", f"data.root={root}", "--set", "rounds=10",
            "--out", str(tmp_path / "out")]
    with pytest.raises(Exception, match="summary"):  # the stand-in ran no server, so no summary
        command.cmd_deploy(build_parser().parse_args(argv))
    assert got["sets"] == ["rounds=10", f"data.root={root.resolve()}"]
