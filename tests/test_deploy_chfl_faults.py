"""Faults in a deployed CHFL run (issue 10): a client node that crashes rejoins from its own
checkpoint; the server checkpoints after every FedAvg round and resumes exactly.

Fast tests drive the deployment's code (:class:`fedstream.chfl.deploy.driver.NetworkCHFL` over a
loopback link, every node rebuilt from its saved state for every request, as on a SuperNode) with
links that crash a node or the server; the slow one SIGKILLs a real SuperNode of a local Flower
deployment and starts a new one.
"""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path

import numpy as np
import pytest

from fedstream.chfl.checkpoint import DEPLOYED, CheckpointError, read_checkpoint
from fedstream.chfl.deploy.data import chfl_config_settings
from fedstream.chfl.deploy.driver import NetworkCHFL
from fedstream.chfl.trainer import boundary
from fedstream.deploy.records import ROUND, SETUP, Envelope
from fedstream.deploy.runtimes.loopback import LoopbackLink
from fedstream.errors import ConfigError
from tests.helpers.chfl_deploy import (
    CHFL_TINY,
    assert_same_result,
    chfl_link,
    chfl_tiny_config,
    server_config,
    simulate_chfl,
)
from tests.helpers.crashing import CrashOnce, run_resumed, run_with_fault, stop_when, wait_for
from tests.helpers.links import ServerCrash, crashing_at

# two federations of three rounds: checkpoints after rounds 0 and 1 and at each federation's end
FAULTS = {"chfl.rounds": 3, "chfl.lrs": "0.01,0.003"}


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


# -- the server crashes and resumes -----------------------------------------------------------------
def crash_after(at: tuple[int, int] = (1, 1)):
    """A link on which the server's process dies once the nodes have answered the round request
    ``at`` (federation, round): the nodes are ahead of the server's last checkpoint."""
    return crashing_at(lambda env: env.kind == ROUND and (env.info["lr_index"], env.round) == at)


def metrics_rows(path: Path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.mark.parametrize(("crash", "resumed_at"), [((1, 1), (1, 1)), ((0, 3), (0, 2))])
def test_the_server_resumes_from_its_checkpoint_and_the_nodes_from_theirs(covertype_root, config, simulated,
                                                                           tmp_path, crash, resumed_at):
    """The server dies after round ``crash``'s replies came in; a new server loads its checkpoint
    (written after the round before, or before round T-1 when the crash hits round T), the nodes go
    back to their state of that boundary: the result is the uninterrupted run's and the simulator's."""
    want, want_common = simulated
    whole_net = NetworkCHFL(
        server_config(config, tmp_path / "whole"), chfl_link(config, covertype_root, tmp_path / "whole")
    )
    whole = whole_net.run(checkpoint=tmp_path / "whole" / "out" / "checkpoint.pt")
    assert_same_result(whole, want)

    link = chfl_link(config, covertype_root, tmp_path, crash_after(crash))
    path = tmp_path / "out" / "checkpoint.pt"
    first = NetworkCHFL(server_config(config, tmp_path), link)
    with pytest.raises(ServerCrash):
        first.run(checkpoint=path)
    second = NetworkCHFL(server_config(config, tmp_path), link)
    second.load(path)
    assert second.position == resumed_at and second.cohort.run_token == first.cohort.run_token
    got = second.run(checkpoint=path)
    assert got["resumed"] is True and got["faults"] == [] and got["rejoins"] == []
    assert_same_result(got, want)  # choices, test accuracies of every variant, bytes per client and direction
    assert got["variants"]["chfl"]["choices"] == want["variants"]["chfl"]["choices"]
    assert [(c["up"], c["down"], c["messages"]) for c in got["clients"]] == [
        (c["up"], c["down"], c["messages"]) for c in whole["clients"]]  # the nodes' own counts too
    for k, v in want_common.items():
        np.testing.assert_allclose(second.global_common()[k], v, rtol=0, atol=1e-6)
    assert metrics_rows(path.parent / "metrics.csv") == metrics_rows(
        tmp_path / "whole" / "out" / "metrics.csv"
    )
    assert got["exchanges"] > whole["exchanges"]  # the replayed round and the resuming setup


def test_a_run_resumed_after_its_last_federation_only_collects_the_choices(covertype_root, config, simulated,
                                                                           tmp_path):
    """The server dies after the nodes reported their choices, before writing its summary: resumed, it
    plays no round and asks the nodes (back at the last boundary) for their choices again."""
    want, _ = simulated
    link = chfl_link(config, covertype_root, tmp_path)
    path = tmp_path / "out" / "checkpoint.pt"
    NetworkCHFL(server_config(config, tmp_path), link).run(checkpoint=path)
    requests = link.requests
    again = NetworkCHFL(server_config(config, tmp_path), link)
    again.load(path)
    assert again.position == (2, 0)
    got = again.run()
    assert_same_result(got, want)
    assert link.requests - requests == 2 * config["chfl.clients"]  # setup and finish only


# -- a changed config is refused ------------------------------------------------------------------
@pytest.fixture(scope="module")
def checkpoint(covertype_root, config, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("checkpointed")
    link = chfl_link(config, covertype_root, tmp, crash_after())
    with pytest.raises(ServerCrash):
        NetworkCHFL(server_config(config, tmp), link).run(checkpoint=tmp / "out" / "checkpoint.pt")
    return tmp / "out" / "checkpoint.pt", link


@pytest.mark.parametrize(("change", "named"), [
    ({"chfl.lrs": "0.01,0.001"}, "chfl.lrs = [0.01, 0.003] there, [0.01, 0.001] here"),
    ({"seed": 2}, "seed = 1 there, 2 here"),
    ({"chfl.method": "common"}, "chfl.method = 'chfl' there, 'common' here"),
    ({"chfl.rounds": 4, "chfl.mus": "0"}, "chfl.mus"),
])
def test_resuming_with_another_config_is_refused_naming_the_keys(config, checkpoint, tmp_path, change, named):
    path, link = checkpoint
    before = path.read_bytes()
    net = NetworkCHFL(server_config(dict(config, **change), tmp_path), link)
    with pytest.raises(CheckpointError, match="belongs to another run") as exc:
        net.load(path)
    assert named in str(exc.value)
    if "chfl.rounds" in change:
        assert "chfl.rounds = 3 there, 4 here" in str(exc.value)
    assert path.read_bytes() == before and net.loaded is None


def test_resuming_from_a_file_that_is_not_a_deployed_checkpoint_is_refused(config, tmp_path):
    link = LoopbackLink(lambda cfg, m: None, config["chfl.clients"])
    bad = tmp_path / "checkpoint.pt"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="cannot read the checkpoint"):
        NetworkCHFL(config, link).load(bad)


def test_the_simulator_refuses_a_deployed_servers_checkpoint(config, checkpoint, tmp_path):
    """Same file name, format and identity, another state: ``run_on_table(run_dir=...)`` on a deployed
    server's --out folder says whose checkpoint it is and how to resume it (it used to die with a
    KeyError), and changes nothing there."""
    from fedstream.chfl.trainer import run_on_table
    from fedstream.data.chfl_datasets import SPECS, load_chfl_dataset

    path, _ = checkpoint
    out = tmp_path / "out"
    out.mkdir()
    (out / "checkpoint.pt").write_bytes(path.read_bytes())
    s = chfl_config_settings(config)
    table = load_chfl_dataset(s.dataset, config["data.root"]).table
    with pytest.raises(ConfigError, match=r"checkpoint.pt: a CHFL checkpoint written by a deployed server: "
                                          r"resume it with `fedstream deploy .*--resume`") as exc:
        run_on_table(table.X, table.y, s, method=config["chfl.method"], seed=config["seed"],
                     n_classes=SPECS[s.dataset].n_classes, run_dir=out)
    assert isinstance(exc.value, CheckpointError) and "the simulator cannot resume it" in str(exc.value)
    assert (out / "checkpoint.pt").read_bytes() == path.read_bytes() and not (out / "metrics.csv").exists()
    assert read_checkpoint(path, kind=DEPLOYED)["kind"] == DEPLOYED


def test_a_deployed_server_refuses_the_simulators_checkpoint(covertype_root, config, tmp_path):
    """The reverse: the simulator's checkpoint (of the very same run) in the server's --out is
    refused by ``load`` with a ConfigError that says it is the simulator's and how to resume it."""
    from fedstream.chfl.trainer import run_on_table
    from fedstream.data.chfl_datasets import SPECS, load_chfl_dataset

    s = chfl_config_settings(config)
    table = load_chfl_dataset(s.dataset, config["data.root"]).table
    one = {"chfl.rounds": 1, "chfl.lrs": "0.01"}  # the smallest run that checkpoints
    s1 = chfl_config_settings(dict(config, **one))
    run_on_table(table.X, table.y, s1, method=config["chfl.method"], seed=config["seed"],
                 n_classes=SPECS[s.dataset].n_classes, run_dir=tmp_path / "out")
    path = tmp_path / "out" / "checkpoint.pt"
    before = path.read_bytes()
    net = NetworkCHFL(server_config(dict(config, **one), tmp_path),
                      chfl_link(config, covertype_root, tmp_path))
    with pytest.raises(
        ConfigError,
        match=r"checkpoint.pt: a CHFL checkpoint written by the simulator: resume it "
        r"with `fedstream run`.*a deployed server cannot resume it",
    ):
        net.load(path)
    assert net.loaded is None and path.read_bytes() == before


def test_a_node_resumed_at_an_older_boundary_finishes_without_a_spurious_fault(covertype_root, config,
                                                                               tmp_path):
    """The server resumes at federation 1, round 1; client 1's node lost its state of that boundary
    and goes back to an older one (the first federation's end): a rejoin, and its own byte counts
    differ from the server's by the round it missed. That is what a rejoin means, not a fault: the
    run finishes with every client and no FINISH fault."""
    link = chfl_link(config, covertype_root, tmp_path, crash_after())
    path = tmp_path / "out" / "checkpoint.pt"
    first = NetworkCHFL(server_config(config, tmp_path), link)
    with pytest.raises(ServerCrash):
        first.run(checkpoint=path)
    rounds = config["chfl.rounds"]
    lost = tmp_path / "nodes" / f"ckpt-{first.cohort.run_token}-1-at{boundary(1, 1, rounds)}.npz"
    assert lost.exists() and (lost.parent / lost.name.replace(f"at{boundary(1, 1, rounds)}",
                                                              f"at{boundary(1, 0, rounds)}")).exists()
    lost.unlink()
    second = NetworkCHFL(server_config(config, tmp_path), link)
    second.load(path)
    got = second.run(checkpoint=path)
    assert got["rejoins"] == [
        {"lr_index": 1, "round": 1, "client": 1, "node_lr_index": 0, "node_round": rounds}
    ]
    assert got["faults"] == []  # no "the node counted ..., the server ..." at the finish
    assert [c["client"] for c in got["clients"]] == [0, 1, 2] and len(got["test_acc_per_client"]) == 3
    reports = {c["client"]: c for c in got["clients"]}
    assert [reports[1][k] for k in ("up", "down", "messages")] != reports[1][
        "server_counted"
    ]  # excused, not equal
    for m in (0, 2):
        assert [reports[m][k] for k in ("up", "down", "messages")] == reports[m]["server_counted"]
    assert second.cohort.troubled(1) and not second.cohort.troubled(0)


def test_a_node_ahead_of_a_resumed_server_is_a_fault(covertype_root, config, checkpoint, tmp_path):
    """A node that kept no state of the boundary but reports a later position cannot take part: the
    resuming setup records why and the run stops (a CHFL run needs every client at setup)."""
    path, link = checkpoint
    from fedstream.errors import ProtocolError

    class Ahead(LoopbackLink):
        def exchange(self, requests):
            replies = link.exchange(requests)
            if 2 in replies and requests[2].kind == SETUP:
                r = replies[2]
                replies[2] = Envelope(r.kind, r.round, r.parts, r.info | {"lr_index": 1, "round": 2})
            return replies

    net = NetworkCHFL(server_config(config, tmp_path), Ahead(lambda cfg, m: None, config["chfl.clients"]))
    net.load(path)
    with pytest.raises(
        ProtocolError, match=r"clients \[2\] did not set up.*federation 1, round 2; expected \(1, 0\)"
    ):
        net.run()


def test_deploy_app_passes_resume_for_chfl(covertype_root, tmp_path):
    """``fedstream deploy app chfl-... --resume`` writes ``resume = true`` into the app's settings
    (the ServerApp then loads ``out/checkpoint.pt``); it was refused before the server checkpointed."""
    pytest.importorskip("flwr", reason="Flower is the optional extra: pip install 'fedstream[flower]'")
    from fedstream.cli import main

    values = CHFL_TINY | {"data.root": str(covertype_root)}
    sets = [arg for k, v in values.items() for arg in ("--set", f"{k}={v}")]
    assert (
        main(
            [
                "deploy",
                "app",
                str(tmp_path / "app"),
                "chfl-covertype",
                *sets,
                "--out",
                str(tmp_path / "out"),
                "--resume",
            ]
        )
        == 0
    )
    assert "resume = true" in (tmp_path / "app" / "pyproject.toml").read_text()


# -- real processes ---------------------------------------------------------------------------------
REPLY_TIMEOUT = 30.0  # seconds; a busy 2-core machine takes up to ~20 s for a healthy request


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
    from fedstream.deploy.local import write_app

    values = CHFL_TINY | {"data.root": str(covertype_root), "chfl.clients": 2, "chfl.rounds": 6,
                          "chfl.lrs": "0.01"}
    out, cache = tmp_path / "out", tmp_path / "deployment" / "cache"
    app = write_app(
        tmp_path / "app",
        {
            "config": "chfl-covertype",
            "set": " ".join(f"{k}={v}" for k, v in values.items()),
            "out": str(out),
            "reply-timeout": REPLY_TIMEOUT,
        },
    )

    def crash(deployment, ended) -> None:
        wait_for(lambda: _node_position(cache, 1) >= (0, 1), 600, "client 1 to play round 1")
        deployment.kill_node(1)
        time.sleep(REPLY_TIMEOUT + 5)  # the server times it out and goes on without it meanwhile
        deployment.start_node(1)

    result, log = run_with_fault(tmp_path / "deployment", app, crash)
    assert result.returncode == 0 and (out / "summary.json").exists(), log[-4000:]
    s = json.loads((out / "summary.json").read_text())
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
    from fedstream.deploy.local import write_app

    values = CHFL_TINY | {"data.root": str(covertype_root), "chfl.clients": 2, "chfl.rounds": 2,
                          "chfl.lrs": "0.01,0.003"}
    want, _ = simulate_chfl(
        chfl_tiny_config(covertype_root, **{k: v for k, v in values.items() if k != "data.root"})
    )
    out = tmp_path / "out"
    app = write_app(
        tmp_path / "app",
        {
            "config": "chfl-covertype",
            "set": " ".join(f"{k}={v}" for k, v in values.items()),
            "out": str(out),
            "reply-timeout": REPLY_TIMEOUT,
        },
    )

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
    )
    assert first.returncode != 0 and not (out / "summary.json").exists()
    stopped_at = position()
    assert (1, 0) <= stopped_at < (2, 0)
    second, log = run_resumed(tmp_path / "deployment", app)
    assert second.returncode == 0 and (out / "summary.json").exists(), log[-4000:]
    assert f"resuming at federation {stopped_at[0]}" in log
    s = json.loads((out / "summary.json").read_text())
    assert s["resumed"] is True and s["faults"] == [] and s["rejoins"] == []
    assert_same_result(s, json.loads(json.dumps(want)))  # choices, accuracies, bytes: the simulator's
