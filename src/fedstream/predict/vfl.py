"""Predictions of a finished batch VFL run, by the parties that trained it.

A batch VFL run keeps its last epoch's ``checkpoint.pt``; it is restored into the trainer's own
parties (:func:`fedstream.vfl.trainer.build_parties`, :func:`fedstream.vfl.checkpoint.load`).
Then each client standardises and embeds its own strip of each image (or its own columns of a
table) and sends it up, and the server scores the embeddings
(:func:`fedstream.vfl.estimator.parties_proba`, the evaluation's path). The rows are new samples
to the links (ids past the run's training and test rows): with ``compression.cache`` or
``compression.feedback`` each starts from an empty cache row and a zero residual, as a test row did
at the run's first evaluation (later evaluations fill its unsent entries from the previous one).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedstream.data import resolve_data_root
from fedstream.errors import ConfigError
from fedstream.predict.files import Predictions, Rows, class_names, run_summary
from fedstream.predict.ids import refuse_absent, source_block
from fedstream.runs.batch import CHECKPOINT
from fedstream.transport import make_transport
from fedstream.vfl import checkpoint
from fedstream.vfl.data import load_vertical
from fedstream.vfl.estimator import parties_proba
from fedstream.vfl.settings import BatchVFLSettings
from fedstream.vfl.trainer import build_parties


def predict_vfl(run_dir: Path, rows: Rows, *, client: int | None = None) -> Predictions:
    """Class probabilities for ``rows`` (ids, raw rows: images' pixel values 0-255, (n, C, H, W) or
    flattened; a table's columns by name) from the final parties of the batch VFL run in ``run_dir``."""
    if client is not None:
        raise ConfigError("--client: a batch VFL prediction needs every client (each embeds its own "
                          "columns); leave it out")
    ids = rows.ids
    config = run_summary(run_dir)["config"]
    settings = BatchVFLSettings.from_config(config).resolved()
    data = load_vertical(settings, resolve_data_root(config["data.root"]))
    held = None
    if rows.raw is None:  # --ids: each client's own file, by id; every party must hold every id
        blocks = [source_block(data.source, config, m, ids) for m in range(settings.clients)]
        for block in blocks:
            refuse_absent(block, ids, f"{run_dir}")
        images = np.concatenate([b.X for b in blocks], axis=1)
        held = True
    else:
        images = data.encode(rows.raw)  # the data set's own encoding and statistics
    clients, server = build_parties(settings, data, config["seed"])
    transport = make_transport(settings.clients, settings.compression)
    checkpoint.load(Path(run_dir) / CHECKPOINT, config=settings.to_config() | {"seed": config["seed"]},
                    clients=clients, server=server, transport=transport)
    proba, ledger = parties_proba(settings, lambda b: data.client_inputs(images[b.rows]), len(images),
                                  clients, server, transport,
                                  first_id=len(data.train_y) + len(data.test_y))
    proba = np.zeros((0, data.n_classes)) if proba is None else proba
    up = ledger["per_client"]
    what = "columns" if settings.dataset == "table" else "strip"
    parties = {f"client {m}": f"{what} {s.start}-{s.stop - 1}: standardised, embedded, {up[m]['up']:,} B up"
               for m, s in enumerate(data.strips)}
    if held:
        parties = {k: v + ", its own file's rows of the ids" for k, v in parties.items()}
    parties["server"] = "top model on the embeddings, softmax (labels never used)"
    return Predictions(ids, class_names(run_summary(run_dir), proba.shape[1]), proba, parties)
