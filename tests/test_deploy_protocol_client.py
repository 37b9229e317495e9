"""A party written without fedstream (issue 29): ``tests/helpers/bare_ovfl_client.py`` knows only the
code grpcio-tools generates from the packaged ``protocol.proto`` (generated here, into a folder of
its own), grpcio and numpy. Over mutual TLS it is client 0 of a fedstream online VFL server, beside
a fedstream node as client 1, for a short run on a table with one file per party: its setup is
accepted, it trains its linear bottom model with the gradients it receives, and its byte counts
agree with the server's at finish."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("grpc")
pytest.importorskip("cryptography")
pytest.importorskip("grpc_tools", reason="the stubs need grpcio-tools: pip install 'fedstream[proto]'")

from fedstream.config import load_config  # noqa: E402
from fedstream.deploy.credentials import write_credentials  # noqa: E402
from fedstream.deploy.runtimes.grpc import GrpcLink, GrpcRuntime  # noqa: E402
from fedstream.deploy.runtimes.grpc_wire import message_limit  # noqa: E402
from fedstream.ovfl.deploy.driver import NetworkVFL  # noqa: E402
from fedstream.ovfl.deploy.parties import server_stream  # noqa: E402
from tests.helpers.grpc_deploy import NodeThread  # noqa: E402

CLIENT = Path(__file__).resolve().parent / "helpers" / "bare_ovfl_client.py"
ROWS = 120


def generate_stubs(folder: Path) -> Path:
    """protocol_pb2.py and protocol_pb2_grpc.py from the .proto fedstream ships, as a stranger would."""
    folder.mkdir()
    proto = folder / "protocol.proto"
    proto.write_text(resources.files("fedstream.deploy").joinpath("protocol.proto").read_text())
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{folder}", f"--python_out={folder}",
                    f"--grpc_python_out={folder}", str(proto)], check=True)
    return folder


def write_tables(folder: Path) -> list[Path]:
    """The server's labels and two clients' features, one file each, the same ids in the same order."""
    rng = np.random.default_rng(5)
    X = rng.standard_normal((ROWS, 6))
    y = (X @ rng.standard_normal(6) > 0).astype(int)
    files = {"server": (["label"], y[:, None]), "bare": (["a", "b", "c"], X[:, :3]),
             "node": (["d", "e", "f"], X[:, 3:])}
    paths = []
    for name, (columns, values) in files.items():
        path = folder / f"{name}.csv"
        with open(path, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["id", *columns])
            writer.writerows([str(100 + i), *map(str, row)] for i, row in enumerate(values))
        paths.append(path)
    return paths


def test_a_party_written_without_fedstream_answers_a_fedstream_server(tmp_path):
    stubs = generate_stubs(tmp_path / "stubs")
    paths = write_tables(tmp_path)
    config = load_config(None, {
        "task": "ovfl", "data.name": "table", "data.path": ";".join(map(str, paths)), "data.id": "id",
        "data.label": "label", "data.stats_rows": 100, "stream.passes": 1, "vfl.clients": 2,
        "model.embedding": 4, "optimizer.name": "dlr", "optimizer.lr": 0.05, "activation.name": "random",
        "activation.p": 0.5, "eval.interval": 40, "seed": 1})
    tls = tmp_path / "tls"
    write_credentials(tls, 2)
    link = GrpcLink("127.0.0.1:0", 2, limit=message_limit(config), tls_dir=tls, timeout=30).start()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # fedstream is not on its path
    bare = subprocess.Popen([sys.executable, str(CLIENT), str(stubs), f"127.0.0.1:{link.port}", "0",
                             str(paths[1]), "--tls", str(tls)], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    node = NodeThread(1, link.port, config, tmp_path, tls_dir=tls)
    try:
        net = NetworkVFL(config, GrpcRuntime(link, node_timeout=30).connect(2), stream=server_stream(config))
        net.run()
        reports = net.finish()
    finally:
        link.close()
        out, err = bare.communicate(timeout=60)
        node.thread.join(timeout=10)
    assert bare.returncode == 0, err[-3000:]
    assert node.error is None, node.error
    got = json.loads(out.strip().splitlines()[-1])
    summary = net.summary()
    assert summary["rounds"] == ROWS and summary["faults"] == [] and summary["rejoins"] == []
    # every event activated the bare party: an embedding up and, a round later, its gradient down
    assert got["round"] == ROWS - 1 and got["gradients"] == ROWS and got["moved"] > 0
    assert got["requests"] == ROWS + 5  # PSI (request, intersection, placement), setup, one per event, finish
    assert reports[0]["up"] == got["up"] and reports[0]["down"] == got["down"]
    assert got["up"] == ROWS * (11 + 4 * 4)  # a header and 4 float32 per embedding
