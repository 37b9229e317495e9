"""A table with one file per party, deployed (issue 21): each process opens only its own file, and the
deployed run is the simulator's on the same files (gRPC in one process, B = 1)."""

from __future__ import annotations

import csv
import json
import threading
from pathlib import Path

import numpy as np
import pytest

import fedstream.data.table_party
import fedstream.data.table_source
from fedstream.config import load_config
from fedstream.errors import ConfigError
from fedstream.ovfl.deploy.parties import check_deployable

ROOT = Path(__file__).resolve().parents[1]
PARTIES = {"server": ["segment"], "bank": ["income", "balance", "loans", "card_spend"],
           "shop": ["visits", "basket", "returns", "channel"],
           "telecom": ["minutes", "data_gb", "tenure", "late_payments"]}


def split_customers(folder: Path, rows: int = 300, *, reverse: str | None = None) -> list[Path]:
    """examples/customers.csv's first ``rows`` rows as one file per party (id + its columns);
    ``reverse``: that party's file lists its rows in reverse order."""
    with open(ROOT / "examples" / "customers.csv") as f:
        table = list(csv.DictReader(f))[:rows]
    paths = []
    for party, columns in PARTIES.items():
        path = folder / f"{party}.csv"
        body = table[::-1] if party == reverse else table
        with open(path, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["id", *columns])
            writer.writerows([r["id"], *(r[c] for c in columns)] for r in body)
        paths.append(path)
    return paths


def table_config(paths: list[Path], **more) -> dict:
    return load_config(None, {
        "task": "ovfl", "data.name": "table", "data.path": ";".join(map(str, paths)), "data.id": "id",
        "data.label": "segment", "data.categorical": "channel", "data.stats_rows": 200, "stream.passes": 2,
        "model.embedding": 8, "activation.name": "random", "activation.p": 0.7, "eval.interval": 100,
        "seed": 3} | more)



def spy_on_reads(monkeypatch) -> dict[str, set[str]]:
    """The files each thread opens through a party's own reader, filled as they are read; a read
    through the simulator's TableSource fails the test."""
    opened: dict[str, set[str]] = {}
    read = fedstream.data.table_party.read_table

    def spy(path):
        opened.setdefault(threading.current_thread().name, set()).add(Path(path).name)
        return read(path)

    def nothing_else(path):
        raise AssertionError(f"a deployed party read {path} through the simulator's TableSource")

    monkeypatch.setattr(fedstream.data.table_party, "read_table", spy)
    monkeypatch.setattr(fedstream.data.table_source, "read_table", nothing_else)
    return opened

def test_one_file_tables_and_drift_are_refused_by_name(tmp_path):
    paths = split_customers(tmp_path, 40)
    with pytest.raises(ConfigError, match="one file per party"):
        check_deployable(load_config(None, {"data.name": "table", "data.path": str(ROOT / "examples" /
                                                                                   "customers.csv")}))
    with pytest.raises(ConfigError, match="stream.drift"):
        check_deployable(table_config(paths, **{"stream.drift": "abrupt"}))


def test_each_party_opens_only_its_own_file_and_the_run_is_the_simulators(tmp_path, monkeypatch):
    pytest.importorskip("grpc")
    from fedstream.deploy.runtimes.grpc import GrpcRuntime
    from fedstream.ovfl.deploy.driver import NetworkVFL
    from fedstream.ovfl.deploy.parties import server_stream
    from tests.helpers.grpc_deploy import grpc_nodes
    from tests.helpers.ovfl_deploy import assert_same_as_simulator, party_models, simulate

    paths = split_customers(tmp_path)
    config = table_config(paths)
    engine, sizes, want = simulate(dict(config))
    opened = spy_on_reads(monkeypatch)
    with grpc_nodes(config, tmp_path) as (link, nodes):
        net = NetworkVFL(config, GrpcRuntime(link, node_timeout=30).connect(3),
                         stream=server_stream(config), record_sizes=True)
        net.run()
        reports = net.finish(models=True)
    assert all(n.error is None for n in nodes), [n.error for n in nodes]
    assert_same_as_simulator(engine, party_models(net, reports))
    assert net.transport.sizes == sizes
    got = net.summary()
    assert got["rounds"] == 600 and got["faults"] == []
    for key in ("bytes", "activation_rate", "accumulated_error", "interval_errors"):
        assert got[key] == want[key], key
    files = [p.name for p in paths]
    assert opened.pop(threading.current_thread().name) == {files[0]}  # the server: ids and labels
    assert opened == {f"node-{m}": {files[m + 1]} for m in range(3)}, opened


def test_a_client_file_in_another_order_is_aligned_by_psi_and_runs_as_simulated(tmp_path):
    """A client file in another order was refused before the deployment ran PSI (issue 30); now
    the nodes are aligned over the channel and the run is the simulator's."""
    pytest.importorskip("grpc")
    pytest.importorskip("private_set_intersection.python")
    from fedstream.deploy.runtimes.grpc import GrpcRuntime
    from fedstream.ovfl.deploy.driver import NetworkVFL
    from fedstream.ovfl.deploy.parties import server_stream
    from tests.helpers.grpc_deploy import grpc_nodes
    from tests.helpers.ovfl_deploy import simulate

    config = table_config(split_customers(tmp_path, 60, reverse="shop"))
    _, _, want = simulate(dict(config))
    with grpc_nodes(config, tmp_path) as (link, nodes):
        net = NetworkVFL(config, GrpcRuntime(link, node_timeout=30).connect(3), stream=server_stream(config))
        net.run()
        net.finish()
    assert all(n.error is None for n in nodes), [n.error for n in nodes]
    got = net.summary()
    assert got["faults"] == []
    for key in ("bytes", "activation_rate", "accumulated_error"):
        assert got[key] == want[key], key


def test_the_simulator_draws_each_partys_model_alone(tmp_path):
    """With one file per party the initial weights do not depend on the other parties' widths."""
    from fedstream.ovfl.parties import build_parties

    config = table_config(split_customers(tmp_path, 40))
    clients, server = build_parties(config, [4, 5, 4], 3)
    alone, _ = build_parties(config, [9, 5], None)
    np.testing.assert_array_equal(clients[1].model.parameters()[0], alone[1].model.parameters()[0])


def test_batch_vfl_with_one_file_per_party_over_grpc_is_the_simulators(tmp_path, monkeypatch):
    """Batch VFL on the per-party files: each node reads only its own file, the server only its own;
    the simulator's epochs, bytes and models (torch's tolerance, as for the images)."""
    pytest.importorskip("grpc")
    from fedstream.deploy.runtimes.grpc import GrpcRuntime
    from fedstream.vfl.deploy.driver import NetworkBatchVFL
    from fedstream.vfl.deploy.table import load_table_labels
    from tests.helpers.grpc_deploy import grpc_nodes
    from tests.helpers.models import assert_same_models
    from tests.helpers.vfl_deploy import ATOL, assert_same_run, deployed_models, simulate_vfl

    paths = split_customers(tmp_path, 200)
    config = load_config(None, {
        "task": "vfl", "data.name": "table", "data.path": ";".join(map(str, paths)), "data.id": "id",
        "data.label": "segment", "data.categorical": "channel", "data.test_fraction": 0.25,
        "model.hidden": 16, "train.epochs": 2, "train.batch_size": 32, "optimizer.lr": 0.05, "seed": 2})
    want, want_models = simulate_vfl(config)
    opened = spy_on_reads(monkeypatch)
    with grpc_nodes(config, tmp_path) as (link, nodes):
        net = NetworkBatchVFL(config, GrpcRuntime(link).connect(3), labels=load_table_labels(config))
        got = net.run(models=True)
    assert all(n.error is None for n in nodes) and got["faults"] == []
    assert_same_run(got, want)
    assert_same_models(deployed_models(net), want_models, atol=ATOL)
    files = [p.name for p in paths]
    assert opened.pop(threading.current_thread().name) == {files[0]}
    assert opened == {f"node-{m}": {files[m + 1]} for m in range(3)}, opened


@pytest.mark.parametrize("more, match", [
    ({"vfl.clients": 2}, "data.path names 3 client files but vfl.clients = 2"),
    ({"vfl.partition": "income;visits;minutes"}, "vfl.partition applies to one file; with one file per"),
    ({"data.label": "id"}, "data.label and data.id name the same column 'id'"),
])
def test_each_party_refuses_what_the_simulator_refuses_with_the_same_message(tmp_path, more, match):
    """The checks of the table keys are one function: the simulator's TableSource, the server's and
    each client's own file (online and batch VFL) refuse a config alike."""
    from fedstream.data.table_party import ClientTable, ServerTable
    from fedstream.data.table_source import TableSource, TableSpec
    from fedstream.ovfl.deploy.rows import PartyRows
    from fedstream.vfl.deploy.table import load_table_block, load_table_labels

    paths = split_customers(tmp_path, 40)
    online = table_config(paths, **more)
    batch = load_config(None, {"task": "vfl", "data.name": "table", "data.path": ";".join(map(str, paths)),
                               "data.id": "id", "data.label": "segment"} | more)
    spec = TableSpec.from_config(online)
    loaders = [lambda: TableSource(spec), lambda: ServerTable(spec), lambda: ClientTable(spec, 0),
               lambda: PartyRows(online, 1), lambda: load_table_labels(batch),
               lambda: load_table_block(batch, 1)]
    messages = set()
    for load in loaders:
        with pytest.raises(ConfigError, match=match) as refused:
            load()
        messages.add(str(refused.value))
    assert len(messages) == 1, messages


def test_the_server_refuses_a_label_given_by_the_ids_index(tmp_path):
    from fedstream.data.table_party import ServerTable
    from fedstream.data.table_source import TableSource, TableSpec

    spec = TableSpec.from_config(table_config(split_customers(tmp_path, 40), **{"data.label": "0"}))
    for load in (lambda: TableSource(spec), lambda: ServerTable(spec)):
        with pytest.raises(ConfigError, match="data.label and data.id name the same column 'id'"):
            load()


def test_a_categorical_column_no_client_holds_is_refused_as_in_the_simulator(tmp_path):
    """Each node reports the columns of data.categorical its own file holds; the server refuses the
    run when some column is in no client file, with the simulator's message (online and batch VFL)."""
    pytest.importorskip("grpc")
    from fedstream.data.table_source import TableSource, TableSpec
    from fedstream.deploy.runtimes.grpc import GrpcRuntime
    from fedstream.errors import DataError
    from fedstream.ovfl.deploy.driver import NetworkVFL
    from fedstream.ovfl.deploy.parties import server_stream
    from fedstream.vfl.deploy.driver import NetworkBatchVFL
    from fedstream.vfl.deploy.table import load_table_labels
    from tests.helpers.grpc_deploy import grpc_nodes

    paths = split_customers(tmp_path, 60)
    online = table_config(paths, **{"data.categorical": "channel,colour"})
    with pytest.raises(DataError, match="data.categorical: column 'colour' is not a feature column") as want:
        TableSource(TableSpec.from_config(online))
    with grpc_nodes(online, tmp_path / "online") as (link, nodes):
        net = NetworkVFL(online, GrpcRuntime(link, node_timeout=30).connect(3), stream=server_stream(online))
        with pytest.raises(DataError) as got:
            net.run()
    assert str(got.value) == str(want.value)
    batch = load_config(None, {"task": "vfl", "data.name": "table", "data.path": ";".join(map(str, paths)),
                               "data.id": "id", "data.label": "segment", "data.categorical": "channel,colour",
                               "train.epochs": 1})
    with grpc_nodes(batch, tmp_path / "batch") as (link, nodes):
        net = NetworkBatchVFL(batch, GrpcRuntime(link).connect(3), labels=load_table_labels(batch))
        with pytest.raises(DataError) as got:
            net.run()
    assert str(got.value) == str(want.value)
    assert all(n.error is None for n in nodes), [n.error for n in nodes]


def _spoil(path: Path, how: str) -> None:
    """Spoil a party's file the ways issue 31 found (the header is line 0)."""
    lines = path.read_text().splitlines()
    if how == "nan":
        cells = lines[6].split(",")
        lines[6] = ",".join([cells[0], "nan", *cells[2:]])
    elif how == "swapped":
        lines[3], lines[4] = lines[4], lines[3]
    elif how == "shuffled":
        lines[1:] = lines[1:][::-1]
    elif how == "missing":
        del lines[5]
    elif how == "duplicate":
        lines[5] = lines[4]
    elif how == "extra":
        lines.append("999999," + ",".join(lines[1].split(",")[1:]))
    elif how == "header-only":
        lines = lines[:1]
    elif how == "empty":
        lines = []
    path.write_text("\n".join(lines) + ("\n" if lines else ""))


@pytest.mark.parametrize("how", ["nan", "duplicate", "header-only", "empty"])
def test_a_client_whose_file_is_spoiled_stops_the_run_before_round_0_saying_why(tmp_path, how):
    """Issue 31: the client's node reports its data error to the server (as the simulator words it)
    and the deployment stops before round 0, writing no summary."""
    pytest.importorskip("grpc")
    pytest.importorskip("private_set_intersection.python")
    from fedstream.deploy.runtimes.grpc import GrpcRuntime
    from fedstream.deploy.serve import serve
    from fedstream.errors import FedstreamError
    from fedstream.ovfl.engine import OnlineVFL
    from tests.helpers.grpc_deploy import grpc_nodes

    paths = split_customers(tmp_path, 60)
    _spoil(paths[2], how)  # the shop's file: client 1
    config = table_config(paths)
    with pytest.raises(FedstreamError) as simulated:
        OnlineVFL(config).run()
    out = tmp_path / "out"
    with grpc_nodes(config, tmp_path) as (link, nodes), pytest.raises(FedstreamError) as deployed:
        serve(config, {"out": str(out), "resume": False, "audit": False, "data-root": ""},
              GrpcRuntime(link, node_timeout=30))
    assert all(n.error is None for n in nodes), [n.error for n in nodes]  # the node stayed up to say why
    message = str(deployed.value)
    assert "client 1" in message and str(simulated.value).splitlines()[0] in message, (str(simulated.value),
                                                                                        message)
    assert not (out / "summary.json").exists()


@pytest.mark.parametrize("how", ["swapped", "shuffled", "missing", "extra"])
def test_a_client_file_in_its_own_order_or_with_other_ids_runs_as_simulated(tmp_path, how):
    """Issue 31 found these refused (or worse, run without the client); since the deployment aligns
    the parties' ids by PSI (issue 30) they are no fault: the deployed run is the simulator's."""
    pytest.importorskip("grpc")
    pytest.importorskip("private_set_intersection.python")
    from fedstream.deploy.runtimes.grpc import GrpcRuntime
    from fedstream.deploy.serve import serve
    from tests.helpers.grpc_deploy import grpc_nodes
    from tests.helpers.ovfl_deploy import simulate

    paths = split_customers(tmp_path, 60)
    _spoil(paths[2], how)
    config = table_config(paths)
    _, _, want = simulate(dict(config))
    out = tmp_path / "out"
    with grpc_nodes(config, tmp_path) as (link, nodes):
        serve(config, {"out": str(out), "resume": False, "audit": False, "data-root": ""},
              GrpcRuntime(link, node_timeout=30))
    got = json.loads((out / "summary.json").read_text())
    assert got["faults"] == [] and got["status"] == "succeeded"
    for key in ("bytes", "activation_rate", "accumulated_error"):
        assert got[key] == want[key], key
