"""Predictions of a finished batch VFL run, by the parties that trained it.

A batch VFL run keeps its last epoch's ``checkpoint.pt``; it is restored into the trainer's own
parties (:func:`fedstream.vfl.trainer.build_parties`, :func:`fedstream.vfl.checkpoint.load`).
Then each client standardises and embeds its own strip of each image and sends it up, and the
server scores the embeddings (:func:`fedstream.vfl.protocol.play_scores`, the evaluation's path).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from fedstream.data import resolve_data_root
from fedstream.errors import ConfigError
from fedstream.predict.files import Predictions, Rows, class_names, run_summary
from fedstream.runs.batch import CHECKPOINT
from fedstream.transport import make_transport
from fedstream.vfl import checkpoint
from fedstream.vfl.data import load_vertical
from fedstream.vfl.protocol import Batch, LocalCohort, play_scores
from fedstream.vfl.settings import BatchVFLSettings
from fedstream.vfl.trainer import batches, build_parties, separate_ledger


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
    images = data.encode(rows.raw)  # the data set's own encoding and statistics
    clients, server = build_parties(settings, data, config["seed"])
    transport = make_transport(settings.clients, settings.compression)
    checkpoint.load(Path(run_dir) / CHECKPOINT, config=settings.to_config() | {"seed": config["seed"]},
                    clients=clients, server=server, transport=transport)
    cohort = LocalCohort(clients, transport, lambda b: data.client_inputs(images[b.rows]))
    plan = [Batch(j, "test", idx) for j, idx in enumerate(batches(len(images), settings.batch_size))]
    with separate_ledger(cohort) as ledger, torch.no_grad():
        logits = [s.detach() for s in play_scores(plan, cohort, server)]
    proba = (torch.softmax(torch.cat(logits), dim=1).double().numpy() if logits
             else np.zeros((0, data.n_classes)))
    up = ledger.summary()["per_client"]
    what = "columns" if settings.dataset == "table" else "strip"
    parties = {f"client {m}": f"{what} {s.start}-{s.stop - 1}: standardised, embedded, {up[m]['up']:,} B up"
               for m, s in enumerate(data.strips)}
    parties["server"] = "top model on the embeddings, softmax (labels never used)"
    return Predictions(ids, class_names(run_summary(run_dir), proba.shape[1]), proba, parties)
