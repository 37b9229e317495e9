"""Streaming CHFL deployed (``chfl.mode = "stream"``): the server and one node per client give the
simulator's run (:func:`fedstream.chfl.stream.run_stream`): prequential accuracy per tick and
client, curve, late joiner, bytes per client and direction, and the final global common column,
over an in-process gRPC server, over the loopback link that rebuilds every node from its saved
state per request (as a Flower ClientApp), and (marked slow) over real processes with
``fedstream deploy local``. Also: one request per FedAvg round, a malformed reply is a recorded
fault, and a node refuses a malformed request."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fedstream.chfl.deploy.data import load_stream_part, stream_config_settings
from fedstream.chfl.deploy.driver import NetworkStream
from fedstream.chfl.deploy.host import StreamHost
from fedstream.chfl.deploy.proxy import RemoteStreamCohort
from fedstream.chfl.stream import play_stream, run_stream, stream_rows
from fedstream.config import load_config
from fedstream.data.chfl_datasets import SPECS, load_chfl_dataset
from fedstream.deploy.adapters import default_runtime
from fedstream.deploy.records import ROUND, SETUP, Envelope, Failure
from fedstream.deploy.runtimes.loopback import LoopbackLink
from fedstream.deploy.session import Session
from fedstream.errors import FedstreamError, ProtocolError
from fedstream.runs.threads import one_torch_thread
from tests.helpers.links import spoiling

STREAM_TINY = {"chfl.mode": "stream", "chfl.clients": 3, "chfl.max_rows": 600, "chfl.hidden": "16,8",
               "chfl.stream_batch": 8, "chfl.stream_sync_every": 5, "chfl.stream_eval_every": 10,
               "chfl.stream_late_join": 0.5, "chfl.stream_lr": 0.01, "seed": 2}
_TIMING = {"wall_seconds", "resumed", "data"}


def stream_config(root, **extra) -> dict:
    return load_config("chfl-covertype", STREAM_TINY | {"data.root": str(root)} | extra)


def simulate(config: dict) -> tuple[dict, dict[str, np.ndarray]]:
    """The simulator's result and its final global common column."""
    s, seed, method = stream_config_settings(config), config["seed"], config["chfl.method"]
    want = run_stream(s, config["data.root"], method=method, seed=seed)
    table = load_chfl_dataset(s.dataset, config["data.root"]).table
    with one_torch_thread():
        st = play_stream(*stream_rows(table.X, table.y, s, seed), s, method, seed, SPECS[s.dataset].n_classes)
    return want, ({} if st.server is None else st.server.state)


def assert_same(got: dict, want: dict, net: NetworkStream, column: dict) -> None:
    assert got["faults"] == [] and got["missed_ticks"] == [0] * len(got["missed_ticks"])
    for key, value in want.items():
        if key not in _TIMING:
            assert got[key] == value, key
    mine = net.global_common()
    assert list(mine) == list(column) and all(np.array_equal(mine[k], column[k]) for k in column)
    for r in got["clients"]:
        assert [r["up"], r["down"], r["messages"]] == r["server_counted"]


def loopback(config: dict, root, **kw) -> LoopbackLink:
    return LoopbackLink(lambda cfg, m: load_stream_part(cfg, m, data_root=str(root)), config["chfl.clients"],
                        **kw)


@pytest.mark.parametrize("method", ["chfl", "fedprox", "local"])
def test_loopback_deployment_rebuilt_per_request_equals_the_simulator(covertype_root, tmp_path, method):
    config = stream_config(covertype_root, **{"chfl.method": method})
    want, column = simulate(config)
    link = loopback(config, covertype_root, persist=True, store=tmp_path / "nodes")
    net = NetworkStream(link, dict(config, **{"data.root": str(tmp_path / "the-server-has-no-data")}))
    got = net.run()
    assert_same(got, want, net, column)
    # 25 ticks, FedAvg every 5, the last client joins at tick 12: segments cut at 0, 5, 10, 12, 15, 20
    assert got["ticks"] == 25 and got["late_client"]["join_tick"] == 12
    assert got["exchanges"] == 1 + 6 + 1  # setup, one request per segment (all nodes at once), finish


def test_grpc_deployment_equals_the_simulator(covertype_root, tmp_path):
    pytest.importorskip("grpc")
    from fedstream.deploy.runtimes.grpc import GrpcRuntime
    from tests.helpers.grpc_deploy import grpc_nodes

    config = stream_config(covertype_root)
    assert default_runtime(config) == "grpc" and default_runtime(dict(config, **{"chfl.mode": "batch"})) == \
        "flower"
    want, column = simulate(config)
    with grpc_nodes(config, tmp_path) as (link, nodes):
        net = NetworkStream(GrpcRuntime(link).connect(3), config)
        got = net.run()
    assert all(n.error is None for n in nodes), [n.error for n in nodes]
    assert_same(got, want, net, column)


def _client_1_at_tick_5(m: int, request: Envelope) -> bool:
    return m == 1 and request.kind == ROUND and request.round == 5


def test_a_malformed_reply_is_a_fault_and_its_ticks_are_missed(covertype_root, tmp_path):
    config = stream_config(covertype_root)

    Spoilt = spoiling(_client_1_at_tick_5,  # 'correct' > batch: impossible
                      lambda r: Envelope(ROUND, 5, r.parts, {"correct": [9] * 5}))

    net = NetworkStream(Spoilt(lambda cfg, m: load_stream_part(cfg, m, data_root=str(covertype_root)), 3,
                               persist=False), config)
    got = net.run()
    assert [(f["round"], f["client"]) for f in got["faults"]] == [(5, 1)]
    assert "'correct' must be 5 counts in 0..8" in got["faults"][0]["reason"]
    assert got["missed_ticks"] == [0, 5, 0]
    assert got["bytes"]["per_client"][1]["up"] < got["bytes"]["per_client"][0]["up"]  # its update dropped


def _lost_at(root, ticks: set[int]) -> LoopbackLink:
    """Nodes whose replies to the segments starting at ``ticks`` are lost after they played them (what
    Flower 1.41 reports when a live node's uploaded reply is gone: issue 31)."""
    lost = "the ClientApp failed: Reply message objects are unavailable (object-push session expired)"
    cls = spoiling(lambda m, env: env.kind == ROUND and env.round in ticks, lambda reply: Failure(lost))
    return cls(lambda cfg, m: load_stream_part(cfg, m, data_root=str(root)), 3, persist=False)


def test_a_synchronisation_whose_replies_are_all_lost_keeps_the_global_column(covertype_root):
    """Both active nodes' replies to [0, 5) lost: two faults, θ carries over the FedAvg round at tick
    5, and the run goes on to its end (the nodes learnt those rows: their next update is accepted)."""
    config = stream_config(covertype_root)
    got = NetworkStream(_lost_at(covertype_root, {0}), config).run()
    assert got["carried_over"] == [5]
    assert [(f["round"], f["client"]) for f in got["faults"]] == [(0, 0), (0, 1)]
    assert got["missed_ticks"] == [5, 5, 0] and got["ticks"] == 25


def test_two_synchronisations_in_a_row_without_any_reply_end_the_run(covertype_root):
    config = stream_config(covertype_root)
    net = NetworkStream(_lost_at(covertype_root, {0, 5}), config)
    with pytest.raises(ProtocolError, match=r"tick 9: no client node sent a valid model update, nor at the "
                                            r"synchronisation before .*object-push session expired"):
        net.run()


# -- collapse (issue 31): the nodes report their predictions and labels per class ------------------
def test_a_deployed_run_records_the_simulators_collapse_shares(covertype_root, tmp_path):
    """metrics.csv's top_class_share per point and the summary's collapse fields are the simulator's."""
    config = stream_config(covertype_root)
    s = stream_config_settings(config)
    want = run_stream(s, config["data.root"], method=config["chfl.method"], seed=config["seed"],
                      run_dir=tmp_path / "simulated")
    got = NetworkStream(loopback(config, covertype_root, persist=False), config).run(
        checkpoint=tmp_path / "deployed" / "checkpoint.pt")
    assert 0 < got["top_class_share"] <= 1 and 0 < got["label_top_class_share"] <= 1
    for key in ("top_class_share", "label_top_class_share", "curve"):
        assert got[key] == want[key], key
    assert all(0 < v <= 1 for p in got["curve"] for v in p["top_class_share_per_client"] if v is not None)
    simulated = (tmp_path / "simulated" / "metrics.csv").read_text()
    assert simulated.startswith("tick,acc,top_class_share\n")
    assert (tmp_path / "deployed" / "metrics.csv").read_text() == simulated


class OneClass(LoopbackLink):
    """Every node's predictions all go to class 0 (as a collapsed model's would); labels as they are."""

    def exchange(self, requests):
        replies = super().exchange(requests)
        for m, r in replies.items():
            if isinstance(r, Envelope) and r.kind == ROUND:
                constant = np.zeros_like(r.arrays["predicted"])
                constant[:, 0] = r.arrays["predicted"].sum(axis=1)
                replies[m] = Envelope(r.kind, r.round, r.parts, r.info, r.arrays | {"predicted": constant})
        return replies


def test_a_deployed_run_whose_nodes_predict_one_class_ends_collapsed(covertype_root):
    config = stream_config(covertype_root)
    got = NetworkStream(OneClass(lambda cfg, m: load_stream_part(cfg, m, data_root=str(covertype_root)), 3,
                                 persist=False), config).run()
    assert got["collapsed"] is True and got["top_class_share"] == 1.0 and got["label_top_class_share"] < 0.95
    assert "the run ended collapsed: 100.0% of the predictions on client" in got["warnings"][0]
    assert all(p["top_class_share"] == 1.0 for p in got["curve"])


def test_the_server_writes_and_says_that_a_deployed_run_ended_collapsed(covertype_root, tmp_path, capsys):
    """``serve`` (what ``fedstream serve server`` and ``deploy local`` run): summary.json has the
    collapse fields and the server's console the warning, as ``fedstream run``'s."""
    from fedstream.deploy.serve import serve

    class Runtime:
        def connect(self, n_clients: int):
            return OneClass(lambda cfg, m: load_stream_part(cfg, m, data_root=str(covertype_root)), n_clients,
                            persist=False)

        def extra(self) -> dict:
            return {}

        def note(self) -> str:
            return "in process"

    out = tmp_path / "out"
    serve(stream_config(covertype_root), {"out": str(out), "resume": False, "audit": False}, Runtime())
    s = json.loads((out / "summary.json").read_text())
    assert s["collapsed"] is True and s["top_class_share"] == 1.0
    assert f"fedstream: warning: {s['warnings'][0]}" in capsys.readouterr().out
    with open(out / "metrics.csv") as fh:
        assert [float(r["top_class_share"]) for r in csv.DictReader(fh)] == [1.0] * len(s["curve"])


@pytest.mark.parametrize("arrays, expected", [
    (lambda a: {"predicted": a["predicted"]}, "expected arrays ['labels', 'predicted']"),
    (lambda a: a | {"predicted": a["predicted"][:, :-1]}, "array 'predicted' must be 5 x 7 counts"),
    (lambda a: a | {"labels": a["labels"] * 2}, "summing to 8 per tick"),
    (lambda a: a | {"labels": a["labels"].astype(np.float64)}, "received float64"),
])
def test_malformed_class_counts_are_a_fault(covertype_root, arrays, expected):
    config = stream_config(covertype_root)

    Spoilt = spoiling(_client_1_at_tick_5, lambda r: Envelope(ROUND, 5, r.parts, r.info, arrays(r.arrays)))

    got = NetworkStream(Spoilt(lambda cfg, m: load_stream_part(cfg, m, data_root=str(covertype_root)), 3,
                               persist=False), config).run()
    assert [(f["round"], f["client"]) for f in got["faults"]] == [(5, 1)]
    assert expected in got["faults"][0]["reason"], got["faults"][0]["reason"]
    assert got["missed_ticks"] == [0, 5, 0]


def test_after_a_fault_on_a_segment_without_upload_the_next_update_is_accepted(covertype_root):
    """Client 1's reply to the segment [7, 12) (no upload) is spoilt: the node learnt its rows, the
    server did not count them, so the node's next update (at tick 14) says 40 rows more than the
    server expects. A node that had a fault may differ so (by whole batches): its update is accepted."""
    config = stream_config(covertype_root, **{"chfl.stream_sync_every": 7})

    class Spoilt(LoopbackLink):
        def exchange(self, requests):
            replies = super().exchange(requests)
            r = replies.get(1)
            if isinstance(r, Envelope) and r.kind == ROUND and r.round == 7:
                assert r.parts == [] and r.info["correct"]  # no upload in this segment
                replies[1] = Envelope(ROUND, 7, r.parts, {"correct": [9] * 5})  # > batch: impossible
            return replies

    net = NetworkStream(Spoilt(lambda cfg, m: load_stream_part(cfg, m, data_root=str(covertype_root)), 3,
                               persist=False), config)
    got = net.run()
    # 25 ticks, FedAvg every 7, the last client joins at tick 12: segments cut at 0, 7, 12, 14, 21
    assert [(f["round"], f["client"]) for f in got["faults"]] == [(7, 1)], got["faults"]
    assert got["missed_ticks"] == [0, 5, 0]
    per = got["bytes"]["per_client"]
    assert per[1]["up"] == per[0]["up"]  # every update of client 1 accepted (3 uploads, as client 0)


def test_a_node_refuses_a_malformed_request_and_changes_nothing(covertype_root):
    config = stream_config(covertype_root)
    host = StreamHost(config, 2, rows=load_stream_part(config, 2))
    setup = host.handle(Envelope(SETUP, 0))
    assert setup.info["join_tick"] == 12 and setup.info["tick"] == -1
    before = host.state_dict()
    for env, match in [
        (Envelope(ROUND, 0, [], {"until": 5, "upload": True}), "joins at tick 12"),
        (Envelope(ROUND, 12, [], {"until": 26, "upload": False}), r"not within the stream's 0..25"),
        (Envelope(ROUND, 12, [b"junk"], {"until": 15, "upload": True}), None),
        (Envelope(ROUND, 12, [], {"until": 15}), "'upload' is missing"),
    ]:
        with pytest.raises((ProtocolError, ValueError), match=match):
            host.handle(env)
        assert all(np.array_equal(before[k], v) for k, v in host.state_dict().items())


def test_the_session_refuses_nodes_of_other_data(covertype_root, tmp_path):
    config = stream_config(covertype_root)
    other = dict(config, **{"chfl.max_rows": 900})
    link = LoopbackLink(lambda cfg, m: load_stream_part(other if m == 2 else cfg, m,
                                                        data_root=str(covertype_root)), 3, persist=False)
    with pytest.raises(ProtocolError, match="client 2 reports"):
        NetworkStream(link, config).run()
    assert issubclass(RemoteStreamCohort, Session)


@pytest.mark.slow
def test_deploy_local_streaming_chfl_over_grpc_processes_equals_the_simulator(covertype_root, tmp_path):
    config = stream_config(covertype_root)
    want, column = simulate(config)
    values = STREAM_TINY | {"data.root": str(covertype_root)}
    sets = [a for k, v in values.items() for a in ("--set", f"{k}={v}")]
    env = os.environ | {"PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    done = subprocess.run([sys.executable, "-m", "fedstream", "deploy", "local", "chfl-covertype", *sets,
                           "--out", str(tmp_path / "out"), "--audit"], capture_output=True, text=True,
                          timeout=600, env=env, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    got = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert got["runtime"] == "grpc" and got["faults"] == [] and "streaming CHFL" in done.stdout
    for key, value in want.items():
        if key not in _TIMING:
            assert got[key] == json.loads(json.dumps(value)), key  # as summary.json holds it
    with np.load(tmp_path / "out" / "models.npz") as saved:
        assert sorted(saved.files) == sorted(f"global.{k}" for k in column)
        assert all(np.array_equal(saved[f"global.{k}"], v) for k, v in column.items())


def test_a_stream_server_refuses_resume_without_out(covertype_root, tmp_path):
    from fedstream.chfl.deploy.adapter import ADAPTER
    from fedstream.deploy.serve import serve
    from fedstream.errors import ConfigError

    ADAPTER.check(stream_config(covertype_root))
    with pytest.raises(ConfigError, match="data.name = 'table': a streaming CHFL deployment reads one of"):
        ADAPTER.check(dict(stream_config(covertype_root), **{"data.name": "table"}))

    with pytest.raises(ConfigError, match="--resume needs --out DIR"):
        serve(stream_config(covertype_root), {"resume": True, "out": None, "audit": False}, runtime=None)


def test_a_server_that_dies_resumes_from_its_checkpoint_as_the_uninterrupted_run(covertype_root, tmp_path):
    """The server checkpoints after every synchronisation (the nodes keep their state there); it
    dies after the nodes answered ticks 15..19 (past the checkpoint at 15), a new server loads the
    checkpoint and the same nodes go back to it: the simulator's run, bit for bit."""
    from tests.helpers.links import ServerCrash, crashing_at

    config = stream_config(covertype_root)
    want, column = simulate(config)
    cls = crashing_at(lambda env: env.kind == ROUND and env.round == 15)
    link = cls(lambda cfg, m: load_stream_part(cfg, m, data_root=str(covertype_root)), 3, persist=True,
               store=tmp_path / "nodes")
    checkpoint = tmp_path / "out" / "checkpoint.pt"
    with pytest.raises(ServerCrash):
        NetworkStream(link, config).run(checkpoint=checkpoint)
    rows = (tmp_path / "out" / "metrics.csv").read_text().splitlines()
    net = NetworkStream(link, config)
    net.load(checkpoint)
    assert net.saved["tick"] == 15
    got = net.run()
    assert got["resumed"] and got["rejoins"] == []
    assert_same(got, want, net, column)
    after = (tmp_path / "out" / "metrics.csv").read_text().splitlines()
    assert rows[0] == "tick,acc,top_class_share" and len(rows) == 2 and after[:2] == rows  # tick 10's kept
    assert len(after) == 1 + len(want["curve"])
    assert [float(r.split(",")[1]) for r in after[1:]] == [p["acc"] for p in want["curve"]]
    # the class counts before the checkpoint came back with it: every point's share is the simulator's
    assert [float(r.split(",")[2]) for r in after[1:]] == [p["top_class_share"] for p in want["curve"]]
    other = dict(config, **{"chfl.stream_lr": 0.02})
    with pytest.raises(FedstreamError, match="stream_lr|lr"):
        NetworkStream(link, other).load(checkpoint)


@pytest.mark.slow
def test_flower_simulation_runtime_runs_the_stream_too(covertype_root, tmp_path):
    """``--runtime flower`` is not the stream's default, but its apps run it: the ServerApp and
    ClientApps on Flower's simulation runtime (node state through ``context.state``)."""
    from tests.helpers.flower import simulated_summary

    config = stream_config(covertype_root)
    want, column = simulate(config)
    got, out = simulated_summary("chfl-covertype", STREAM_TINY | {"data.root": str(covertype_root)}, 3,
                                 timeout=300, tmp_path=tmp_path)
    for key, value in want.items():
        if key not in _TIMING:
            assert got[key] == json.loads(json.dumps(value)), key
    with np.load(out / "models.npz") as saved:
        assert all(np.array_equal(saved[f"global.{k}"], v) for k, v in column.items())
