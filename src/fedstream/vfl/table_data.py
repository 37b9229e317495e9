"""Batch VFL on a user's own table (``data.name = "table"``): train and test rows, each client's columns.

The table is read as the online task reads it (:mod:`fedstream.data.table_source`: ``data.path``,
``data.label``, ``data.id``, ``data.categorical``, ``vfl.partition``, one file per party). The test
set is ``data.test_path`` (the same columns; classes, categories and statistics taken from the
training file) or else the last ``data.test_fraction`` of the rows. With one file per party, the
rows are those whose id every party holds (found by private set intersection,
:mod:`fedstream.data.table_align`), in the server file's order; ``summary.json`` reports how
many. Numeric columns are standardised by the mean and std of the training rows. Each client's
input is its block of columns, read by an MLP bottom model (:func:`fedstream.vfl.models.client_mlp`:
block -> hidden -> embedding).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch

from fedstream.data.table_source import TableSource, TableSpec

ALL_ROWS = 2**62  # data.stats_rows of batch training: every training row


@dataclass
class VerticalTable:
    """Train and test rows (standardised float32, n x d), labels and each client's column block."""

    dataset: str
    train_x: np.ndarray
    train_y: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray
    strips: list[slice]
    n_classes: int
    classes: list
    client_columns: list[list[str]]
    source: TableSource | None = None  # the training rows' source: their categories and statistics
    test_source: TableSource | None = None  # data.test_path's source (None: the test rows are the source's)

    def encode(self, raw) -> np.ndarray:
        """New raw rows (a :class:`~fedstream.data.table.Table` with the clients' columns by name) as
        :meth:`client_inputs` takes them: encoded and standardised as the training rows
        (:meth:`~fedstream.data.table_source.TableSource.standardise`)."""
        return self.source.standardise(raw)

    def strip_shapes(self) -> list[tuple[int, int, int]]:
        """(1, 1, width) of each client's input: the MLP flattens it to its width."""
        return [(1, 1, s.stop - s.start) for s in self.strips]

    def client_inputs(self, rows: np.ndarray) -> list[torch.Tensor]:
        """Each client's float32 block (n, width) of a batch of rows."""
        return [torch.from_numpy(np.ascontiguousarray(rows[:, s])) for s in self.strips]

    def split_inputs(self, split: str, rows: np.ndarray) -> list[torch.Tensor]:
        """:meth:`client_inputs` of ``rows`` of the ``"train"`` or ``"test"`` table."""
        return self.client_inputs((self.train_x if split == "train" else self.test_x)[rows])

    def client_features(self, rows: np.ndarray) -> list[np.ndarray]:
        """Each client's block (n, width): what participant selection scores."""
        return [np.ascontiguousarray(rows[:, s]) for s in self.strips]

    def summary_fields(self) -> dict:
        """What ``summary.json`` says of the table: the label value of each class, each client's columns."""
        out = {"classes": list(self.classes), "client_columns": self.client_columns,
               "train_rows": len(self.train_y), "test_rows": len(self.test_y)}
        if self.source is not None and self.source.alignment is not None:  # one file per party
            out["alignment"] = self.source.alignment.summary() | {"intersection": self.source.n_base}
            if self.test_source is not None:
                out["test_alignment"] = (self.test_source.alignment.summary()
                                         | {"intersection": self.test_source.n_base})
        return out


def table_spec(settings) -> TableSpec:
    """The table that the ``data.*`` keys of ``settings`` name, every training row read."""
    keys = dict(settings.table)
    return TableSpec(keys["data.path"], keys["data.label"], keys["data.id"], keys["data.categorical"],
                     keys["vfl.partition"], settings.clients, ALL_ROWS)


def load_vertical_table(settings) -> VerticalTable:
    """The table of ``settings`` (a :class:`~fedstream.vfl.settings.BatchVFLSettings` with
    ``dataset = "table"``), cut to its first train/test rows when asked."""
    keys = dict(settings.table)
    spec = table_spec(settings)
    if keys["data.test_path"]:
        train = TableSource(spec, shared=True)
        test = TableSource(replace(spec, path=keys["data.test_path"]), fit=train, shared=True)
        train_rows, test_src, test_rows = np.arange(train.n_base), test, np.arange(test.n_base)
    else:
        train = TableSource(spec, holdout=keys["data.test_fraction"], shared=True)
        cut = train.n_base - train.n_holdout
        train_rows, test_src, test_rows = np.arange(cut), train, np.arange(cut, train.n_base)
    train_rows, test_rows = train_rows[:settings.train_rows], test_rows[:settings.test_rows]
    return VerticalTable("table", train.features(train_rows), train.labels(train_rows),
                         test_src.features(test_rows), test_src.labels(test_rows), train.blocks,
                         train.n_classes, train.classes, train.client_columns, train,
                         None if test_src is train else test_src)
