"""The server party of a deployed batch VFL run: :class:`NetworkBatchVFL` holds the labels and the
top model and runs the simulator's epoch loop (:func:`fedstream.vfl.trainer.play_epochs`) over the
remote clients (:class:`~fedstream.vfl.deploy.proxy.RemoteCohort`). Participant selection is
planned here; VF-PS asks the nodes for distances (:mod:`fedstream.vfl.deploy.vfps`). The summary,
the server's checkpoint and resume: docs/deploy-protocol.md, "Batch VFL".
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from fedstream.data.table_party import check_held_categorical
from fedstream.deploy.adapters import check_deployable
from fedstream.deploy.records import Link
from fedstream.errors import ConfigError
from fedstream.runs.threads import one_torch_thread
from fedstream.selection.padding import make_padding
from fedstream.vfl import checkpoint
from fedstream.vfl.checkpoint import NAME, to_arrays, to_tensors
from fedstream.vfl.deploy.data import ServerLabels, batch_settings, layout
from fedstream.vfl.deploy.proxy import RemoteCohort
from fedstream.vfl.deploy.records import EVALUATION, boundary_of
from fedstream.vfl.deploy.table import load_table_labels, table_layout
from fedstream.vfl.deploy.vfps import check_size
from fedstream.vfl.selection import Participation
from fedstream.vfl.trainer import (
    MetricsWriter,
    build_parties,
    play_epochs,
    run_summary,
    selection_columns,
)

KIND = "deployed-server"  # what the checkpoint of a deployed run's server says it is


class NetworkBatchVFL:
    """The server's side of one deployed batch VFL run; ``link`` reaches client nodes 0..M-1."""

    def __init__(self, config: dict, link: Link, *, labels: ServerLabels, out: Path | None = None,
                 progress: Callable[[dict], None] | None = None):
        check_deployable(config)
        self.settings = s = batch_settings(config)
        if s.own_draws and labels.alignment is None:  # one file per party: align the ids first (PSI)
            labels = load_table_labels(config, link)
        self.config, self.labels, self.out, self.progress = config, labels, out, progress
        self.seed = config["seed"]
        # the top model (the client models are the nodes'); one file per party: drawn alone
        self.shapes = table_layout(s.clients, labels.n_classes, {}) if s.own_draws else layout(s)
        self.server = build_parties(s, self.shapes, self.seed)[1]
        if self.server.padding is None:  # stands in for a node that is down (never used without a fault)
            self.server.padding = make_padding("zero", s.clients, s.embedding)
        if s.selection.method == "vfps":  # each node's distance message must fit a Flower message
            check_size(s.selection, len(labels.train_y))
        self.cohort = RemoteCohort(link, config, s)
        self.part = None
        if s.selection.active:  # server-side selection: placeholder blocks (fixed, random read only how many)
            blocks = [np.zeros((len(labels.train_y), 1), np.uint8)] * s.clients
            # VF-PS: the nodes' distances
            vfps = (self.cohort.distances if s.selection.method == "vfps" else None)
            self.part = Participation(s.selection, blocks, labels.train_y, seed=self.seed, distances=vfps)
        self.rows: list[dict] = []  # the epochs done (a resumed run: those of the checkpoint)
        self.step = self.done = 0  # steps and epochs done
        self.seconds = 0.0  # spent before a resume
        self.resumed = False
        self.summary: dict | None = None

    def run(self, *, models: bool = False, checkpoint: Path | None = None) -> dict:
        """Set up the nodes (a resumed run: each back at its state of the checkpoint's epoch), play the
        remaining epochs, collect the nodes' counts (``models``: and their models); the summary.
        ``checkpoint`` (default ``out/checkpoint.pt`` with ``out``): written at every epoch end."""
        s, c = self.settings, self.cohort
        path = self.out / NAME if checkpoint is None and self.out is not None else checkpoint
        c.keeping = path is not None
        tic = time.perf_counter() - self.seconds
        rows = {"n_train": len(self.labels.train_y), "n_test": len(self.labels.test_y)}
        if s.own_draws:  # each node's own width; its file's ids must be the server's, in its order
            expected = {m: rows | {"ids": self.labels.ids} for m in range(s.clients)}
        else:
            shapes = self.shapes.strip_shapes()
            expected = {m: {"shape": list(shapes[m])} | rows for m in range(s.clients)}
        c.setup(expected, resume=boundary(self.done) if self.resumed else None)
        if s.own_draws:  # every node's columns of data.categorical: the simulator's check
            check_held_categorical(dict(s.table), [c.nodes[m].get("categorical") for m in range(s.clients)])
        writer = MetricsWriter(
            self.out, selection_columns(s.clients) if self.part is not None else [], self.rows
        )
        c.epoch = self.done + 1  # play_epochs's next epoch: the one its evaluation's boundary is of

        def after_epoch(epoch: int, step: int, rows: list[dict]) -> None:
            self.rows, self.step, self.done = list(rows), step, epoch
            c.epoch = epoch + 1
            if path is not None:
                self.save(path, seconds=time.perf_counter() - tic)

        with one_torch_thread():  # as run_batch_vfl
            rows = play_epochs(s, self.labels, c, self.server, self.seed, self.progress, part=self.part,
                               writer=writer, tic=tic, rows=self.rows, step=self.step, done=self.done,
                               after_epoch=after_epoch)
        steps = sum(r["steps"] for r in rows)
        c.finish(steps, models=models)
        self.summary = run_summary(
            s, self.seed, rows, c.ledger.summary(), time.perf_counter() - tic, self.part
        ) | {"deployed": True} | c.record() | {
            "missed_steps": c.missed,
            "selection_bytes": {
                "per_client": c.selection_bytes,
                "total": sum(b["up"] + b["down"] for b in c.selection_bytes),
            },
        } | ({} if self.labels.classes is None else {"classes": self.labels.classes})  # a table's labels
        if self.labels.alignment is not None:  # PSI, apart from the training's bytes
            self.summary["alignment"] = self.labels.alignment.summary() | {
                "intersection": int(self.labels.alignment.kept.size)}
        writer.summary(self.summary)
        return self.summary

    # -- as deploy.serve runs it ------------------------------------------------------------------
    def where(self) -> str:
        return f"after epoch {self.done}"

    def play(self, checkpoint: Path | None, *, audit: bool) -> dict:
        return self.run(models=audit, checkpoint=checkpoint)

    def audit(self) -> dict:
        """Every party's final model (``models``)."""
        arrays = {f"server.{k}": v.detach().numpy() for k, v in self.server.model.state_dict().items()}
        for m, state in self.cohort.models.items():
            arrays |= {f"client{m}.{k}": v for k, v in state.items()}
        return {"models": arrays}

    # -- checkpoints -------------------------------------------------------------------------------
    def _config(self) -> dict:
        """What a checkpoint must have been written with (as the simulator's: settings and seed)."""
        return self.settings.to_config() | {"seed": self.seed}

    def save(self, path: Path, *, seconds: float = 0.0) -> None:
        """Write the server's state at the end of epoch ``self.done`` to ``path`` atomically, in the
        simulator's checkpoint format (:mod:`fedstream.vfl.checkpoint`) with the cohort's state
        (:meth:`RemoteCohort.state_dict`) in place of the clients."""
        cohort, cohort_arrays = self.cohort.state_dict()
        state = checkpoint.RunState(self.done, self.step, self.rows, seconds)
        payload = {
            **checkpoint.header(self._config(), state, kind=KIND),
            **checkpoint.server_payload(self.server),
            "cohort": json.dumps(cohort), "cohort_arrays": to_tensors(cohort_arrays),
            **checkpoint.selection_payload(self.part),
            "torch_rng": torch.get_rng_state(),
        }
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        checkpoint.write(path, payload)

    def load(self, path: Path) -> None:
        """Continue from :meth:`save`'s checkpoint: the same settings (``train.epochs`` may grow,
        ConfigError naming the keys otherwise); :meth:`run` then sets the nodes up with ``resume``."""
        path = Path(path)
        payload = checkpoint.read(path, config=self._config(), kind=KIND)
        try:
            checkpoint.load_server(payload, self.server)
            self.cohort.load_state_dict(json.loads(payload["cohort"]), to_arrays(payload["cohort_arrays"]))
        except (KeyError, ValueError, RuntimeError) as exc:
            raise ConfigError(
                f"{path}: checkpoint is damaged or does not fit this configuration ({exc})"
            ) from None
        checkpoint.load_selection(path, payload, self.part, stored=True)
        torch.set_rng_state(payload["torch_rng"])
        state = checkpoint.run_state(payload)
        self.done, self.step, self.rows, self.seconds = state.epoch, state.step, state.rows, state.seconds
        self.resumed = True


def boundary(epoch: int) -> int:
    """The nodes' boundary at the end of ``epoch``, where a resumed server sets them back to."""
    return boundary_of(epoch, EVALUATION)
