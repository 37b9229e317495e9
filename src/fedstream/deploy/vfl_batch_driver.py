"""The server party of a deployed batch VFL run: the simulator's epoch loop over remote clients.

:class:`NetworkBatchVFL` holds the labels (nothing else of the data) and the top model, sets the
nodes up (:class:`~fedstream.deploy.vfl_batch_proxy.RemoteCohort`) and runs
:func:`fedstream.vfl.batch.trainer.play_epochs`, the simulator's loop: per epoch the (seed,
epoch)-ordered mini-batches, one training step per batch, then the test accuracy. The summary has
the simulator's keys (``per_epoch``, ``final_accuracy``, ``bytes``, ...) plus what the network adds
(``faults``, ``exchanges``, the nodes' own byte counts in ``clients``). Without faults it equals the
simulator's summary (timings aside) and the nodes end with the simulator's models.

Participant selection runs on the server (``selection.method`` ``all``, ``fixed`` or ``random``, any
``selection.dynamic``): it needs no client data. ``vfps`` (with ``selection.dynamic = none``) asks
every node for the local squared distances of its strip from the query samples to every training
row (:mod:`fedstream.deploy.vfl_batch_vfps`) and scores the groups from those, as the VF-PS paper's
protocol does; the summary's ``selection_bytes`` counts those messages per client and direction,
apart from the training ``bytes``. Resuming is refused (no checkpoints of a deployed batch VFL run yet).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from fedstream.deploy.link import Link
from fedstream.deploy.parties import check_deployable
from fedstream.deploy.vfl_batch_data import (
    ServerLabels,
    batch_settings,
    build_party,
    layout,
)
from fedstream.deploy.vfl_batch_proxy import RemoteCohort
from fedstream.deploy.vfl_batch_vfps import check_size
from fedstream.runtime.threads import one_torch_thread
from fedstream.selection.padding import make_padding
from fedstream.vfl.batch.selection import Participation
from fedstream.vfl.batch.trainer import (
    MetricsWriter,
    play_epochs,
    run_summary,
    selection_columns,
)


class NetworkBatchVFL:
    """The server's side of one deployed batch VFL run; ``link`` reaches client nodes 0..M-1."""

    def __init__(self, config: dict, link: Link, *, labels: ServerLabels, out: Path | None = None,
                 progress: Callable[[dict], None] | None = None):
        check_deployable(config)
        self.config, self.labels, self.out, self.progress = config, labels, out, progress
        self.settings = s = batch_settings(config)
        self.seed = config["seed"]
        self.server = build_party(s, self.seed)[1]  # the top model; the client models are the nodes'
        if self.server.padding is None:  # stands in for a node that is down (never used without a fault)
            self.server.padding = make_padding("zero", s.clients, s.embedding)
        if s.selection.method == "vfps":  # each node's distance message must fit a Flower message
            check_size(s.selection, len(labels.train_y))
        self.cohort = RemoteCohort(link, config, s, run_token=secrets.token_hex(8))
        self.summary: dict | None = None

    def run(self, *, models: bool = False) -> dict:
        """Set up, play every epoch, collect the nodes' counts (``models``: and their models); the summary."""

        s = self.settings
        tic = time.perf_counter()
        shapes = layout(s).shapes
        self.cohort.setup({m: {"shape": list(shapes[m]), "n_train": len(self.labels.train_y),
                               "n_test": len(self.labels.test_y)} for m in range(s.clients)})
        part = None
        if s.selection.active:  # server-side selection: placeholder blocks (fixed and random read only how many)
            blocks = [np.zeros((len(self.labels.train_y), 1), np.uint8)] * s.clients
            vfps = self.cohort.distances if s.selection.method == "vfps" else None  # VF-PS: the nodes' distances
            part = Participation(s.selection, blocks, self.labels.train_y, seed=self.seed, distances=vfps)
        writer = MetricsWriter(self.out, selection_columns(s.clients) if part is not None else [])
        with one_torch_thread():  # as run_batch_vfl
            rows = play_epochs(s, self.labels, self.cohort, self.server, self.seed, self.progress, part=part,
                               writer=writer, tic=tic)
        steps = sum(r["steps"] for r in rows)
        self.cohort.finish(steps, models=models)
        c = self.cohort
        self.summary = run_summary(s, self.seed, rows, c.ledger.summary(), time.perf_counter() - tic, part) | {
            "deployed": True, "exchanges": c.exchanges, "faults": c.faults, "clients": c.reports,
            "selection_bytes": {"per_client": c.selection_bytes,
                                "total": sum(b["up"] + b["down"] for b in c.selection_bytes)}}
        writer.summary(self.summary)
        return self.summary
