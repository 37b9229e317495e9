"""The server party of a deployed CHFL run: the simulator's own loop over remote clients.

The server holds no data: it learns the run's sizes from the nodes, draws the initial global
column as the simulator does and runs :class:`fedstream.chfl.rounds.BatchRun` (:class:`NetworkCHFL`)
or :class:`fedstream.chfl.stream.StreamRun` (:class:`NetworkStream`) over the remote cohort
(:mod:`fedstream.chfl.deploy.proxy`). :class:`CHFLServer` is what both share: the checkpoint and
what :func:`fedstream.deploy.serve.serve` calls. Without faults the result is the simulator's.
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
from fedstream.chfl.deploy.proxy import RemoteClients, RemoteCohort, RemoteStreamCohort
from fedstream.chfl.plan import Plan
from fedstream.chfl.rounds import BatchRun
from fedstream.chfl.splits import FeatureSplit
from fedstream.chfl.stream import METRIC_COLUMNS as STREAM_COLUMNS
from fedstream.chfl.stream import StreamRun, draw_parties, stream_identity, stream_result
from fedstream.chfl.trainer import METRIC_COLUMNS, identity, result_of, variants_of
from fedstream.deploy.adapters import check_deployable
from fedstream.deploy.records import Link
from fedstream.errors import ConfigError


class CHFLServer:
    """The server's side of a deployed CHFL run over ``cohort`` (batch or stream): the checkpoint it
    resumes from (:meth:`load`) and where it saves (:meth:`folder`)."""

    def __init__(self, config: dict, cohort: RemoteClients):
        self.config, self.cohort, self.settings = config, cohort, cohort.settings
        self.method, self.seed = config["chfl.method"], config["seed"]
        self.loop = None  # the simulator's loop (BatchRun, StreamRun) once run
        self.saved: dict | None = None  # the checkpoint load() read
        self.loaded: Path | None = None

    def identity(self, n_rows: int | None, n_classes: int | None) -> dict:
        """Which run a checkpoint is of (the simulator's identity; the kind tells them apart)."""
        return identity(self.settings, self.method, self.seed, n_rows, n_classes)

    def load(self, path: Path) -> None:
        """Resume from the checkpoint ``run(checkpoint=path)`` wrote: refuse another run's (naming the
        config keys that differ) and the simulator's (its ``kind``), take its run token; :meth:`run`
        then sets the nodes up with ``resume`` and goes on from there."""
        path = Path(path)
        saved = read_checkpoint(path, kind=DEPLOYED)
        ident = saved["identity"]
        # the data's sizes come from the nodes' setup: compared when the run restores
        check_identity(path, ident, self.identity(ident.get("n_rows"), ident.get("n_classes")))
        self.saved, self.loaded = saved["state"], path
        self.cohort.run_token = self.saved["network"]["run"]

    def folder(self, checkpoint: Path | None, n_rows: int, n_classes: int, columns: list[str]
               ) -> RunFolder | None:
        """Where the run saves (``checkpoint``; default: where :meth:`load` read it), None: nowhere."""
        path = Path(checkpoint) if checkpoint is not None else self.loaded
        if self.loaded is not None and path.resolve() != self.loaded.resolve():
            raise ConfigError(f"checkpoint {path}: a resumed run goes on saving where it was loaded from "
                              f"({self.loaded})")
        return None if path is None else RunFolder(
            path.parent, self.identity(n_rows, n_classes), columns, resume=self.loaded is not None,
            name=path.name, kind=DEPLOYED)

    def network(self) -> dict:
        """What the network adds to the result."""
        resumed = {"resumed": self.loaded is not None}
        return resumed | self.cohort.record() | {"carried_over": self.loop.carried}

    # -- as deploy.serve runs it ------------------------------------------------------------------
    def play(self, checkpoint: Path | None, *, audit: bool) -> dict:
        return self.run(checkpoint=checkpoint)

    def audit(self) -> dict:
        """The final global common column (``models``)."""
        return {"models": {f"global.{k}": v for k, v in self.global_common().items()}}

    def global_common(self) -> dict[str, np.ndarray]:
        """The final global common column (empty for Local, and for a batch run resumed after its last
        federation: the column is not kept past the federation's end)."""
        server = self.loop.server if self.loop is not None else None
        return dict(server.state) if server is not None else {}


class NetworkCHFL(CHFLServer):
    """The server's side of one deployed CHFL run; ``link`` reaches client nodes 0..K-1."""

    def __init__(self, config: dict, link: Link, *, progress: Callable[[dict], None] | None = None):
        check_deployable(config)
        super().__init__(config, RemoteCohort(link, config))
        self.progress = progress
        self.position: tuple[int, int] = (0, 0)  # (federation, next round) the run starts at

    def load(self, path: Path) -> None:
        super().load(path)
        self.position = (int(self.saved["lr_index"]), int(self.saved["round"]))

    def run(self, checkpoint: Path | None = None) -> dict:
        """Set up, play every (remaining) federation, collect the nodes' test scores; return the result.

        ``checkpoint``: save the server's state there (default: where :meth:`load` read it).
        """
        t0 = time.perf_counter()
        shape = self.cohort.setup(resume=self.position if self.loaded is not None else None)
        plan = Plan(self.settings, self.method, self.seed, shape["n_common"], shape["n_classes"])
        folder = self.folder(checkpoint, shape["n_rows"], shape["n_classes"], METRIC_COLUMNS)
        self.cohort.keep = folder is not None
        self.loop = batch = BatchRun(plan, self.cohort, folder, progress=self.progress)
        if (batch.lr_index, batch.round) != self.position:
            raise CheckpointError(
                f"{folder.checkpoint}: changed since it was loaded (at federation {batch.lr_index}, "
                f"round {batch.round}, not {self.position})"
            )
        batch.run()
        variants = batch.test_choices(variants_of(self.method, self.settings))
        features = FeatureSplit(np.array(shape["common"]), tuple(np.array(u) for u in shape["unique"]))
        return result_of(batch, variants, n_rows=shape["n_rows"], features=features) | {
            "wall_seconds": batch.elapsed + time.perf_counter() - t0} | self.network()

    def where(self) -> str:
        lr_index, rnd = self.position
        if lr_index < len(self.settings.lrs):
            return f"at federation {lr_index} (lr {self.settings.lrs[lr_index]:g}), round {rnd}"
        return "at the end of the last federation"


class NetworkStream(CHFLServer):
    """The server's side of one deployed streaming CHFL run; ``link`` reaches nodes 0..K-1."""

    def __init__(self, link: Link, config: dict):
        super().__init__(config, RemoteStreamCohort(link, config))

    def identity(self, n_rows: int | None, n_classes: int | None) -> dict:
        return stream_identity(self.settings, self.method, self.seed, n_rows, n_classes)

    def run(self, checkpoint: Path | None = None) -> dict:
        """Set up, play every (remaining) segment, collect the nodes' byte counts; return the result.
        ``checkpoint``: save the server's state there (default: where :meth:`load` read it)."""
        t0 = time.perf_counter()
        s, cohort = self.settings, self.cohort
        first, layout = cohort.setup(resume=int(self.saved["tick"]) if self.saved is not None else None)
        folder = self.folder(checkpoint, first["n_rows"], first["n_classes"], STREAM_COLUMNS)
        initial, _ = draw_parties(layout, s, self.method, self.seed, first["n_classes"], 0)
        self.loop = run = StreamRun(s, layout, first["n_classes"], initial, cohort, folder)
        if self.saved is not None and run.resumed is None:
            raise CheckpointError(f"{folder.checkpoint}: gone since it was loaded")
        run.run()
        played = {"wall_seconds": run.elapsed + time.perf_counter() - t0, "missed_ticks": run.missed()}
        return stream_result(run, self.method, self.seed) | played | self.network()

    def where(self) -> str:
        return f"at tick {self.saved['tick']}"
