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
    X = run.stream.source.standardise(rows.raw)  # the run's own encoding (one-hot) and statistics
    transport = InProcessTransport(len(run.clients))
    proba = np.concatenate([
        predict_proba(run.server, run.clients, [X[i:i + BATCH, b] for b in run.blocks], transport, run.t)
        for i in range(0, len(X), BATCH)
    ]) if len(X) else np.zeros((0, run.server.model.n_out))
    parties = {f"client {m}": f"columns {b.start}-{b.stop - 1}: standardised, embedded, "
               f"{transport.ledger.up[m]:,} B up" for m, b in enumerate(run.blocks)}
    parties["server"] = "stacked the embeddings, top model, softmax (labels never used)"
    return Predictions(ids, class_names(run_summary(run_dir), proba.shape[1]), proba, parties)
