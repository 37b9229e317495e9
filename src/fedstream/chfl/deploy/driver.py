"""The server party of a deployed CHFL run (batch mode): the simulator's round loop over remote clients.

:class:`NetworkCHFL` sets the nodes up (:class:`~fedstream.chfl.deploy.proxy.RemoteCohort`),
learns from them the width of the common column (the server holds no data: no labels, no
features, not even the file), draws the initial global column as the simulator does and runs
:class:`fedstream.chfl.trainer.BatchRun`, the simulator's loop: per learning rate, T FedAvg
rounds. The result has the simulator's keys (``test_acc``, ``variants`` with every client's
choice, ``bytes``, ...) plus what the network adds (``faults``, ``exchanges``, the nodes' own
byte counts in ``clients``). Without faults it equals the simulator's result (timings aside).

Faults: a node that fails a round is left out of it (:mod:`fedstream.chfl.deploy.proxy`; a round
that every node failed keeps the global column: ``carried_over`` lists its federation and round); one that
comes back on a new SuperNode is set up again from its own checkpoint (``rejoins``). With
``run(checkpoint=PATH)`` the server checkpoints as the simulator does, after every FedAvg round
and at every federation's end (:class:`~fedstream.chfl.trainer.BatchRun` with a
:class:`~fedstream.chfl.checkpoint.RunFolder`: ``PATH`` and ``metrics.csv`` beside it; the archive
says ``kind = "deployed-server"``, so that neither this server nor the simulator resumes the
other's checkpoint): its
position, the global column, the validation rows, the byte ledger, and from the cohort the run's
token, faults, rejoins and requests sent. The round requests at those points tell each node to
keep its state there (``keep``, ``boundary``). :meth:`NetworkCHFL.load` resumes: the nodes are set
up with ``resume`` and go back to their state of the checkpoint's boundary, so the rest of the run
is the uninterrupted run's (same choices, accuracies and byte counts).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from fedstream.chfl.checkpoint import (
    DEPLOYED,
    CheckpointError,
    RunFolder,
    check_identity,
    read_checkpoint,
)
from fedstream.chfl.deploy.data import chfl_config_settings
from fedstream.chfl.deploy.proxy import RemoteCohort
from fedstream.chfl.plan import Plan
from fedstream.chfl.rounds import BatchRun
from fedstream.chfl.splits import FeatureSplit
from fedstream.chfl.trainer import METRIC_COLUMNS, identity, result_of, variants_of
from fedstream.deploy.adapters import check_deployable
from fedstream.deploy.records import Link
from fedstream.errors import ConfigError


class NetworkCHFL:
    """The server's side of one deployed CHFL run; ``link`` reaches client nodes 0..K-1."""

    def __init__(self, config: dict, link: Link, *, progress: Callable[[dict], None] | None = None):
        check_deployable(config)
        self.config, self.progress = config, progress
        self.settings = chfl_config_settings(config)
        self.method, self.seed = config["chfl.method"], config["seed"]
        self.cohort = RemoteCohort(link, config)
        self.batch: BatchRun | None = None
        self.loaded: Path | None = None  # the checkpoint load() read
        self.position: tuple[int, int] = (0, 0)  # (federation, next round) the run starts at

    def load(self, path: Path) -> None:
        """Resume from the checkpoint ``run(checkpoint=path)`` wrote: refuse another run's (naming the
        config keys that differ) and the simulator's (its ``kind``), take its run token and position;
        :meth:`run` then sets the nodes up with ``resume`` and restores the rest."""
        path = Path(path)
        saved = read_checkpoint(path, kind=DEPLOYED)
        ident = saved["identity"]
        # the data's sizes come from the nodes' setup: compared when the run restores (BatchRun)
        check_identity(path, ident, identity(self.settings, self.method, self.seed, ident.get("n_rows"),
                                             ident.get("n_classes")))
        state = saved["state"]
        self.cohort.run_token = state["network"]["run"]
        self.position = (int(state["lr_index"]), int(state["round"]))
        self.loaded = path

    def run(self, checkpoint: Path | None = None) -> dict:
        """Set up, play every (remaining) federation, collect the nodes' test scores; return the result.

        ``checkpoint``: save the server's state there (default: where :meth:`load` read it).
        """
        t0 = time.perf_counter()
        path = Path(checkpoint) if checkpoint is not None else self.loaded
        if self.loaded is not None and path.resolve() != self.loaded.resolve():
            raise ConfigError(f"checkpoint {path}: a resumed run goes on saving where it was loaded from "
                              f"({self.loaded})")
        shape = self.cohort.setup(resume=self.position if self.loaded is not None else None)
        plan = Plan(self.settings, self.method, self.seed, shape["n_common"], shape["n_classes"])
        folder = None if path is None else RunFolder(
            path.parent, identity(self.settings, self.method, self.seed, shape["n_rows"], shape["n_classes"]),
            METRIC_COLUMNS, resume=self.loaded is not None, name=path.name, kind=DEPLOYED)
        self.cohort.keep = folder is not None
        self.batch = BatchRun(plan, self.cohort, folder, progress=self.progress)
        if (self.batch.lr_index, self.batch.round) != self.position:
            raise CheckpointError(
                f"{path}: changed since it was loaded (at federation {self.batch.lr_index}, "
                f"round {self.batch.round}, not {self.position})"
            )
        self.batch.run()
        variants = self.batch.test_choices(variants_of(self.method, self.settings))
        features = FeatureSplit(np.array(shape["common"]), tuple(np.array(u) for u in shape["unique"]))
        return result_of(self.batch, variants, n_rows=shape["n_rows"], features=features) | {
            "wall_seconds": self.batch.elapsed + time.perf_counter() - t0, "resumed": self.loaded is not None,
            "exchanges": self.cohort.exchanges, "faults": self.cohort.faults, "rejoins": self.cohort.rejoins,
            "clients": self.cohort.reports, "carried_over": self.batch.carried}

    # -- as deploy.serve runs it ------------------------------------------------------------------
    def where(self) -> str:
        lr_index, rnd = self.position
        if lr_index < len(self.settings.lrs):
            return f"at federation {lr_index} (lr {self.settings.lrs[lr_index]:g}), round {rnd}"
        return "at the end of the last federation"

    def play(self, checkpoint: Path | None, *, audit: bool) -> dict:
        return self.run(checkpoint=checkpoint)

    def audit(self) -> dict:
        """The final global common column (``models``)."""
        return {"models": {f"global.{k}": v for k, v in self.global_common().items()}}

    def global_common(self) -> dict[str, np.ndarray]:
        """The final global common column θ_c^T of the last federation (empty for Local, and for a run
        resumed after its last federation: the column is not kept past the federation's end)."""
        server = self.batch.server if self.batch is not None else None
        return dict(server.state) if server is not None else {}
