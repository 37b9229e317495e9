"""Predictions of a finished online VFL run, by the parties that trained it.

The run's final state is its ``checkpoint.npz`` (written at the last round), restored into the
engine's own parties (:class:`fedstream.ovfl.engine.OnlineVFL` and its ``load``). Then, as in a
deployment, where a prediction needs every party:

* client m standardises and embeds its own columns (its contiguous feature block of ``X``, with the
  run's statistics) and sends the embeddings up;
* the server, which holds the top model, turns them into class probabilities.

No label is needed, nothing is learnt and no gradient goes down
(:func:`fedstream.ovfl.inference.predict_proba`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedstream.data.sources import MNIST_MEAN, MNIST_STD
from fedstream.errors import DataError
from fedstream.ovfl.engine import OnlineVFL
from fedstream.ovfl.inference import predict_proba
from fedstream.ovfl.task import CHECKPOINT
from fedstream.predict.files import Predictions, class_names, run_summary
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


def standardise(source, X: np.ndarray) -> np.ndarray:
    """The run's standardisation of raw rows: a tabular source's statistics of its first
    ``data.stats_rows`` rows, or the images' pixel constants (see :mod:`fedstream.data.sources`)."""
    if hasattr(source, "mean"):  # tabular: (x - mean) / std in float32, as TabularSource.features
        rows = np.array(X, dtype=np.float32)
        rows -= source.mean
        rows /= source.std
        return rows
    return ((np.asarray(X, np.float64) / 255.0 - MNIST_MEAN) / MNIST_STD).astype(np.float32)


def predict_ovfl(run_dir: Path, rows: tuple[np.ndarray, np.ndarray]) -> Predictions:
    """Class probabilities for ``rows`` = (ids, raw X) from the final parties of ``run_dir``."""
    ids, X = rows
    X = X.reshape(len(X), -1)  # images may come as (n, 28, 28)
    run = load_final(run_dir)
    n_features = run.stream.source.n_features
    if X.shape[1] != n_features:
        raise DataError(f"X has {X.shape[1]} features; the run's data ({run.config['data.name']}) has "
                        f"{n_features}")
    X = standardise(run.stream.source, X)
    transport = InProcessTransport(len(run.clients))
    proba = np.concatenate([
        predict_proba(run.server, run.clients, [X[i:i + BATCH, b] for b in run.blocks], transport, run.t)
        for i in range(0, len(X), BATCH)
    ]) if len(X) else np.zeros((0, run.server.model.n_out))
    parties = {f"client {m}": f"columns {b.start}-{b.stop - 1}: standardised, embedded, "
               f"{transport.ledger.up[m]:,} B up" for m, b in enumerate(run.blocks)}
    parties["server"] = "stacked the embeddings, top model, softmax (labels never used)"
    return Predictions(ids, class_names(run_summary(run_dir), proba.shape[1]), proba, parties)
