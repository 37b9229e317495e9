"""Serving (issue 30, part 2): the deployed parties of a finished run predict together, each from its
own saved model, and their predictions are the simulated run's for the same config, files and ids.

The default suite trains each deployment in this process (the loopback runtime, nodes saving their
state to a folder as a real node does) and serves it through the gRPC runtime's frames in this
process (:class:`fedstream.deploy.serving.InProcessLink`); the slow test runs the real processes
(``fedstream deploy local``, ``fedstream deploy predict``, ``fedstream serve --predict``, mutual TLS).
"""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from fedstream.cli import main
from fedstream.config import load_config
from fedstream.deploy.adapters import adapter_for
from fedstream.deploy.runtimes.loopback import LoopbackLink
from fedstream.deploy.serve import serve
from fedstream.errors import ConfigError, DataError, FedstreamError, ProtocolError
from fedstream.predict import predict_run, write_predictions
from tests.test_deploy_table import split_customers

pytest.importorskip("grpc")

ROOT = Path(__file__).resolve().parents[1]


class LoopbackRuntime:
    """The loopback runtime for :func:`fedstream.deploy.serve.serve`: nodes in this process, each
    saving its state to ``store`` after every request, as a real node does."""

    def __init__(self, store: Path):
        self.store = store

    def connect(self, n_clients: int):
        rows = lambda config, m: adapter_for(config["task"]).node_data(config, m, data_root=None,  # noqa: E731
                                                                        cache_dir=None)
        return LoopbackLink(rows, n_clients, persist=True, store=self.store)

    def extra(self) -> dict:
        return {}

    def note(self) -> str:
        return "loopback"


def ovfl_config(paths, **more) -> dict:
    return load_config(None, {
        "task": "ovfl", "data.name": "table", "data.path": ";".join(map(str, paths)), "data.id": "id",
        "data.label": "segment", "data.categorical": "channel", "data.stats_rows": 60, "stream.passes": 1,
        "model.embedding": 4, "activation.name": "random", "activation.p": 0.7, "eval.interval": 40,
        "seed": 3} | more)


def vfl_config(paths, **more) -> dict:
    return load_config(None, {
        "task": "vfl", "data.name": "table", "data.path": ";".join(map(str, paths)), "data.id": "id",
        "data.label": "segment", "data.categorical": "channel", "data.test_fraction": 0.25,
        "model.hidden": 8, "train.epochs": 1, "train.batch_size": 32, "optimizer.lr": 0.05, "seed": 2} | more)


def write_config(config: dict, path: Path) -> Path:
    """``config`` as a TOML file of dotted keys (what `fedstream run` reads)."""
    lines = []
    for key, value in config.items():
        if value is None:
            continue
        lines.append(f'"{key}" = {json.dumps(value)}')
    path.write_text("\n".join(lines) + "\n")
    return path


def deploy_in_process(config: dict, out: Path) -> Path:
    """A deployed run of ``config``: the server's folder ``out``, the nodes' folder ``out/nodes``."""
    serve(config, {"out": str(out)}, LoopbackRuntime(out / "nodes"))
    return out / "nodes"


def simulate(config: dict, out: Path, tmp: Path) -> Path:
    assert main(["run", str(write_config(config, tmp / "config.toml")), "--out", str(out), "--quiet"]) == 0
    return out


def write_ids(path: Path, ids: list[str], column: str = "id") -> Path:
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow([column])
        writer.writerows([i] for i in ids)
    return path


def drop_rows(path: Path, ids: set[str]) -> None:
    """Remove the rows of ``ids`` from one party's file (a client that does not hold them)."""
    with open(path) as f:
        rows = list(csv.reader(f))
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows([rows[0], *(r for r in rows[1:] if r[0] not in ids)])


@pytest.fixture(scope="module")
def ovfl_run(tmp_path_factory):
    """One deployed run and one simulated run of the same config and files (tests change neither)."""
    tmp = tmp_path_factory.mktemp("ovfl")
    paths = split_customers(tmp, 120)
    config = ovfl_config(paths)
    nodes = deploy_in_process(config, tmp / "deployed")
    sim = simulate(config, tmp / "sim", tmp)
    return config, tmp / "deployed", nodes, sim, paths


def test_ovfl_served_predictions_are_the_simulated_runs(ovfl_run, tmp_path):
    """Each node loads its own saved model; the predictions equal `fedstream predict --ids` on the
    simulated run, bit for bit, an id no client holds (padded) included; --data on the whole rows agrees."""
    from fedstream.deploy.serving import serve_in_process

    config, run, nodes, sim, paths = ovfl_run
    ids = ["C1003", "C1000", "C1117", "NOPE", "C1050"]
    served = serve_in_process(run, nodes).predict(ids)
    want = predict_run(sim, ids=write_ids(tmp_path / "ids.csv", ids))
    assert served.predictions.ids.tolist() == want.ids.tolist() == ids
    assert np.array_equal(served.predictions.proba, want.proba)
    assert served.predictions.labels == want.labels
    assert served.absent == [[], [], [], [0, 1, 2], []]
    assert np.allclose(served.predictions.proba.sum(axis=1), 1.0)
    # the same rows given whole (every column by name) through the simulator's own encoding
    with open(ROOT / "examples" / "customers.csv") as f:
        table = [r for r in csv.DictReader(f) if r["id"] in ids[:3]]
    full = tmp_path / "full.csv"
    with open(full, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(table[0]))
        writer.writeheader()
        writer.writerows(sorted(table, key=lambda r: ids.index(r["id"])))
    whole = predict_run(sim, full)
    assert np.allclose(whole.proba, want.proba[:3], rtol=0, atol=1e-6)


def test_a_new_customer_that_a_client_does_not_hold_is_padded_in_online_vfl(ovfl_run, tmp_path):
    """A new id (not in the server's file) that the bank and the telecom hold and the shop does not:
    the shop embeds its columns at their training means, in the simulator and deployed alike."""
    from fedstream.deploy.serving import serve_in_process

    _, run, nodes, sim, paths = ovfl_run
    for path, row in ((paths[1], "NEW1,41.5,7.25,1,2.4"), (paths[3], "NEW1,180.0,3.5,2.0,0")):
        with open(path, "a") as f:  # after the statistics' rows: the encoding stays the training's
            f.write(row + "\n")
    ids = ["NEW1", "C1011"]
    served = serve_in_process(run, nodes).predict(ids)
    want = predict_run(sim, ids=write_ids(tmp_path / "ids.csv", ids))
    assert served.absent == [[1], []]
    assert np.array_equal(served.predictions.proba, want.proba)
    nobody = predict_run(sim, ids=write_ids(tmp_path / "n.csv", ["NOPE"]))
    assert not np.array_equal(want.proba[0], nobody.proba[0])  # the bank's and telecom's rows count


def test_vfl_served_predictions_are_the_simulated_runs_and_an_absent_id_is_refused(tmp_path):
    from fedstream.deploy.serving import serve_in_process

    paths = split_customers(tmp_path, 80)
    config = vfl_config(paths)
    nodes = deploy_in_process(config, tmp_path / "deployed")
    sim = simulate(config, tmp_path / "sim", tmp_path)
    served = serve_in_process(tmp_path / "deployed", nodes)
    ids = ["C1070", "C1001", "C1042"]
    got = served.predict(ids)
    want = predict_run(sim, ids=write_ids(tmp_path / "ids.csv", ids))
    assert np.allclose(got.predictions.proba, want.proba, rtol=0, atol=1e-6)
    assert got.predictions.labels == want.labels
    with pytest.raises(DataError, match="'NOPE': client 0 .bank.csv. does not hold it; a batch VFL model"):
        served.predict(["C1001", "NOPE"])
    with pytest.raises(DataError, match="client 0 does not hold id 'NOPE'"):
        predict_run(sim, ids=write_ids(tmp_path / "bad.csv", ["NOPE"]))


def test_a_node_whose_saved_model_is_not_the_runs_is_refused(ovfl_run, tmp_path):
    from fedstream.deploy.serving import serve_in_process

    _, run, saved_nodes, _, _ = ovfl_run
    nodes = tmp_path / "nodes"
    shutil.copytree(saved_nodes, nodes)
    saved = next(p for p in nodes.glob("ckpt-*-1.npz") if "-at" not in p.name)
    with np.load(saved) as z:
        state = {k: z[k] for k in z.files}
    state["client.model.p0"] = state["client.model.p0"] + 1.0
    np.savez(saved, **state)
    with pytest.raises(FedstreamError, match="client 1: .*is not the one the run finished with"):
        serve_in_process(run, nodes)
    saved.unlink()
    with pytest.raises(FedstreamError, match="client 1: could not load its model: .*no saved model of run"):
        serve_in_process(run, nodes)


def test_malformed_predict_requests_are_refused_by_the_node(ovfl_run):
    from fedstream.deploy.records import ROUND, Envelope
    from fedstream.deploy.serving import ServingHost

    _, run, nodes, _, _ = ovfl_run
    host = ServingHost(0, nodes)
    with pytest.raises(ProtocolError, match="before the setup"):
        host.handle(Envelope(ROUND, 1, info={"ids": ["C1000"]}))
    from fedstream.deploy.serving import serve_in_process

    served = serve_in_process(run, nodes)
    node = served.link.hosts[0]
    with pytest.raises(ProtocolError, match="takes 1 to 4096 ids"):
        node.handle(Envelope(ROUND, 1, info={"ids": []}))
    with pytest.raises(ProtocolError, match="empty id"):
        node.handle(Envelope(ROUND, 1, info={"ids": [" "]}))
    assert served.predict(["C1000"]).predictions.proba.shape == (1, 3)


def test_cli_errors_are_one_line(ovfl_run, tmp_path, capsys):
    _, run, _, sim, _ = ovfl_run
    ids = write_ids(tmp_path / "ids.csv", ["C1000"], column="customer")
    assert main(["predict", str(sim), "--ids", str(ids), "--out", str(tmp_path / "p.csv")]) == 2
    assert "no column 'id' (the run's data.id)" in capsys.readouterr().err
    assert main(["predict", str(sim), "--out", str(tmp_path / "p.csv")]) == 2
    assert "--data FILE (every column) or --ids FILE" in capsys.readouterr().err
    one = tmp_path / "one"
    assert main(["run", str(write_config(load_config(None, {
        "task": "ovfl", "data.name": "table", "data.path": str(ROOT / "examples" / "customers.csv"),
        "data.id": "id", "data.label": "segment", "data.categorical": "channel", "rounds": 50,
        "eval.interval": 25}), tmp_path / "one.toml")), "--out", str(one), "--quiet"]) == 0
    assert main(["predict", str(one), "--ids", str(write_ids(tmp_path / "i.csv", ["C1000"])),
                 "--out", str(tmp_path / "p.csv")]) == 2
    assert "one file per party" in capsys.readouterr().err
    assert main(["deploy", "predict", str(sim), "--ids", str(ids), "--out", str(tmp_path / "p.csv")]) == 2
    assert "no client digests" in capsys.readouterr().err


def test_compressed_runs_and_chfl_are_not_served(tmp_path):
    from fedstream.deploy.serving import parts_for

    paths = split_customers(tmp_path, 40)
    with pytest.raises(ConfigError, match="compression.up = 'topk': serving sends plain float32"):
        parts_for(ovfl_config(paths, **{"compression.up": "topk"}), "run")
    with pytest.raises(ConfigError, match="a CHFL client predicts alone"):
        parts_for({"task": "chfl"}, "run")


@pytest.mark.slow
def test_real_processes_deploy_predict_and_serve_with_mutual_tls(tmp_path):
    """deploy local --secure, then deploy predict (the client processes from their saved models) and
    serve --predict (long-lived, a requester over mutual TLS, a node certificate refused); both equal
    the simulated run's predictions."""
    from fedstream.deploy.credentials import write_requester
    from fedstream.deploy.serving_grpc import PredictClient

    paths = split_customers(tmp_path, 120)
    config = ovfl_config(paths)
    cfg = write_config(config, tmp_path / "config.toml")
    run = tmp_path / "deployed"
    env_py = [sys.executable, "-m", "fedstream"]
    done = subprocess.run([*env_py, "deploy", "local", str(cfg), "--secure", "--out", str(run)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    sim = simulate(config, tmp_path / "sim", tmp_path)
    ids = ["C1003", "C1000", "NOPE", "C1050"]
    want = predict_run(sim, ids=write_ids(tmp_path / "ids.csv", ids))
    done = subprocess.run([*env_py, "deploy", "predict", str(run), "--ids", str(tmp_path / "ids.csv"),
                           "--out", str(tmp_path / "preds.csv")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    with open(tmp_path / "preds.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["id"] for r in rows] == ids and [r["prediction"] for r in rows] == [str(x) for x in want.labels]
    assert np.allclose([[float(r[f"p_{c}"]) for c in want.classes] for r in rows], want.proba, atol=1e-6)

    tls = run / "credentials"
    write_requester(tls)
    server = subprocess.Popen([*env_py, "serve", "server", str(run), "--predict", "--listen", "127.0.0.1:0",
                               "--tls-dir", str(tls)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
    clients = []
    try:
        line = server.stdout.readline()
        port = line.split(" on 127.0.0.1:")[1].split()[0]
        for m in range(3):
            clients.append(subprocess.Popen([*env_py, "serve", "client", str(run / "deployment" / "cache"),
                                             "--predict", "--index", str(m), "--connect", f"127.0.0.1:{port}",
                                             "--tls-dir", str(tls)], stdout=subprocess.DEVNULL,
                                            stderr=subprocess.DEVNULL))
        while "ready" not in line:
            line = server.stdout.readline()
            assert line, "the server ended before it was ready"
        client = PredictClient(f"localhost:{port}", tls_dir=tls)
        for _ in range(3):  # the model is frozen: the same answer every time
            got = client.predict(ids)
            assert np.array_equal(got.proba, want.proba)
        clients[1].kill()  # a node crashes and comes back: set up again, the same answers
        clients[1].wait()
        clients[1] = subprocess.Popen([*env_py, "serve", "client", str(run / "deployment" / "cache"),
                                       "--predict", "--index", "1", "--connect", f"127.0.0.1:{port}",
                                       "--tls-dir", str(tls)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while True:
            try:
                got = client.predict(ids)
                break
            except FedstreamError as exc:
                assert "UNAVAILABLE" in str(exc) and time.monotonic() < deadline, exc
                time.sleep(0.5)
        assert np.array_equal(got.proba, want.proba)
        client.close()
        (tmp_path / "node").mkdir()  # a node's certificate may not ask for predictions
        for name in ("ca.crt",):
            (tmp_path / "node" / name).write_bytes((tls / name).read_bytes())
        (tmp_path / "node" / "requester.pem").write_bytes((tls / "client-0.pem").read_bytes())
        (tmp_path / "node" / "requester.key").write_bytes((tls / "client-0.key").read_bytes())
        intruder = PredictClient(f"localhost:{port}", tls_dir=tmp_path / "node")
        with pytest.raises(FedstreamError, match="PERMISSION_DENIED"):
            intruder.predict(ids)
        intruder.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
        for c in clients:
            c.wait(timeout=30)


def test_predict_method_over_grpc_with_mutual_tls_in_one_process(ovfl_run, tmp_path):
    """The server's port serves the nodes (threads here, each a real gRPC client with its own
    certificate) and the Predict method: the requester's certificate is answered, a node's refused,
    a malformed query gets one line."""
    import threading

    from fedstream.deploy.credentials import write_credentials, write_requester
    from fedstream.deploy.serving_grpc import PredictClient, ServingNode, start_server

    _, run, nodes_dir, sim, _ = ovfl_run
    tls = tmp_path / "creds"
    write_credentials(tls, 3)
    write_requester(tls)
    nodes = []

    def start_nodes(link):
        for m in range(3):
            node = ServingNode(m, f"127.0.0.1:{link.port}", nodes_dir, tls_dir=tls, retry_for=10)
            nodes.append(threading.Thread(target=node.run, daemon=True))
            nodes[-1].start()

    link, predictor = start_server(run, "127.0.0.1:0", tls_dir=tls, on_listen=start_nodes)
    try:
        ids = ["C1003", "NOPE", "C1050"]
        want = predict_run(sim, ids=write_ids(tmp_path / "ids.csv", ids))
        client = PredictClient(f"localhost:{link.port}", tls_dir=tls)
        got = client.predict(ids)
        assert got.ids.tolist() == ids and got.classes == [str(c) for c in want.classes]
        assert np.array_equal(got.proba, want.proba)
        with pytest.raises(FedstreamError, match="INVALID_ARGUMENT: a query takes 1 to 4096 ids"):
            client.predict([])
        client.close()
        node_cert = tmp_path / "node"
        node_cert.mkdir()
        (node_cert / "ca.crt").write_bytes((tls / "ca.crt").read_bytes())
        (node_cert / "requester.pem").write_bytes((tls / "client-2.pem").read_bytes())
        (node_cert / "requester.key").write_bytes((tls / "client-2.key").read_bytes())
        intruder = PredictClient(f"localhost:{link.port}", tls_dir=node_cert)
        with pytest.raises(FedstreamError, match="PERMISSION_DENIED: Predict takes requests from the "
                                                 "certificate 'fedstream requester' only"):
            intruder.predict(ids)
        intruder.close()
        assert main(["serve", "request", f"localhost:{link.port}", "--ids", str(tmp_path / "ids.csv"),
                     "--out", str(tmp_path / "asked.csv"), "--tls-dir", str(tls)]) == 0
        write_predictions(want, tmp_path / "want.csv")
        assert (tmp_path / "asked.csv").read_text() == (tmp_path / "want.csv").read_text()
        assert predictor.requests == 2
    finally:
        link.close()
        for t in nodes:
            t.join(timeout=10)
    assert not any(t.is_alive() for t in nodes)


def test_bench_serving_says_in_one_line_why_it_could_not_train(tmp_path, capsys, monkeypatch):
    """Run from another folder, the default config's relative data paths are not there: one line
    naming the command and the cause, exit 2 (it was a traceback)."""
    from fedstream.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["bench", "serving", "--workdir", str(tmp_path / "w"), "--requests", "1"]) == 2
    said = capsys.readouterr()
    err = (said.out + said.err).strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: bench serving: `fedstream deploy local "), err
    assert "customers-parties-ovfl.toml" in err[0] and "no such config file" in err[0], err
