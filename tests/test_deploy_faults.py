"""Faults in a deployment (issue 10): a client node that crashes, hangs or disconnects is timed out,
padded, recorded, and rejoins from its own checkpoint; the server checkpoints and resumes.

Fast tests drive the deployment's code over in-process links that crash nodes and the server;
the slow ones kill and stop real SuperNode processes of a local Flower deployment.
"""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path

import numpy as np
import pytest

from fedstream.config import load_config
from fedstream.deploy.runtimes.loopback import LoopbackLink
from fedstream.ovfl.deploy.driver import NetworkVFL
from fedstream.ovfl.deploy.parties import server_stream
from tests.helpers.crashing import (
    crash_then_load,
    fault_logged,
    kill_then_replace,
    run_resumed,
    run_with_fault,
    scaled_timeout,
    stop_when,
    wait_for,
)
from tests.helpers.data import write_learnable_mnist
from tests.helpers.flower import flower_app, needs_flower
from tests.helpers.models import assert_same_models
from tests.helpers.ovfl_deploy import (
    CrashAtRound30,
    link_for,
    load_models,
    loopback_run,
    overrides,
    party_models,
)


@pytest.fixture(scope="module")
def config(mnist_root):
    return load_config(None, overrides(mnist_root, 60) | {"network.batch": 10, "checkpoint.every": 20})


def test_a_crashed_node_rejoins_from_its_checkpoint(config, tmp_path):
    net = NetworkVFL(
        config, link_for(config, CrashAtRound30, store=tmp_path / "node"), stream=server_stream(config)
    )
    net.run()
    net.finish()
    s = net.summary()
    assert [(f["round"], f["client"]) for f in s["faults"]] == [(30, 1)]
    assert s["missed_events"] == [0, 10]
    # back at round 40 from its checkpoint after the batch 20..29; the gradients of that batch were lost
    assert s["rejoins"] == [{"round": 40, "client": 1, "node_round": 29, "dropped_gradients": 0}]
    assert net.reports[1]["round"] == 59


class ReplacedBetweenBatches(LoopbackLink):
    """Client 1's SuperNode is replaced between the batches at rounds 10 and 20, no request lost: the
    new node has the old one's latest checkpoint (its state after its reply for rounds 10..19)."""

    asked = 0

    def rejoined(self):
        self.asked += 1
        if self.asked == 3:  # before the batch at round 20
            del self.memory[1]
            return {1}
        return set()


def test_a_node_replaced_between_batches_gets_its_held_gradients_and_nothing_changes(config, tmp_path):
    """It comes back at round 19, where the server expects it: the gradients of 10..19 held for it
    are delivered, not dropped, so the run is the uninterrupted one (models and bytes) and finishes."""
    whole, whole_reports = loopback_run(config, record_sizes=False)
    net = NetworkVFL(config, link_for(config, ReplacedBetweenBatches, store=tmp_path / "node"),
                     stream=server_stream(config))
    net.run()
    reports = net.finish(models=True)
    s = net.summary()
    assert s["faults"] == [] and s["rejoins"] == [
        {"round": 20, "client": 1, "node_round": 19, "dropped_gradients": 0}
    ]
    assert_same_models(party_models(net, reports), party_models(whole, whole_reports))
    assert s["bytes"] == whole.summary()["bytes"]


def test_a_node_that_lost_its_state_and_has_no_checkpoint_starts_over(config):
    net = NetworkVFL(config, link_for(config, CrashAtRound30), stream=server_stream(config))  # no store
    net.run()
    net.finish()
    assert net.summary()["rejoins"][0]["node_round"] == -1  # a fresh party, still in the run
    assert net.reports[1]["round"] == 59


def test_the_server_resumes_from_its_checkpoint_and_the_nodes_from_theirs(config, tmp_path):
    """The server dies in round 45 (checkpoint at 40, the nodes already at 49); a new server loads
    its checkpoint, the nodes go back to their state at 40: the result is the uninterrupted run's."""
    whole, whole_reports = loopback_run(config, record_sizes=False)
    link = link_for(config, store=tmp_path / "node")
    second = crash_then_load(lambda: NetworkVFL(config, link, stream=server_stream(config)), at=45,
                             checkpoint=tmp_path / "server.npz")
    assert second.t == 40
    second.run(checkpoint=tmp_path / "server.npz")
    reports = second.finish(models=True)
    assert_same_models(party_models(second, reports), party_models(whole, whole_reports))
    got, want = second.summary(), whole.summary()
    assert got["accumulated_error"] == want["accumulated_error"] and got["bytes"] == want["bytes"]
    assert got["rejoins"] == [] and got["faults"] == []


def test_a_node_keeps_its_last_boundaries_and_forgets_an_abandoned_sessions(tmp_path):
    """NodeStore: the latest state, the last KEEP_BOUNDARIES boundaries; a resume at t loads the
    latest boundary <= t and deletes those after t (written by the session the server abandoned)."""
    from fedstream.deploy.session import KEEP_BOUNDARIES, NodeStore

    store = NodeStore(tmp_path, "abc123", 1)
    for t in (10, 20, 30, 40):
        store.save({"t": np.array([t])}, boundary=t)
    assert store.boundaries() == [10, 20, 30, 40][-KEEP_BOUNDARIES:]
    assert int(store.load(resume=None)["t"][0]) == 40
    assert int(store.load(resume=35)["t"][0]) == 30
    assert store.load(resume=5) is None
    store.forget_after(30)
    assert store.boundaries() == [20, 30] and int(store.load(resume=99)["t"][0]) == 30


# -- real processes ----------------------------------------------------------------------------
def _node_round(cache: Path, index: int) -> int:
    """The round client ``index``'s node has reached, from its latest checkpoint (-1: none yet)."""
    paths = list(cache.glob(f"ckpt-*-{index}.npz"))
    if not paths:
        return -1
    try:
        with np.load(paths[0]) as z:
            return int(z["host"][0])
    except (OSError, ValueError, KeyError):  # being replaced right now
        return -1


REPLY_TIMEOUT = scaled_timeout(30.0)  # an idle 2-core machine takes up to ~20 s for a healthy request


def _deployed_run(tmp_path: Path, values: dict, fault) -> dict:
    """A local deployment of 2 SuperNodes; ``fault(deployment, ended)`` runs in a thread during the run."""
    out = tmp_path / "out"
    app = flower_app(tmp_path / "app", "", values, out, reply_timeout=REPLY_TIMEOUT)
    result, log = run_with_fault(tmp_path / "deployment", app, fault, timeout=scaled_timeout(900))
    assert result.returncode == 0 and (out / "summary.json").exists(), log[-4000:]
    return json.loads((out / "summary.json").read_text())


@pytest.mark.slow
@needs_flower
def test_a_killed_supernode_is_padded_and_rejoins_from_its_checkpoint(tmp_path):
    """SIGKILL client 1's SuperNode (and its ClientApp) mid-run, start a new one: the server times
    the node out, pads it, then sets the new node up from the old one's checkpoint; the run ends."""
    values = overrides(write_learnable_mnist(tmp_path / "data"), 60) | {"network.batch": 5,
                                                                          "network.max_missed": 1.0}
    cache = tmp_path / "deployment" / "cache"
    # the server times the killed node out and pads it meanwhile: the new node starts once that is logged
    s = _deployed_run(tmp_path, values, kill_then_replace(lambda: _node_round(cache, 1) >= 14,
                                                           "client 1 to reach round 14", REPLY_TIMEOUT))
    assert s["rounds"] == 60
    assert any(f["client"] == 1 for f in s["faults"]) and s["missed_events"][1] > 0
    (rejoin,) = s["rejoins"]
    assert (
        rejoin["client"] == 1 and rejoin["node_round"] >= 14
    )  # resumed from its checkpoint, not from scratch
    assert [c["round"] for c in s["clients"]] == [59, 59]


@pytest.mark.slow
@needs_flower
def test_a_hung_supernode_is_timed_out_padded_and_taken_back(tmp_path):
    """SIGSTOP client 1's SuperNode and its ClientApp for longer than reply-timeout, then SIGCONT:
    the server pads it while it hangs and uses it again once its late reply has come in.

    120 rounds, so that the run outlasts the hang on an idle machine too (the server goes on with
    client 0 alone, a few seconds per batch, while client 1 is stopped)."""
    values = overrides(write_learnable_mnist(tmp_path / "data"), 120) | {"network.batch": 5,
                                                                          "network.max_missed": 1.0}
    cache = tmp_path / "deployment" / "cache"

    def hang(deployment, ended):
        wait_for(lambda: _node_round(cache, 1) >= 14, 600, "client 1 to reach round 14", ended=ended)
        group = deployment.nodes[1].pid
        os.killpg(group, signal.SIGSTOP)  # the SuperNode, its SuperExec and ClientApp
        try:  # stopped until the server has timed a request to it out, however long the server takes
            wait_for(fault_logged(deployment.workdir / "flwr-run.log", 1), 4 * REPLY_TIMEOUT + 300,
                     "the server to time client 1 out", ended=ended)
        finally:
            os.killpg(group, signal.SIGCONT)

    s = _deployed_run(tmp_path, values, hang)
    assert s["rounds"] == 120 and s["rejoins"] == []  # the same node came back, from its own memory
    # Flower (1.41) reports a hung node in one of three ways, whichever its timing meets first: the
    # request in flight times out here ("no reply within"); the SuperLink misses two of the node's
    # heartbeats and answers for it ("Node Unavailable"); or the node was stopped while uploading its
    # reply and the upload session expires ("Reply message objects are unavailable"). Each is the
    # hang, recorded as the node's fault; which one depends on the machine's load.
    hung = re.compile(r"no reply within|Node Unavailable|Reply message objects are unavailable")
    assert any(f["client"] == 1 and hung.search(f["reason"]) for f in s["faults"]), s["faults"]
    assert 0 < s["missed_events"][1] < 120
    assert [c["round"] for c in s["clients"]] == [119, 119]


@pytest.mark.slow
@needs_flower
def test_a_killed_deployment_resumes_from_the_servers_checkpoint(tmp_path):
    """Stop the whole deployment (SuperLink with the ServerApp, and the SuperNodes) once the server
    has checkpointed round 20; start a new one on the same cache folders and run again with
    ``resume=true``: the server continues from its checkpoint, each node from its state of that
    boundary, and the run ends with the uninterrupted run's models and bytes (that of the deployment's
    code over a loopback link: with B = 5 it is not the simulator's), no fault and no rejoin."""
    from fedstream.errors import FedstreamError
    from fedstream.runs.checkpoint import load_checkpoint

    values = overrides(write_learnable_mnist(tmp_path / "data"), 40) | {"network.batch": 5,
                                                                        "checkpoint.every": 20}
    out = tmp_path / "out"
    app = flower_app(tmp_path / "app", "", values, out, audit=True, reply_timeout=REPLY_TIMEOUT)

    def checkpointed() -> int:
        try:
            return int(load_checkpoint(out / "checkpoint.npz")[1]["round"])
        except FedstreamError:  # not there yet, or being replaced right now
            return -1

    first, _ = run_with_fault(tmp_path / "deployment", app,
                              stop_when(lambda: checkpointed() >= 20, "the server to checkpoint round 20"))
    assert first.returncode != 0 and not (out / "summary.json").exists() and checkpointed() == 20
    second, log = run_resumed(tmp_path / "deployment", app)
    assert second.returncode == 0 and (out / "summary.json").exists(), log[-4000:]
    assert "resuming at round 20" in log
    s = json.loads((out / "summary.json").read_text())
    assert s["faults"] == [] and s["rejoins"] == [] and s["rounds"] == 40
    whole, whole_reports = loopback_run(
        load_config(None, values), record_sizes=False
    )  # B = 5: not the simulator's
    assert_same_models(load_models(out / "models.npz"), party_models(whole, whole_reports))
    assert s["bytes"] == whole.summary()["bytes"]
