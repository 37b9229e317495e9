"""Batch VFL deployed on a table with one file per party (``data.path = "server.csv;bank.csv;..."``):
each process opens its own file and no other (:mod:`fedstream.data.table_party`). A client node
holds its columns of the train and test rows (:func:`load_table_block`), the server the labels
(:func:`load_table_labels`); no party knows another's width, so each draws its own model from its
own seed, as the simulator does on these files (:func:`table_layout`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from fedstream.data.table_party import ClientTable, ServerTable, holdout_rows
from fedstream.data.table_source import TableSpec
from fedstream.deploy.records import Link, check_client_index
from fedstream.errors import ConfigError
from fedstream.vfl import table_data
from fedstream.vfl.deploy.data import ServerLabels, batch_settings


def table_spec(config: dict) -> TableSpec:
    """The table of ``config``: a deployed one holds its test rows out by ``data.test_fraction``."""
    settings = batch_settings(config)
    if dict(settings.table)["data.test_path"]:
        raise ConfigError("data.test_path: a deployed table with one file per party holds out its test rows "
                          "by data.test_fraction; leave data.test_path out")
    return table_data.table_spec(settings)


@dataclass
class TableBlock:
    """Client ``index``'s own columns of the train and test rows (float32, standardised), nothing else."""

    index: int
    train_x: np.ndarray
    test_x: np.ndarray
    ids: str
    categorical: list[str]  # the columns of data.categorical it holds
    config: dict | None = field(default=None, repr=False, compare=False)  # to place it (PSI)

    def inputs(self, split: str, rows: np.ndarray) -> torch.Tensor:
        """float32 (len(rows), width): the input the simulator's client gets for these rows."""
        x = self.train_x if split == "train" else self.test_x
        return torch.from_numpy(np.ascontiguousarray(x[rows]))

    def sizes(self) -> dict:
        """What the node tells the server at setup: its input shape, row counts, ids' digest and
        categorical columns."""
        return {"shape": [1, 1, int(self.train_x.shape[1])], "n_train": int(self.train_x.shape[0]),
                "n_test": int(self.test_x.shape[0]), "ids": self.ids, "categorical": self.categorical}

    def place(self, placement: np.ndarray) -> TableBlock:
        """Its rows of those every party holds, in the server's order, as the alignment placed them
        (:mod:`fedstream.deploy.psi`)."""
        return load_table_block(self.config, self.index, placement=placement)


def load_table_block(config: dict, index: int, *, placement: np.ndarray | None = None) -> TableBlock:
    """Client ``index``'s block, read from its own file (``data.path``'s file ``index + 1``); with
    ``placement`` (from the alignment) the rows every party holds, in the server's order."""
    settings = batch_settings(config)
    check_client_index(index, settings.clients, "vfl.clients")
    own = ClientTable(table_spec(config), index, holdout=dict(settings.table)["data.test_fraction"],
                      placement=placement)
    cut = own.n_base - own.n_holdout
    return TableBlock(index, own.X[:cut][:settings.train_rows], own.X[cut:][:settings.test_rows], own.ids,
                      own.categorical, config)


def load_table_labels(config: dict, link: Link | None = None) -> ServerLabels:
    """The server's labels, from its own file, cut as the simulator cuts them; with ``link`` (to the
    client nodes) first aligned with the nodes' ids (:func:`fedstream.deploy.psi.align_nodes`): the
    labels of the rows every party holds, and the alignment in ``alignment``."""
    settings = batch_settings(config)
    server = ServerTable(table_spec(config))
    if link is not None:
        from fedstream.deploy.psi import align_nodes

        server.place(align_nodes(config, link, server.id_list, shared=True))
    cut = server.n_base - holdout_rows(server.n_base, dict(settings.table)["data.test_fraction"])
    y = server.base_labels
    return ServerLabels("table", y[:cut][:settings.train_rows], y[cut:][:settings.test_rows],
                        n_classes=server.n_classes, ids=server.ids, classes=list(server.classes),
                        alignment=server.alignment)


@dataclass(frozen=True)
class TableLayout:
    """What a party knows of the inputs (:func:`~fedstream.vfl.trainer.build_parties` reads it)."""

    shapes: list[tuple[int, int, int] | None]  # None: a client whose width this party does not know
    n_classes: int

    def strip_shapes(self) -> list[tuple[int, int, int] | None]:
        return list(self.shapes)


def table_layout(n_clients: int, n_classes: int, own: dict[int, tuple[int, int, int]]) -> TableLayout:
    """What a party knows of the inputs: its own shape (``own``), None for every other client."""
    return TableLayout([own.get(m) for m in range(n_clients)], n_classes)
