"""The server party of a deployed CHFL run (batch mode): the simulator's round loop over remote clients.

:class:`NetworkCHFL` sets the nodes up (:class:`~fedstream.deploy.chfl_proxy.RemoteCohort`),
learns from them the width of the common column (the server holds no data: no labels, no
features, not even the file), draws the initial global column as the simulator does and runs
:class:`fedstream.hfl.trainer.BatchRun`, the simulator's loop: per learning rate, T FedAvg
rounds. The result has the simulator's keys (``test_acc``, ``variants`` with every client's
choice, ``bytes``, ...) plus what the network adds (``faults``, ``exchanges``, the nodes' own
byte counts in ``clients``). Without faults it equals the simulator's result (timings aside).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable

import numpy as np

from fedstream.deploy.chfl_data import chfl_config_settings
from fedstream.deploy.chfl_proxy import RemoteCohort
from fedstream.deploy.link import Link
from fedstream.deploy.parties import check_deployable
from fedstream.hfl.splits import FeatureSplit
from fedstream.hfl.trainer import BatchRun, Plan, result_of, variants_of


class NetworkCHFL:
    """The server's side of one deployed CHFL run; ``link`` reaches client nodes 0..K-1."""

    def __init__(self, config: dict, link: Link, *, progress: Callable[[dict], None] | None = None):
        check_deployable(config)
        self.config, self.progress = config, progress
        self.settings = chfl_config_settings(config)
        self.method, self.seed = config["hfl.method"], config["seed"]
        self.cohort = RemoteCohort(link, config, run_token=secrets.token_hex(8))
        self.batch: BatchRun | None = None

    def run(self) -> dict:
        """Set up, play every federation, collect the nodes' test scores; return the result."""
        t0 = time.perf_counter()
        shape = self.cohort.setup()
        plan = Plan(self.settings, self.method, self.seed, shape["n_common"], shape["n_classes"])
        self.batch = BatchRun(plan, self.cohort, progress=self.progress)
        self.batch.run()
        variants = self.batch.test_choices(variants_of(self.method, self.settings))
        features = FeatureSplit(np.array(shape["common"]), tuple(np.array(u) for u in shape["unique"]))
        return result_of(self.batch, variants, n_rows=shape["n_rows"], features=features) | {
            "wall_seconds": time.perf_counter() - t0, "resumed": False,
            "exchanges": self.cohort.exchanges, "faults": self.cohort.faults, "clients": self.cohort.reports}

    def global_common(self) -> dict[str, np.ndarray]:
        """The final global common column θ_c^T of the last federation (empty for Local)."""
        server = self.batch.server if self.batch is not None else None
        return dict(server.state) if server is not None else {}
