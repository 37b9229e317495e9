"""Faults in a deployed CHFL run (issue 10), server side: the server checkpoints after every FedAvg
round and resumes exactly; a resumed run refuses another config or another kind of checkpoint (a
crashing client node and real processes: ``test_deploy_chfl_faults.py``).

The tests drive the deployment's code (:class:`fedstream.chfl.deploy.driver.NetworkCHFL` over a
loopback link, every node rebuilt from its saved state for every request, as on a SuperNode) with
links on which the server dies.
"""

from __future__ import annotations

import csv
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
    FAULTS,
    assert_same_result,
    chfl_link,
    chfl_tiny_config,
    server_config,
    simulate_chfl,
)
from tests.helpers.links import ServerCrash, crashing_at


@pytest.fixture(scope="module")
def config(covertype_root):
    return chfl_tiny_config(covertype_root, **FAULTS)


@pytest.fixture(scope="module")
def simulated(config):
    return simulate_chfl(config)


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
        ProtocolError, match=r"clients \[2\] did not set up.*index 1, round 2; expected lr_index 1, round 0"
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
