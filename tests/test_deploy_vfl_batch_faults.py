"""Faults in a deployed batch VFL run (issue 10), client side: a client node that crashes is padded,
recorded and rejoins from its own checkpoint (the server's checkpoint and resume:
``test_deploy_vfl_batch_resume.py``).

Fast tests drive the deployment's code (:class:`fedstream.vfl.deploy.driver.NetworkBatchVFL`)
over in-process links that crash a node, on MNIST with the tiny settings of
``tests/helpers/vfl_deploy.py``; the slow one kills a real SuperNode of a local Flower deployment.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from fedstream.deploy.archive import unpack_state
from fedstream.deploy.records import ROUND
from fedstream.deploy.runtimes.loopback import LoopbackLink
from fedstream.vfl.deploy.data import load_labels
from fedstream.vfl.deploy.driver import NetworkBatchVFL
from tests.helpers.crashing import CrashOnce, kill_then_replace, run_with_fault, scaled_timeout
from tests.helpers.data import write_learnable_mnist_splits
from tests.helpers.flower import flower_app, needs_flower
from tests.helpers.vfl_deploy import COMPRESSED, deploy_vfl, vfl_link, vfl_tiny_config


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


# -- real processes -------------------------------------------------------------------------------
# seconds; a 2-core machine busy with other Flower runs took over 30 s for a healthy request
REPLY_TIMEOUT = max(90.0, scaled_timeout(30.0))


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
    data = write_learnable_mnist_splits(tmp_path / "data", n=200)  # one epoch of 10 steps
    values = {"data.root": str(data), "vfl.clients": 2, "data.train_rows": 200, "data.test_rows": 100,
              "train.epochs": 1, "train.batch_size": 20, "model.hidden": 16, "model.embedding": 8,
              "optimizer.lr": 0.1, "seed": 0}
    out, cache = tmp_path / "out", tmp_path / "deployment" / "cache"
    app = flower_app(tmp_path / "app", "vfl-mnist", values, out, reply_timeout=REPLY_TIMEOUT)
    crash = kill_then_replace(lambda: _node_step(cache, 1) >= 2, "client 1 reaching step 2", REPLY_TIMEOUT)
    result, log = run_with_fault(tmp_path / "deployment", app, crash, timeout=scaled_timeout(1200))
    assert result.returncode == 0 and (out / "summary.json").exists(), log[-4000:]
    s = json.loads((out / "summary.json").read_text())
    assert s["epochs"] == 1 and len(s["per_epoch"]) == 1
    assert (
        any(f["client"] == 1 for f in s["faults"]) and s["missed_steps"][1] > 0 and s["missed_steps"][0] == 0
    )
    assert [r["client"] for r in s["rejoins"]] == [1]
    assert s["rejoins"][0]["node_step"] >= 2  # resumed from its checkpoint, not from scratch
    assert [c["client"] for c in s["clients"]] == [0, 1]
