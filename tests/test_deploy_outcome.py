"""How a deployed run ends (issue 31, defects 1, 3, 4 and 7): a node that fails its setup stops the
run before round 0 saying why; a run where a party missed more than ``network.max_missed`` of the
events fails; a node whose finish reply disagrees with the server's counts is recorded as a dispute
and the outputs are still written; every missed event has a fault; a restart is recorded. In one
process: loopback links and real gRPC streams (node threads). Real processes:
tests/test_deploy_grpc_processes.py."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import pytest

from fedstream.config import load_config
from fedstream.deploy.records import FINISH
from fedstream.deploy.runtimes.loopback import LoopbackLink
from fedstream.deploy.serve import serve
from fedstream.errors import ConfigError, FedstreamError
from tests.helpers.data import write_learnable_mnist
from tests.helpers.ovfl_deploy import link_for, overrides


class LoopbackRuntime:
    """serve()'s runtime over an in-process link."""

    def __init__(self, link):
        self.link = link

    def connect(self, n_clients: int):
        return self.link

    def extra(self) -> dict:
        return {}

    def note(self) -> str:
        return "loopback"


def settings(out: Path, *, resume: bool = False, audit: bool = True) -> dict:
    return {"out": str(out), "resume": resume, "audit": audit, "data-root": ""}


@pytest.fixture()
def config(tmp_path):
    return load_config(None, overrides(write_learnable_mnist(tmp_path / "data"), 60)
                       | {"network.batch": 10, "checkpoint.every": 20})


# -- 1: a node that fails its setup; a party that missed too much ----------------------------------
def test_a_node_that_fails_its_setup_stops_the_run_before_round_0_saying_why(config, tmp_path):
    """Client 1's data root is empty: its node reports the simulator's data error to the server, and
    the run stops with it before round 0 (over real gRPC streams: the node stays up to say it)."""
    pytest.importorskip("grpc")
    from fedstream.deploy.runtimes.grpc import GrpcRuntime
    from fedstream.deploy.runtimes.grpc_node import GrpcNode
    from fedstream.deploy.runtimes.grpc_wire import message_limit
    from tests.helpers.grpc_deploy import grpc_nodes

    empty = tmp_path / "empty"
    empty.mkdir()
    with grpc_nodes(config, tmp_path, clients=[0]) as (link, nodes):
        bad = GrpcNode(1, f"127.0.0.1:{link.port}", limit=message_limit(config, audit=True),
                       data_root=str(empty), cache_dir=tmp_path / "nodes", retry_for=5)
        thread = threading.Thread(target=bad.run, daemon=True)
        thread.start()
        with pytest.raises(FedstreamError) as failed:
            serve(config, settings(tmp_path / "out"), GrpcRuntime(link, node_timeout=30))
    message = str(failed.value)
    assert "client 1" in message and f"mnist: no data file found under {empty}" in message
    assert "before round 0" in message
    assert not (tmp_path / "out" / "summary.json").exists()


class DownFrom(LoopbackLink):
    """Client 1's node is unreachable from the batch after the one at round ``at`` (round 30) on: it
    left, nothing failed on the way."""

    at = 20
    t = 0

    def available(self):
        return set(range(self.n_clients)) - ({1} if self.t >= self.at else set())

    def exchange(self, requests):
        self.t = max([self.t] + [e.round for e in requests.values()])
        return super().exchange(requests)


def test_every_missed_event_has_a_fault(config, tmp_path):
    """Defect 4: a node that left between requests is padded for the events it missed, and that is a
    fault of its party, recorded once (round, client, reason)."""
    config = dict(config, **{"network.max_missed": 1.0})  # here: whatever it missed, the run succeeds
    serve(config, settings(tmp_path / "out"), LoopbackRuntime(link_for(config, DownFrom)))
    s = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert s["missed_events"] == [0, 30]
    for m, missed in enumerate(s["missed_events"]):
        if missed:
            assert any(f["client"] == m for f in s["faults"]), (m, s["faults"])
    assert [(f["client"], f["round"]) for f in s["faults"]] == [(1, 30)]
    assert "not sent" in s["faults"][0]["reason"]


def test_a_party_that_missed_more_than_max_missed_fails_the_run(config, tmp_path, capsys):
    link = link_for(config, DownFrom)
    with pytest.raises(FedstreamError, match=r"client 1 missed 30 of 60 events .*network.max_missed = 0.05"):
        serve(config, settings(tmp_path / "out"), LoopbackRuntime(link))
    s = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert s["status"] == "failed" and "client 1 missed 30 of 60" in s["failure"]
    assert (tmp_path / "out" / "models.npz").exists()  # the outputs are kept for a look
    # a share the user allows: the run succeeds
    loose = dict(config, **{"network.max_missed": 0.7})
    s = serve(loose, settings(tmp_path / "loose"), LoopbackRuntime(link_for(loose, DownFrom)))
    assert s["status"] == "succeeded"


def test_max_missed_is_a_share(config):
    from fedstream.ovfl.config import FIELDS

    assert FIELDS["network.max_missed"].default == 0.05
    for bad in (-0.1, 1.5, "x"):
        with pytest.raises(ConfigError, match="network.max_missed"):
            load_config(None, {"network.max_missed": bad})


# -- 3: a client whose finish reply lies ---------------------------------------------------------
class Overstates(LoopbackLink):
    """Client 1's finish reply says it sent one byte more than it did."""

    def exchange(self, requests):
        replies = super().exchange(requests)
        if 1 in replies and requests[1].kind == FINISH:
            replies[1].info["up"] += 1
        return replies


def test_a_lying_finish_reply_is_a_dispute_and_the_outputs_are_written(config, tmp_path):
    out = tmp_path / "out"
    with pytest.raises(FedstreamError, match=r"^the run is disputed: client 1's finish reply says up = \d+, "
                                             r"the server counted \d+; outputs in "):
        serve(config, settings(out), LoopbackRuntime(link_for(config, Overstates)))
    s = json.loads((out / "summary.json").read_text())
    assert s["status"] == "disputed"
    [d] = s["disputes"]
    assert d["client"] == 1 and d["field"] == "up" and d["node"] == d["server"] + 1
    with np.load(out / "models.npz") as models:
        assert any(k.startswith("client1.") for k in models.files)


# -- 7: a restarted server ----------------------------------------------------------------------
def test_a_restart_is_recorded_with_the_round_resumed_from(config, tmp_path):
    from tests.helpers.links import ServerCrash

    out = tmp_path / "out"
    link = link_for(config, store=tmp_path / "node")

    class Crash(LoopbackRuntime):
        def connect(self, n_clients):
            return CrashAt50(link)

    class CrashAt50:
        def __init__(self, inner):
            self.inner, self.n_clients = inner, inner.n_clients

        def available(self):
            return self.inner.available()

        def rejoined(self):
            return self.inner.rejoined()

        def exchange(self, requests):
            if any(e.round == 50 for e in requests.values()):
                raise ServerCrash
            return self.inner.exchange(requests)

    with pytest.raises(ServerCrash):
        serve(config, settings(out), Crash(link))
    s = serve(config, settings(out, resume=True), LoopbackRuntime(link))
    assert s["restarts"] == [{"round": 40}]
    assert json.loads((out / "summary.json").read_text())["restarts"] == [{"round": 40}]
    assert s["status"] == "succeeded" and s["faults"] == []


def test_deploy_local_on_flower_exits_2_on_a_failed_or_disputed_summary(tmp_path):
    """On Flower the ServerApp's error stays in Flower's log: ``deploy local`` reads the verdict back
    from summary.json (check_outcome), one line, and a run from before issue 31 (no status) passes."""
    from fedstream.deploy.serve import check_outcome

    check_outcome({"rounds": 3}, tmp_path)
    check_outcome({"status": "succeeded"}, tmp_path)
    with pytest.raises(FedstreamError, match=r"^the run is disputed: client 0's finish reply says down = 5, "
                                             rf"the server counted 4; outputs in {tmp_path}$"):
        check_outcome({"status": "disputed", "dispute": "client 0's finish reply says down = 5, the server "
                                                        "counted 4"}, tmp_path)
    with pytest.raises(FedstreamError, match=r"^the run failed: x; no --out: nothing written$"):
        check_outcome({"status": "failed", "failure": "x"}, None)
