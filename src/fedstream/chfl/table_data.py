"""Batch CHFL on a user's own table (``data.name = "table"``, one file).

The table is read as the VFL tasks read it (:mod:`fedstream.data.table_source`: ``data.path``,
``data.label``, ``data.id`` (not a feature), ``data.categorical``), every column standardised by
all rows. Then the paper's splits apply: ``chfl.common_ratio`` of the columns, drawn by
``chfl.split``, are common to every client, the rest dealt out as unique columns, and the rows are
dealt to the clients (60 / 20 / 20 % train / validation / test; :mod:`fedstream.chfl.splits`).
"""

from __future__ import annotations

import numpy as np

from fedstream.chfl.settings import CHFLSettings
from fedstream.chfl.trainer import run_on_table
from fedstream.data.table_source import TableSource, TableSpec

ALL_ROWS = 2**62  # statistics over every row


def run_table(settings: CHFLSettings, config: dict, *, method: str, seed: int, progress, run_dir,
              resume: bool) -> dict:
    """:func:`~fedstream.chfl.trainer.run_on_table` on the table of ``config``; the result also
    names the file (``data``), the label value of each class (``classes``) and the feature columns
    (``columns``: the column indices of ``features`` refer to these)."""
    spec = TableSpec(config["data.path"], config["data.label"], config["data.id"], config["data.categorical"],
                     None, n_clients=1, stats_rows=ALL_ROWS)
    source = TableSource(spec)
    rows = np.arange(source.n_base)
    out = run_on_table(source.features(rows), source.labels(rows), settings, method=method, seed=seed,
                       progress=progress, n_classes=source.n_classes, run_dir=run_dir, resume=resume)
    return out | {"data": {"name": "table", "path": config["data.path"], "status": "complete"},
                  "classes": list(source.classes), "columns": feature_names(source)}


def feature_names(source: TableSource) -> list[str]:
    """The name of each feature column (a categorical column: ``name=category`` per one-hot column)."""
    names = []
    for column in source.client_columns[0]:
        cats = source.categories.get(column)
        names += [column] if cats is None else [f"{column}={c}" for c in cats]
    return names
