"""Predictions of a finished online VFL run, by the parties that trained it.

The run's final state is its ``checkpoint.npz`` (written at the last round), restored into the
engine's own parties (:class:`fedstream.ovfl.engine.OnlineVFL` and its ``load``). Then, as in a
deployment, where a prediction needs every party:

* client m embeds its own columns (its block of the rows, encoded and standardised with the run's
  categories and statistics by the source's ``standardise``) and sends the embeddings up;
* the server, which holds the top model, turns them into class probabilities.

No label is needed, nothing is learnt and no gradient goes down
(:func:`fedstream.ovfl.inference.predict_proba`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedstream.errors import ConfigError
from fedstream.ovfl.engine import OnlineVFL
from fedstream.ovfl.inference import predict_proba
from fedstream.ovfl.task import CHECKPOINT
from fedstream.predict.files import Predictions, Rows, class_names, run_summary
from fedstream.predict.ids import source_block
from fedstream.runs.checkpoint import load_checkpoint
from fedstream.transport import InProcessTransport

BATCH = 1024  # rows per message


def load_final(run_dir: Path) -> OnlineVFL:
    """The engine of the finished run in ``run_dir``, its parties restored from the final checkpoint."""
    run_summary(run_dir)
    path = Path(run_dir) / CHECKPOINT
    _, meta = load_checkpoint(path)
    run = OnlineVFL(meta["config"])
    run.load(path)
    return run


def predict_ovfl(run_dir: Path, rows: Rows, *, client: int | None = None) -> Predictions:
    """Class probabilities for ``rows`` (ids, raw rows) from the final parties of ``run_dir``."""
    if client is not None:
        raise ConfigError("--client: an online VFL prediction needs every client (each embeds its own "
                          "columns); leave it out")
    run = load_final(run_dir)
    ids = rows.ids
    transport = InProcessTransport(len(run.clients))
    if rows.raw is None:  # --ids: each client's own file, by id (fedstream.predict.ids)
        blocks = [source_block(run.stream.source, run.config, m, ids) for m in range(len(run.clients))]
        X = np.concatenate([b.X for b in blocks], axis=1)
        held = [int(b.held.sum()) for b in blocks]
        where = [slice(s.start, s.stop) for s in run.stream.source.blocks]
    else:
        X = run.stream.source.standardise(rows.raw)  # the run's own encoding (one-hot) and statistics
        held, where = None, run.blocks
    proba = np.concatenate([
        predict_proba(run.server, run.clients, [X[i:i + BATCH, b] for b in where], transport, run.t)
        for i in range(0, len(X), BATCH)
    ]) if len(X) else np.zeros((0, run.server.model.n_out))
    parties = {f"client {m}": f"columns {b.start}-{b.stop - 1}: standardised, embedded, "
               f"{transport.ledger.up[m]:,} B up" for m, b in enumerate(where)}
    for m in range(len(held or ())):
        parties[f"client {m}"] += f", holds {held[m]:,} of {len(ids):,} ids (others padded)"
    parties["server"] = "stacked the embeddings, top model, softmax (labels never used)"
    return Predictions(ids, class_names(run_summary(run_dir), proba.shape[1]), proba, parties)
