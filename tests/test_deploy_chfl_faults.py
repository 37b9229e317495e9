"""Faults in a deployed CHFL run (issue 10): a client node that crashes rejoins from its own
checkpoint; a whole deployment killed resumes from the server's checkpoint (the server's checkpoint
and resume over in-process links: ``test_deploy_chfl_resume.py``).

Fast tests drive the deployment's code (:class:`fedstream.chfl.deploy.driver.NetworkCHFL` over a
loopback link, every node rebuilt from its saved state for every request, as on a SuperNode) with
links that crash a node; the slow ones SIGKILL a real SuperNode of a local Flower deployment and
start a new one, or kill the whole deployment and resume it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fedstream.chfl.checkpoint import DEPLOYED, CheckpointError, read_checkpoint
from fedstream.chfl.deploy.driver import NetworkCHFL
from fedstream.deploy.records import ROUND, SETUP, Envelope, Failure
from fedstream.errors import ProtocolError
from tests.helpers.chfl_deploy import (
    CHFL_TINY,
    FAULTS,
    assert_same_result,
    chfl_link,
    chfl_tiny_config,
    server_config,
    simulate_chfl,
)
from tests.helpers.crashing import (
    CrashOnce,
    fault_logged,
    run_resumed,
    run_with_fault,
    scaled_timeout,
    stop_when,
    wait_for,
)
from tests.helpers.flower import flower_app
from tests.helpers.links import spoiling


@pytest.fixture(scope="module")
def config(covertype_root):
    return chfl_tiny_config(covertype_root, **FAULTS)


@pytest.fixture(scope="module")
def simulated(config):
    return simulate_chfl(config)


# -- a node crashes and rejoins ---------------------------------------------------------------------
class CrashingLink(CrashOnce):
    """Client 1's node crashes when the request for round 2 of the first federation arrives; at the
    next round it is back on a new node."""

    def crashes_on(self, env):
        return env.kind == ROUND and env.round == 2


def test_a_crashed_node_rejoins_from_its_checkpoint(covertype_root, config, simulated, tmp_path):
    """The node misses round 2 (FedAvg averages the others), is set up again before round 3 from its
    state after round 1, plays on and reports its choices: one fault, one rejoin, all three clients."""
    want, _ = simulated
    link = chfl_link(config, covertype_root, tmp_path, CrashingLink)
    net = NetworkCHFL(server_config(config, tmp_path), link)
    got = net.run()
    assert [(f["client"], f["round"], f["request"]) for f in got["faults"]] == [(1, 2, ROUND)]
    assert "no reply" in got["faults"][0]["reason"]
    assert got["rejoins"] == [{"lr_index": 0, "round": 3, "client": 1, "node_lr_index": 0, "node_round": 1}]
    assert len(got["test_acc_per_client"]) == 3 and all(0 <= a <= 1 for a in got["test_acc_per_client"])
    assert [r["client"] for r in got["clients"]] == [0, 1, 2]
    # client 1 got no θ^2 and sent no θ_1^2: one model less each way; the others are unaffected
    per = got["bytes"]["per_client"]
    assert per[0] == want["bytes"]["per_client"][0] and per[2] == want["bytes"]["per_client"][2]
    assert per[1]["up"] < want["bytes"]["per_client"][1]["up"]
    # the node counted what it really received: θ^2 never arrived (the server counted it as sent)
    node, server = got["clients"][1], got["clients"][1]["server_counted"]
    assert node["down"] < server[1] and node["up"] == server[0]


def test_a_node_that_lost_everything_comes_back_as_a_fresh_party(covertype_root, config, tmp_path):
    """Without a cache folder the node has no checkpoint: it rejoins at position (-1, -1), builds the
    federation's fresh weights, takes θ^3 and still reports choices (from the rounds it played)."""
    link = chfl_link(config, covertype_root, tmp_path, CrashingLink, store=False)
    got = NetworkCHFL(server_config(config, tmp_path), link).run()
    assert got["rejoins"] == [{"lr_index": 0, "round": 3, "client": 1, "node_lr_index": -1, "node_round": -1}]
    assert [f["client"] for f in got["faults"]] == [1]
    assert len(got["test_acc_per_client"]) == 3


class ImpostorLink(CrashingLink):
    """Client 1 comes back on a node that holds other data (another row count)."""

    def exchange(self, requests):
        replies = super().exchange(requests)
        if self.returned and requests.get(1) is not None and requests[1].kind == SETUP:
            r = replies[1]
            replies[1] = Envelope(r.kind, r.round, r.parts, r.info | {"n_train": r.info["n_train"] + 1})
        return replies


def test_a_rejoining_node_with_other_data_is_refused_and_the_run_goes_on(covertype_root, config, tmp_path):
    link = chfl_link(config, covertype_root, tmp_path, ImpostorLink)
    got = NetworkCHFL(server_config(config, tmp_path), link).run()
    assert got["rejoins"] == []
    setup = [f for f in got["faults"] if f["request"] == SETUP]
    assert setup and all(f["client"] == 1 and "rejoin refused" in f["reason"] and "n_train" in f["reason"]
                         for f in setup)
    assert len(got["test_acc_per_client"]) == 2  # client 1 stays out to the end


# -- every node's reply to a round lost --------------------------------------------------------------
# what Flower 1.41 reports when a live node's uploaded reply is gone before the server pulls it
LOST = "the ClientApp failed: Reply message objects are unavailable (object-push session expired)"


def _lost_in(rounds: set[int]):
    """A link that loses every node's reply (after the node played it) to the first federation's
    ``rounds``."""
    return spoiling(lambda m, env: env.kind == ROUND and env.round in rounds and env.info["lr_index"] == 0,
                    lambda reply: Failure(LOST))


def test_a_round_whose_replies_are_all_lost_keeps_the_global_column_and_the_run_goes_on(covertype_root,
                                                                                      config, tmp_path):
    """Every node played round 1 but its reply was lost (issue 31: under load, Flower lost the live
    node's reply while the other one was down): one fault per node, FedAvg has nothing to average,
    θ^2 = θ^1 (``carried_over``), and the run goes on to its end instead of stopping."""
    link = chfl_link(config, covertype_root, tmp_path, _lost_in({1}))
    got = NetworkCHFL(server_config(config, tmp_path), link).run()
    assert got["carried_over"] == [[0, 1]]
    assert [(f["client"], f["round"]) for f in got["faults"]] == [(0, 1), (1, 1), (2, 1)]
    assert all("object-push session expired" in f["reason"] for f in got["faults"])
    assert len(got["test_acc_per_client"]) == 3 and [r["client"] for r in got["clients"]] == [0, 1, 2]


def test_two_rounds_in_a_row_without_any_reply_end_the_run(covertype_root, config, tmp_path):
    link = chfl_link(config, covertype_root, tmp_path, _lost_in({1, 2}))
    with pytest.raises(ProtocolError, match=r"federation 0, round 2: no client sent a valid model update, "
                                            r"nor in round 1"):
        NetworkCHFL(server_config(config, tmp_path), link).run()


def test_a_carried_over_round_survives_the_servers_checkpoint(covertype_root, config, tmp_path):
    """The simulator's loop keeps the carried-over rounds in its checkpoint (a resumed run still
    knows that round 1 brought nothing, and that a second one in a row ends it)."""
    folder = tmp_path / "server"
    folder.mkdir()
    link = chfl_link(config, covertype_root, tmp_path, _lost_in({1}))
    NetworkCHFL(server_config(config, tmp_path), link).run(checkpoint=folder / "checkpoint.pt")
    assert read_checkpoint(folder / "checkpoint.pt", kind=DEPLOYED)["state"]["carried"] == [[0, 1]]


# -- real processes ---------------------------------------------------------------------------------
REPLY_TIMEOUT = scaled_timeout(30.0)  # an idle 2-core machine takes up to ~20 s for a healthy request


def _node_position(cache: Path, index: int) -> tuple[int, int]:
    """Where client ``index``'s node is, from its latest checkpoint ((-1, -1): none yet)."""
    from fedstream.deploy.archive import unpack_state

    paths = list(cache.glob(f"ckpt-*-{index}.npz"))
    if not paths:
        return -1, -1
    try:
        with np.load(paths[0]) as z:
            state = unpack_state("chfl", {k: z[k] for k in z.files}, f"client {index}")
        return int(state["lr_index"]), int(state["round"])
    except Exception:  # noqa: BLE001 - being replaced right now
        return -1, -1


@pytest.mark.slow
def test_a_killed_supernode_rejoins_from_its_checkpoint(covertype_root, tmp_path):
    """SIGKILL client 1's SuperNode (and its ClientApp) mid-run, start a new one: the server times the
    node out and goes on with client 0, then sets the new node up from the old one's checkpoint."""
    pytest.importorskip("flwr", reason="Flower is the optional extra: pip install 'fedstream[flower]'")
    values = CHFL_TINY | {"data.root": str(covertype_root), "chfl.clients": 2, "chfl.rounds": 6,
                          "chfl.lrs": "0.01"}
    out, cache = tmp_path / "out", tmp_path / "deployment" / "cache"
    app = flower_app(tmp_path / "app", "chfl-covertype", values, out, reply_timeout=REPLY_TIMEOUT)

    def crash(deployment, ended) -> None:
        wait_for(lambda: _node_position(cache, 1) >= (0, 1), scaled_timeout(600), "client 1 to play round 1",
                 ended=ended)
        timed_out = fault_logged(deployment.workdir / "flwr-run.log", 1)
        deployment.kill_node(1)
        # the new node at once: it registers while the server waits for the dead one (the SuperLink
        # takes far longer than a round to notice a death), and takes client 1's place once the
        # server has given the dead one up (GridLink.rejoined), so it is back before the run ends
        deployment.start_node(1)
        wait_for(timed_out, 4 * REPLY_TIMEOUT + scaled_timeout(300), "the server to give client 1 up",
                 ended=ended)

    result, log = run_with_fault(tmp_path / "deployment", app, crash, timeout=scaled_timeout(900))
    assert result.returncode == 0 and (out / "summary.json").exists(), log[-4000:]
    s = json.loads((out / "summary.json").read_text())
    # the dead node's request fails ("no reply within", or "Node Unavailable" from the SuperLink); under
    # load Flower 1.41 may also lose the live node's reply ("Reply message objects are unavailable"):
    # that round is client 0's fault too and carries θ over (``carried_over``), the run goes on
    assert any(f["client"] == 1 for f in s["faults"]), s["faults"]
    (rejoin,) = s["rejoins"]
    assert rejoin["client"] == 1 and (rejoin["node_lr_index"], rejoin["node_round"]) >= (
        0,
        1,
    )  # not from scratch
    assert len(s["test_acc_per_client"]) == 2 and [c["client"] for c in s["clients"]] == [0, 1]
    assert (out / "checkpoint.pt").exists() and (out / "metrics.csv").exists()


@pytest.mark.slow
def test_a_killed_deployment_resumes_from_the_servers_checkpoint(covertype_root, tmp_path):
    """Kill the whole deployment (SuperLink with the ServerApp, and the SuperNodes) once the server
    has checkpointed the first federation's end; start a new one on the same cache folders and run
    again with ``resume=true``: the result is the simulator's, with no fault and no rejoin."""
    pytest.importorskip("flwr", reason="Flower is the optional extra: pip install 'fedstream[flower]'")
    values = CHFL_TINY | {"data.root": str(covertype_root), "chfl.clients": 2, "chfl.rounds": 2,
                          "chfl.lrs": "0.01,0.003"}
    want, _ = simulate_chfl(
        chfl_tiny_config(covertype_root, **{k: v for k, v in values.items() if k != "data.root"})
    )
    out = tmp_path / "out"
    app = flower_app(tmp_path / "app", "chfl-covertype", values, out, reply_timeout=REPLY_TIMEOUT)

    def position() -> tuple[int, int]:
        try:
            state = read_checkpoint(out / "checkpoint.pt", kind=DEPLOYED)["state"]
            return int(state["lr_index"]), int(state["round"])
        except (CheckpointError, OSError):
            return -1, -1

    first, _ = run_with_fault(
        tmp_path / "deployment",
        app,
        stop_when(lambda: position() >= (1, 0), "the server to checkpoint the first federation's end"),
        timeout=scaled_timeout(900),
    )
    assert first.returncode != 0 and not (out / "summary.json").exists()
    stopped_at = position()
    assert (1, 0) <= stopped_at < (2, 0)
    second, log = run_resumed(tmp_path / "deployment", app, timeout=scaled_timeout(900))
    assert second.returncode == 0 and (out / "summary.json").exists(), log[-4000:]
    assert f"resuming at federation {stopped_at[0]}" in log
    s = json.loads((out / "summary.json").read_text())
    assert s["resumed"] is True and s["faults"] == [] and s["rejoins"] == []
    assert_same_result(s, json.loads(json.dumps(want)))  # choices, accuracies, bytes: the simulator's
