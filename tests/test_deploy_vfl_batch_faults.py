"""Faults in a deployed batch VFL run (issue 10): a client node that crashes is padded, recorded and
rejoins from its own checkpoint; the server checkpoints every epoch and resumes exactly.

Fast tests drive the deployment's code (:class:`fedstream.vfl.deploy.driver.NetworkBatchVFL`)
over in-process links that crash a node or the server, on MNIST with the tiny settings of
``tests/helpers/vfl_deploy.py``; the slow one kills a real SuperNode of a local Flower deployment.
"""

from __future__ import annotations

import csv
import json
import shutil
import time
from pathlib import Path

import numpy as np
import pytest

from fedstream.deploy.archive import unpack_state
from fedstream.deploy.records import ROUND, SETUP
from fedstream.deploy.runtimes.loopback import LoopbackLink
from fedstream.errors import ConfigError
from fedstream.vfl import run_batch_vfl
from fedstream.vfl.deploy.data import batch_settings, load_block, load_labels
from fedstream.vfl.deploy.driver import NetworkBatchVFL, boundary
from fedstream.vfl.deploy.records import EVALUATION, SELECT, boundary_of
from tests.helpers.crashing import CrashOnce, run_with_fault, wait_for
from tests.helpers.data import write_idx_split
from tests.helpers.flower import needs_flower
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


def train_step(env) -> bool:
    return env.kind == ROUND and env.info.get("split") == "train"


# -- a client node crashes and comes back ---------------------------------------------------------
class CrashingLink(CrashOnce):
    """Client 1's node crashes when the request of training step 2 arrives; a new node is there for
    the next request."""

    def crashes_on(self, env):
        return train_step(env) and env.round == 2


def node_steps(store: Path, run: str) -> list[int]:
    """The last training step in each node's latest checkpoint (what it would come back with)."""
    steps = []
    for m in range(3):
        with np.load(store / f"ckpt-{run}-{m}.npz") as z:
            steps.append(int(unpack_state("vfl", {k: z[k] for k in z.files}, f"client {m}")["last_step"]))
    return steps


def test_a_crashed_node_rejoins_from_its_checkpoint(data_root, tmp_path):
    config = vfl_tiny_config(data_root, **{"train.epochs": 2})
    net, got, _ = deploy_vfl(config, data_root, tmp_path, CrashingLink)
    assert [(f["round"], f["client"], f["request"]) for f in got["faults"]] == [(2, 1, "train")]
    assert "no reply" in got["faults"][0]["reason"]
    # back before step 3 from its checkpoint after step 1 (its gradient of step 1 went down with the
    # request that failed, so the node drops step 1); nothing held for it: nothing dropped
    assert got["rejoins"] == [{"step": 3, "client": 1, "node_step": 1, "dropped_gradients": 0}]
    assert got["missed_steps"] == [0, 1, 0]  # padded at step 2 only
    assert [c["client"] for c in got["clients"]] == [0, 1, 2]  # every node finished the run
    assert node_steps(tmp_path / "nodes", net.cohort.run_token) == [7, 7, 7]
    msg = 11 + 4 * 50 * 16
    assert got["bytes"]["per_client"][1] == {"up": 7 * msg, "down": 7 * msg}  # step 2's embedding never came
    assert got["clients"][1]["down"] == 6 * msg  # the node received one gradient fewer: the one lost with it
    assert 0 <= got["final_accuracy"] <= 1


def test_a_node_without_a_checkpoint_starts_over_and_stays_in_the_run(data_root, tmp_path):
    config = vfl_tiny_config(data_root)
    labels = load_labels(config, str(data_root))
    link = vfl_link(config, data_root, tmp_path, CrashingLink, persist=True, store=None)  # nothing on disk
    got = NetworkBatchVFL(config, link, labels=labels).run()
    assert got["rejoins"] == [
        {"step": 3, "client": 1, "node_step": -1, "dropped_gradients": 0}
    ]  # a fresh party
    assert [c["client"] for c in got["clients"]] == [0, 1, 2]


class OlderNodeLink(LoopbackLink):
    """Client 1's node restarts between steps 2 and 3 from an older copy of its state (that after
    step 1), while the server holds the gradient of step 2 for it: a gradient for a step the
    restarted node never embedded, which the server must drop rather than send."""

    older = back = False

    def exchange(self, requests):
        replies = super().exchange(requests)
        env = requests.get(1)
        latest = self.store / next(p.name for p in self.store.glob("ckpt-*-1.npz"))
        if env is not None and train_step(env) and env.round == 1:
            shutil.copy(latest, self.store / "older.npz")
        if env is not None and train_step(env) and env.round == 2:
            del self.memory[1]
            shutil.copy(self.store / "older.npz", latest)
            self.older = True
        return replies

    def rejoined(self):
        if self.older and not self.back:
            self.back = True
            return {1}
        return set()


def test_a_node_back_at_an_older_step_gets_no_stale_gradient(data_root, tmp_path, caplog):
    config = vfl_tiny_config(data_root, **COMPRESSED)
    with caplog.at_level("WARNING", logger="fedstream.deploy"):
        _, got, _ = deploy_vfl(config, data_root, tmp_path, OlderNodeLink)
    assert got["faults"] == []  # no request failed: the node just came back elsewhere
    assert got["rejoins"] == [{"step": 3, "client": 1, "node_step": 1, "dropped_gradients": 1}]
    assert got["missed_steps"] == [0, 0, 0]
    assert [c["client"] for c in got["clients"]] == [0, 1, 2]
    # the node received the gradients of steps 0 (with step 1's request) and 3 (at the evaluation):
    # step 2's was dropped on the server, step 1's went with the state the node lost
    assert got["clients"][1]["down"] < got["clients"][0]["down"]


# -- the server crashes and resumes ---------------------------------------------------------------
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


def test_serve_vfl_batch_says_when_resume_finds_no_checkpoint(data_root, tmp_path, capsys):
    """The ServerApp's batch VFL party with ``resume`` and no ``out/checkpoint.pt`` says it starts
    afresh (as CHFL's does) and runs; asked to resume again, it finds the checkpoint and says so."""
    from fedstream.deploy.runtimes.flower import resolve_settings
    from fedstream.vfl.deploy.adapter import ADAPTER

    link = LoopbackLink(
        lambda cfg, m: load_block(cfg, m, data_root=str(data_root), cache_dir=tmp_path / "cache"),
        3,
        persist=True,
        store=tmp_path / "nodes",
    )

    class Runtime:  # what the adapter asks of a runtime
        def connect(self, n):
            return link

        def extra(self):
            return {}

        def note(self):
            return "0 Flower messages"

    config = vfl_tiny_config(data_root)
    out = tmp_path / "out"
    settings = resolve_settings({"out": str(out), "resume": True, "data-root": str(data_root)})
    ADAPTER.serve(config, settings, Runtime())
    said = capsys.readouterr().out
    assert f"fedstream: no checkpoint at {out / 'checkpoint.pt'}: starting afresh" in said, said
    assert (out / "summary.json").exists() and (out / "checkpoint.pt").exists()
    ADAPTER.serve(config, settings, Runtime())
    said = capsys.readouterr().out
    assert (
        f"fedstream: resuming after epoch 1 from {out / 'checkpoint.pt'}" in said
        and "starting afresh" not in said
    )


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


# -- real processes -------------------------------------------------------------------------------
def write_mnist(folder: Path, n: int = 400, n_test: int = 100, seed: int = 0) -> Path:
    """A small learnable MNIST in IDX files (class prototypes plus noise), train and test, under
    folder/mnist."""
    rng = np.random.default_rng(seed)
    proto = rng.integers(0, 256, (10, 28, 28))
    for stem, rows in (("train", n), ("t10k", n_test)):
        y = rng.integers(0, 10, rows).astype(np.uint8)
        images = np.clip(proto[y] + rng.normal(0, 40, (rows, 28, 28)), 0, 255).astype(np.uint8)
        write_idx_split(folder / "mnist", images, y, stem=stem)
    return folder


REPLY_TIMEOUT = (
    90.0  # seconds; a 2-core machine busy with other Flower runs took over 30 s for a healthy request
)


def _node_step(cache: Path, index: int) -> int:
    """The last training step client ``index``'s node has embedded, from its latest checkpoint (-1:
    none yet)."""
    paths = list(cache.glob(f"ckpt-*-{index}.npz"))
    if not paths:
        return -1
    try:
        with np.load(paths[0]) as z:
            return int(unpack_state("vfl", {k: z[k] for k in z.files}, "node")["last_step"])
    except Exception:  # noqa: BLE001 - being replaced right now
        return -1


@pytest.mark.slow
@needs_flower
def test_a_killed_supernode_is_padded_and_rejoins_from_its_checkpoint(tmp_path):
    """SIGKILL client 1's SuperNode (and its ClientApp) mid-run, start a new one: the server times
    the node out, pads it, sets the new node up from the old one's checkpoint; the run ends."""
    from fedstream.deploy.local import write_app

    data = write_mnist(tmp_path / "data", n=200)  # one epoch of 10 steps
    values = {"data.root": str(data), "vfl.clients": 2, "data.train_rows": 200, "data.test_rows": 100,
              "train.epochs": 1, "train.batch_size": 20, "model.hidden": 16, "model.embedding": 8,
              "optimizer.lr": 0.1, "seed": 0}
    out, cache = tmp_path / "out", tmp_path / "deployment" / "cache"
    app = write_app(
        tmp_path / "app",
        {
            "config": "vfl-mnist",
            "set": " ".join(f"{k}={v}" for k, v in values.items()),
            "out": str(out),
            "reply-timeout": REPLY_TIMEOUT,
        },
    )

    def crash(deployment, ended):
        wait_for(lambda: _node_step(cache, 1) >= 2, 600, "client 1 reaching step 2", ended=ended)
        deployment.kill_node(1)
        time.sleep(5)
        deployment.start_node(1)  # takes client 1's place once the server has timed the old node out

    result, log = run_with_fault(tmp_path / "deployment", app, crash, timeout=1200)
    assert result.returncode == 0 and (out / "summary.json").exists(), log[-4000:]
    s = json.loads((out / "summary.json").read_text())
    assert s["epochs"] == 1 and len(s["per_epoch"]) == 1
    assert (
        any(f["client"] == 1 for f in s["faults"]) and s["missed_steps"][1] > 0 and s["missed_steps"][0] == 0
    )
    assert [r["client"] for r in s["rejoins"]] == [1]
    assert s["rejoins"][0]["node_step"] >= 2  # resumed from its checkpoint, not from scratch
    assert [c["client"] for c in s["clients"]] == [0, 1]


def test_deploy_app_takes_resume_for_batch_vfl(data_root, tmp_path):
    """``fedstream deploy app|local ... --resume`` is accepted for batch VFL and reaches the ServerApp's
    settings."""
    from fedstream.cli import build_parser
    from fedstream.deploy.command import _settings

    args = build_parser().parse_args(["deploy", "app", str(tmp_path / "app"), "vfl-mnist", "--set",
                                      f"data.root={data_root}", "--out", str(tmp_path / "out"), "--resume"])
    settings, config = _settings(args, args.out)
    assert (
        settings["resume"] is True
        and config["task"] == "vfl"
        and settings["out"] == str((tmp_path / "out").resolve())
    )
