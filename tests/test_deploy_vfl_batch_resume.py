"""Faults in a deployed batch VFL run (issue 10), server side: the server checkpoints every epoch and
a new server resumes exactly, the nodes going back to the state they kept at the checkpoint's
boundary (a crashing client node: ``test_deploy_vfl_batch_faults.py``).

The tests drive the deployment's code (:class:`fedstream.vfl.deploy.driver.NetworkBatchVFL`) over
in-process links on which the server dies, on MNIST with the tiny settings of
``tests/helpers/vfl_deploy.py``, and compare the resumed run with the simulator's.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from fedstream.deploy.records import ROUND, SETUP
from fedstream.deploy.runtimes.loopback import LoopbackLink
from fedstream.errors import ConfigError
from fedstream.vfl import run_batch_vfl
from fedstream.vfl.deploy.data import batch_settings, load_block, load_labels
from fedstream.vfl.deploy.driver import NetworkBatchVFL, boundary
from fedstream.vfl.deploy.records import EVALUATION, SELECT, boundary_of
from tests.helpers.links import RecordingLink, ServerCrash
from tests.helpers.models import assert_same_models
from tests.helpers.vfl_deploy import (
    ATOL,
    COMPRESSED,
    TIMING,
    VFPS,
    assert_same_run,
    deploy_vfl,
    deployed_models,
    simulate_vfl,
    vfl_link,
    vfl_tiny_config,
)


def crash_in(epoch: int):
    """A progress callback that kills the server after the training steps of ``epoch``."""
    def progress(event):
        if event["event"] == "step" and event["epoch"] == epoch:
            raise ServerCrash
    return progress


def metrics_rows(folder: Path) -> list[dict]:
    with open(folder / "metrics.csv") as fh:
        return [{k: v for k, v in r.items() if k not in TIMING} for r in csv.DictReader(fh)]


def crash_and_resume(
    config: dict, data_root: Path, tmp: Path, epoch: int = 2
) -> tuple[NetworkBatchVFL, dict, str]:
    """The server dies after the training steps of ``epoch`` (its checkpoint is that of epoch - 1,
    the nodes are further on); a new server loads the checkpoint and finishes the run."""
    labels = load_labels(config, str(data_root))
    link = vfl_link(config, data_root, tmp, persist=True, store=tmp / "nodes")
    first = NetworkBatchVFL(config, link, labels=labels, out=tmp / "out", progress=crash_in(epoch))
    with pytest.raises(ServerCrash):
        first.run(models=True)
    assert len(metrics_rows(tmp / "out")) == epoch - 1
    second = NetworkBatchVFL(config, link, labels=labels, out=tmp / "out")
    second.load(tmp / "out" / "checkpoint.pt")
    assert second.done == epoch - 1 and second.cohort.run_token == first.cohort.run_token
    return second, second.run(models=True), first.cohort.run_token


@pytest.mark.parametrize(
    "extra",
    [
        COMPRESSED | {"train.epochs": 3},
        {
            "selection.method": "random",
            "selection.l": 2,
            "selection.dynamic": "discrete",
            "selection.keep": 0.5,
            "selection.update_prob": 1.0,
            "selection.padding": "mean",
            "train.epochs": 2,
        },
    ],
    ids=["topk-cache-quant", "random-selection"],
)
def test_the_server_resumes_from_its_checkpoint_and_the_nodes_from_theirs(data_root, tmp_path, extra):
    """Same summary (rows, accuracy, bytes per client and direction) and the same final models as an
    uninterrupted run, which is the simulator's; metrics.csv holds each epoch once."""
    config = vfl_tiny_config(data_root, **extra)
    want, want_models = simulate_vfl(config)
    net, got, _ = crash_and_resume(config, data_root, tmp_path)
    assert got["faults"] == [] and got["rejoins"] == [] and got["missed_steps"] == [0, 0, 0]
    assert_same_run(got, want)
    assert_same_models(deployed_models(net), want_models, atol=ATOL)
    if "selection.method" in extra:
        untimed = lambda events: [{k: v for k, v in e.items() if k != "seconds"} for e in events]
        assert untimed(got["selection"]["events"]) == untimed(
            json.loads(json.dumps(want["selection"]["events"]))
        )
    # the nodes agree with the server's restored counters (finish found nothing to record)
    assert [(c["up"], c["down"]) for c in got["clients"]] == [
        (b["up"], b["down"]) for b in got["bytes"]["per_client"]
    ]
    written = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert [r["epoch"] for r in written["per_epoch"]] == list(range(1, config["train.epochs"] + 1))
    assert metrics_rows(tmp_path / "out") == [{k: str(v) for k, v in r.items() if k not in TIMING}
                                              for r in got["per_epoch"]]


def test_vfps_resumes_with_the_nodes_kept_states_of_its_selections(data_root, tmp_path):
    """VF-PS (re-selecting every epoch): the unselected node's last request before the checkpoint is
    the selection that opened the epoch; it goes back to its state after it (boundary 2e - 1)."""
    config = vfl_tiny_config(
        data_root, **VFPS, **{"train.epochs": 3}
    )
    want, want_models = simulate_vfl(config)
    net, got, _ = crash_and_resume(config, data_root, tmp_path, epoch=3)
    assert got["faults"] == [] and got["rejoins"] == []
    assert_same_run(got, want)
    assert_same_models(deployed_models(net), want_models, atol=ATOL)
    assert [(e["epoch"], e["clients"]) for e in got["selection"]["events"]] == \
        [(e["epoch"], list(e["clients"])) for e in want["selection"]["events"]]
    assert [(c["select_up"], c["select_down"]) for c in got["clients"]] == \
        [(b["up"], b["down"]) for b in got["selection_bytes"]["per_client"]]


def test_a_server_dying_between_an_evaluation_and_its_checkpoint_resumes_exactly(data_root, tmp_path,
                                                                                 monkeypatch):
    """VF-PS re-selecting every epoch marks two boundaries per epoch (its selection, 2e - 1, and its
    evaluation, 2e). The server dies after epoch 3's evaluation, before writing its checkpoint: it
    resumes from epoch 2's (boundary 4), which every node still keeps beside 5 and 6."""
    config = vfl_tiny_config(
        data_root, **VFPS, **{"train.epochs": 4}
    )
    want, want_models = simulate_vfl(config)
    labels = load_labels(config, str(data_root))
    link = vfl_link(config, data_root, tmp_path, persist=True, store=tmp_path / "nodes")
    save = NetworkBatchVFL.save

    def dies_at_epoch_3(self, path, **kw):
        if self.done == 3:
            raise ServerCrash
        save(self, path, **kw)

    monkeypatch.setattr(NetworkBatchVFL, "save", dies_at_epoch_3)
    with pytest.raises(ServerCrash):
        NetworkBatchVFL(config, link, labels=labels, out=tmp_path / "out").run(models=True)
    monkeypatch.setattr(NetworkBatchVFL, "save", save)
    net = NetworkBatchVFL(config, link, labels=labels, out=tmp_path / "out")
    net.load(tmp_path / "out" / "checkpoint.pt")
    assert net.done == 2
    got = net.run(models=True)
    assert got["faults"] == [] and got["rejoins"] == []
    assert_same_run(got, want)
    assert_same_models(deployed_models(net), want_models, atol=ATOL)



def marks(link: RecordingLink) -> list[tuple]:
    """(kind, split, boundary) of every request asking the nodes to keep their state at a boundary,
    or to go back to one (``resume``): once per exchange, in order."""
    out = []
    for requests, _ in link.log:
        found = {(env.kind, env.info.get("split"), env.info["boundary"] if "boundary" in env.info
                  else env.info["resume"]) for env in requests.values()
                 if "boundary" in env.info or "resume" in env.info}
        out += sorted(found, key=str)
    return out


def test_every_boundary_comes_from_the_epoch_played(data_root, tmp_path):
    """One formula (boundary_of) for the VF-PS selection opening epoch e (2e - 1), the evaluation
    ending it (2e) and a resumed server's ``resume``, all from the epoch the driver plays: the
    server dies in epoch 3's training (checkpoint: epoch 2), the new one sets the nodes back to 4
    and asks them to keep 5 and 6 again, whatever was sent before."""
    assert [boundary_of(e, SELECT) for e in (1, 2, 3)] == [1, 3, 5]
    assert [boundary_of(e, EVALUATION) for e in (0, 1, 2, 3)] == [0, 2, 4, 6] and boundary(2) == 4
    for bad in ((0, SELECT), (-1, EVALUATION), (1.0, EVALUATION), (1, "train")):
        with pytest.raises(ValueError, match="epoch|kind"):
            boundary_of(*bad)
    config = vfl_tiny_config(
        data_root, **VFPS, **{"train.epochs": 3}
    )
    labels = load_labels(config, str(data_root))
    link = vfl_link(config, data_root, tmp_path, RecordingLink, persist=True, store=tmp_path / "nodes")
    with pytest.raises(ServerCrash):
        NetworkBatchVFL(config, link, labels=labels, out=tmp_path / "out", progress=crash_in(3)).run()
    assert marks(link) == [(ROUND, "select", 1), (ROUND, "test", 2), (ROUND, "select", 3), (ROUND, "test", 4),
                          (ROUND, "select", 5)]
    link.log.clear()
    net = NetworkBatchVFL(config, link, labels=labels, out=tmp_path / "out")
    net.load(tmp_path / "out" / "checkpoint.pt")
    got = net.run()
    assert marks(link) == [(SETUP, None, 4), (ROUND, "select", 5), (ROUND, "test", 6)]
    assert got["faults"] == [] and got["rejoins"] == [] and len(got["per_epoch"]) == 3


def test_serve_vfl_batch_follows_the_out_and_resume_rules(data_root, tmp_path, capsys):
    """The server's batch VFL party refuses ``resume`` without ``out/checkpoint.pt`` (it used to start
    afresh while online VFL ignored it: :func:`fedstream.deploy.serve.serve` now decides for every
    task), runs fresh, refuses a fresh run over the finished one and, asked to resume, finds the
    checkpoint and says so; ``summary.json`` holds the run's config under ``config``."""
    from fedstream.deploy.runtimes.flower import resolve_settings
    from fedstream.deploy.serve import serve

    link = LoopbackLink(
        lambda cfg, m: load_block(cfg, m, data_root=str(data_root), cache_dir=tmp_path / "cache"),
        3,
        persist=True,
        store=tmp_path / "nodes",
    )

    class Runtime:  # what serve asks of a runtime
        def connect(self, n):
            return link

        def extra(self):
            return {}

        def note(self):
            return "0 Flower messages"

    config = vfl_tiny_config(data_root)
    out = tmp_path / "out"
    settings = resolve_settings({"out": str(out), "resume": True, "data-root": str(data_root)})
    with pytest.raises(ConfigError, match=r"checkpoint.pt does not exist: nothing to resume"):
        serve(config, settings, Runtime())
    fresh = settings | {"resume": False}
    serve(config, fresh, Runtime())
    assert (out / "summary.json").exists() and (out / "checkpoint.pt").exists()
    assert json.loads((out / "summary.json").read_text())["config"] == json.loads(json.dumps(config))
    with pytest.raises(ConfigError, match=r"summary.json exists: the run there has finished"):
        serve(config, fresh, Runtime())
    capsys.readouterr()
    serve(config, settings, Runtime())
    assert f"fedstream: resuming after epoch 1 from {out / 'checkpoint.pt'}" in capsys.readouterr().out


DYNAMIC_VFPS = {
    "discrete": {
        "selection.dynamic": "discrete",
        "selection.keep": 0.6,
        "selection.update_prob": 1.0,
        "selection.k": 3,
        "train.epochs": 3,
    },
    "relaxed": {
        "selection.dynamic": "relaxed",
        "selection.keep": 0.7,
        "selection.arrival": 0.5,
        "selection.lifespan_min": 2,
        "selection.lifespan_max": 4,
        "selection.k": 3,
        "selection.every": 0,
        "data.train_rows": 400,
        "train.batch_size": 100,
        "train.epochs": 4,
    },
}


@pytest.mark.parametrize("dynamic", list(DYNAMIC_VFPS))
def test_vfps_on_dynamic_data_equals_the_simulator_and_resumes(data_root, tmp_path, dynamic):
    """VF-PS re-selecting as the data change (discrete: the subset redrawn; relaxed: when the
    pessimistic bound is crossed): each node scores only the epoch's available rows; the same
    selections, models and bytes as the simulator, also when the server dies in epoch 3 and resumes
    (the relaxed schedule's draws and the pessimistic scores come back from the checkpoint)."""
    from fedstream.vfl.deploy.vfps import HEADER
    config = vfl_tiny_config(
        data_root, **VFPS | DYNAMIC_VFPS[dynamic]
    )
    want, want_models = simulate_vfl(config)
    untimed = lambda events: [
        {k: v for k, v in e.items() if k != "seconds"} for e in json.loads(json.dumps(events))
    ]
    reason = {"discrete": "data redrawn", "relaxed": "pessimistic bound crossed"}[dynamic]
    assert reason in [e["reason"] for e in want["selection"]["events"]]  # the data did change the selection
    net, got, _ = deploy_vfl(config, data_root, tmp_path / "whole")
    assert got["faults"] == []
    assert_same_run(got, want)
    assert_same_models(deployed_models(net), want_models, atol=ATOL)
    assert untimed(got["selection"]["events"]) == untimed(want["selection"]["events"])
    up = sum(
        HEADER.size + 4 * min(50, e["available_rows"]) * e["available_rows"]
        for e in want["selection"]["events"]
    )
    assert [b["up"] for b in got["selection_bytes"]["per_client"]] == [
        up
    ] * 3  # distances to the available rows only
    net, got, _ = crash_and_resume(config, data_root, tmp_path / "cut", epoch=3)
    assert got["faults"] == [] and got["rejoins"] == []
    assert_same_run(got, want)
    assert_same_models(deployed_models(net), want_models, atol=ATOL)
    assert untimed(got["selection"]["events"]) == untimed(want["selection"]["events"])


def test_resume_may_raise_epochs_but_refuses_other_changes(data_root, tmp_path):
    config = vfl_tiny_config(data_root, **COMPRESSED)
    labels = load_labels(config, str(data_root))
    link = vfl_link(config, data_root, tmp_path, persist=True, store=tmp_path / "nodes")
    NetworkBatchVFL(config, link, labels=labels, out=tmp_path / "out").run()
    path = tmp_path / "out" / "checkpoint.pt"
    for change, keys in (({"compression.ratio": 0.25}, "compression.ratio: 0.125 -> 0.25"),
                         ({"optimizer.lr": 0.05, "seed": 2}, "optimizer.lr: 0.1 -> 0.05, seed: 1 -> 2")):
        other = vfl_tiny_config(data_root, **COMPRESSED, **change)
        with pytest.raises(
            ConfigError, match=f"{path}.*other settings \\({keys}\\).*only train.epochs may change"
        ):
            NetworkBatchVFL(other, link, labels=labels).load(path)
    # the simulator's checkpoint
    run_batch_vfl(batch_settings(config), data_root, seed=1, out=tmp_path / "sim")
    with pytest.raises(
        ConfigError, match="a checkpoint of the simulator's, expected one of a deployed run's server"
    ):
        NetworkBatchVFL(config, link, labels=labels).load(tmp_path / "sim" / "checkpoint.pt")
    # one more epoch on top of the finished run: as a two-epoch run from the start
    two = vfl_tiny_config(data_root, **COMPRESSED, **{"train.epochs": 2})
    want, want_models = simulate_vfl(two)
    net = NetworkBatchVFL(two, link, labels=labels, out=tmp_path / "out")
    net.load(path)
    got = net.run(models=True)
    assert_same_run(got, want)
    assert_same_models(deployed_models(net), want_models, atol=ATOL)


def test_deploy_app_takes_resume_for_batch_vfl(data_root, tmp_path):
    """``fedstream deploy app|local ... --resume`` is accepted for batch VFL and reaches the ServerApp's
    settings."""
    from fedstream.cli import build_parser
    from fedstream.cli.deploy import _settings
    from fedstream.config import load_config

    args = build_parser().parse_args(["deploy", "app", str(tmp_path / "app"), "vfl-mnist", "--set",
                                      f"data.root={data_root}", "--out", str(tmp_path / "out"), "--resume"])
    config = load_config(args.config, args.sets)
    settings = _settings(args, config, args.out)
    assert (
        settings["resume"] is True
        and config["task"] == "vfl"
        and settings["out"] == str((tmp_path / "out").resolve())
    )
