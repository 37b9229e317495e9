"""Online VFL deployment tests: configs, the simulator with its message sizes, loopback runs and
comparisons (a deployment's models against the simulator's, bitwise).

Shared by test_deploy_flower, _compression, _topl, _faults, _validation and _security.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedstream.config import load_config
from fedstream.deploy.records import ROUND
from fedstream.deploy.runtimes.loopback import LoopbackLink
from fedstream.ovfl.deploy.driver import NetworkVFL
from fedstream.ovfl.deploy.parties import server_stream
from fedstream.ovfl.deploy.rows import BlockRows
from fedstream.ovfl.engine import OnlineVFL
from tests.helpers.crashing import CrashOnce
from tests.helpers.models import assert_same_models

SMALL_CHUNK = 64  # rounds per stream chunk with the small_chunks fixture (the simulator's is 4096)


def overrides(root: Path, rounds: int, seed: int = 0) -> dict:
    """2 clients on MNIST under ``root``, embedding 8, DLR, Random(0.5)."""
    return {
        "data.name": "mnist",
        "data.root": str(root),
        "vfl.clients": 2,
        "model.embedding": 8,
        "rounds": rounds,
        "optimizer.name": "dlr",
        "activation.name": "random",
        "activation.p": 0.5,
        "optimizer.lr": 0.05,
        "eval.interval": 100,
        "seed": seed,
    }


def topl_config(root: Path, rounds: int, **more) -> dict:
    """3 clients, the 2 best activated, all of them every 3rd round, the last 40 exploration rounds scored."""
    return load_config(None, overrides(root, rounds) | {
        "vfl.clients": 3, "activation.name": "topl", "activation.l": 2, "activation.explore": 3,
        "activation.window": 40, "activation.padding": "mean"} | more)


# -- the simulator -------------------------------------------------------------------------------
class RecordingTransport:
    """Wraps the simulator's transport; records (direction, client, bytes) of every message as its
    ledger counts them: the encoded size (for a compressed transport, the compressed size)."""

    def __init__(self, inner):
        self.inner, self.ledger, self.sizes = inner, inner.ledger, []

    def _move(self, direction: str, msg):
        before = self.ledger.total
        out = getattr(self.inner, direction)(msg)
        self.sizes.append((direction, msg.client, self.ledger.total - before))
        return out

    def up(self, msg):
        return self._move("up", msg)

    def down(self, msg):
        return self._move("down", msg)


def simulate(config: dict) -> tuple[OnlineVFL, list, dict]:
    """The in-process simulator: the engine, every message's (direction, client, bytes), its summary."""
    engine = OnlineVFL(config)
    engine.transport = recorder = RecordingTransport(engine.transport)
    return engine, recorder.sizes, engine.run()


def assert_same_as_simulator(engine: OnlineVFL, models: dict[str, list[np.ndarray]]) -> None:
    """The deployment's models are the simulator's, bitwise (tolerance 0)."""
    assert_same_models(models, {"server": engine.server.model.parameters()} | {
        f"client{m}": c.model.parameters() for m, c in enumerate(engine.clients)})


# -- the deployment's code over an in-process link -----------------------------------------------
def link_for(config: dict, cls=LoopbackLink, **kwargs) -> LoopbackLink:
    """A loopback link (``cls``) whose nodes read their block of ``config``'s stream."""
    rows = [BlockRows(config, m) for m in range(config["vfl.clients"])]
    return cls(lambda cfg, m: rows[m], config["vfl.clients"], **kwargs)


def loopback_run(
    config: dict, link_cls=LoopbackLink, *, persist: bool = True, record_sizes: bool = True, **kwargs
) -> tuple[NetworkVFL, list[dict]]:
    """The deployment's code over an in-process link (``link_cls``, with ``kwargs``); with ``persist``
    every client is rebuilt from its saved state for every request, as on a SuperNode. The server
    reads the labels only. Returns the server and the nodes' final reports (with their models)."""
    link = link_for(config, link_cls, persist=persist, **kwargs)
    net = NetworkVFL(config, link, stream=server_stream(config), record_sizes=record_sizes)
    net.run()
    return net, net.finish(models=True)


def party_models(net: NetworkVFL, reports: list[dict]) -> dict[str, list[np.ndarray]]:
    """Every party's model after a deployed run: the server's and each reporting node's."""
    return {"server": net.server.model.parameters()} | {f"client{r['client']}": r["params"] for r in reports}


def load_models(path: Path) -> dict[str, list[np.ndarray]]:
    """A deployment's ``models.npz`` (``party.index`` keys) as {party: [arrays in order]}."""
    with np.load(path) as z:
        out: dict[str, list] = {}
        for key in sorted(z.files, key=lambda k: (k.split(".")[0], int(k.split(".")[1]))):
            out.setdefault(key.split(".")[0], []).append(z[key])
    return out


class CrashAtRound30(CrashOnce):
    """Client 1's node crashes when the request for round 30 arrives; at the next batch it is back."""

    def crashes_on(self, env):
        return env.kind == ROUND and env.round == 30
