"""One party's own file of a table with one file per party, read on that party's machine only.

In a deployment (``fedstream deploy`` / ``fedstream serve``) with ``data.path =
"server.csv;bank.csv;shop.csv"`` each process opens its own file and no other:

* :class:`ServerTable`: the server's file (``data.id`` and ``data.label``): the labels, encoded as
  :class:`~fedstream.data.table_source.TableSource` encodes them (same classes, same order);
* :class:`ClientTable`: client m's file (``data.id`` and its columns), encoded and standardised by
  its own first ``data.stats_rows`` rows, exactly as the simulator encodes that client's block.

The simulator aligns each client file to the server file by private set intersection
(:mod:`fedstream.data.table_align`); a deployment does not run it yet (docs/alignment.md, "Deploying
it"), so there every file must list the ids in the server file's order. Each party reports
:func:`id_digest` of its ids, and the server refuses a node whose digest differs from its own.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from fedstream.data.table import Table, read_table
from fedstream.data.table_ids import party_ids
from fedstream.data.table_source import (
    TableSpec,
    check_categorical,
    check_table_spec,
    column_positions,
    column_refs,
    encode_columns,
    encode_labels,
    label_position,
    scale_of,
    table_paths,
)
from fedstream.errors import ConfigError, DataError


def per_party(config: dict) -> bool:
    """Whether ``config`` reads a table with one file per party (``data.path`` with a ``;``)."""
    return config.get("data.name") == "table" and len(table_paths(config.get("data.path") or "")) > 1


def id_digest(table: Table, j: int, party: str) -> str:
    """sha256 of id column ``j`` in file order (the ids as text, one per line), after the simulator's
    checks of the ids of ``party``'s file (:func:`~fedstream.data.table_ids.party_ids`: DataError
    naming the row at an empty or repeated id)."""
    h = hashlib.sha256()
    for value in party_ids(table, j, party):
        h.update(value.encode() + b"\n")
    return h.hexdigest()


def _party_file(spec: TableSpec, index: int) -> tuple[Table, int]:
    paths = check_table_spec(spec)
    if len(paths) < 2:
        raise ConfigError(f"data.path = {spec.path!r}: expected one file per party separated by ';'")
    if not 0 <= index < len(paths):
        raise ConfigError(f"party {index}: data.path names {len(paths)} files (the server's, then one "
                          "per client)")
    table = read_table(Path(paths[index]))
    return table, column_positions(table, [spec.id], "data.id")[0]


def check_held_categorical(config: dict, held: list[list[str] | None]) -> None:
    """The simulator's check of ``data.categorical`` (:func:`check_categorical`, same message) on a
    deployment's server: ``held[m]``, the columns of it that client m's node reported its own."""
    check_categorical(set(column_refs(config["data.categorical"])), {c for cols in held for c in cols or ()},
                      [str(Path(p)) for p in table_paths(config["data.path"])[1:]])


def holdout_rows(n_rows: int, holdout: float) -> int:
    """The test rows a ``holdout`` fraction leaves out of ``n_rows`` (the last ones; at least one),
    as :class:`~fedstream.data.table_source.TableSource` counts them."""
    n = max(1, round(n_rows * holdout)) if holdout else 0
    if n >= n_rows:
        raise DataError(f"{n_rows} rows: too few to hold out {n} test rows (data.test_fraction = {holdout}) "
                        "and train on the others")
    return n


class ServerTable:
    """The server's file: ``base_labels`` (int64 class indices), ``classes``, ``ids`` (digest)."""

    name = "table"

    def __init__(self, spec: TableSpec):
        table, sid = _party_file(spec, 0)
        lid = label_position(table, spec.label, sid)
        self.base_labels, self.classes, self.class_keys = encode_labels(table, lid)
        self.n_base = table.n_rows
        self.n_classes = len(self.classes)
        self.n_features = 0  # the server holds no feature
        self.ids = id_digest(table, sid, "the server")
        self.path = table.path

    def features(self, indices: np.ndarray) -> np.ndarray:
        raise ConfigError(f"{self.path}: the server party holds the labels only, not the features")

    def labels(self, indices: np.ndarray) -> np.ndarray:
        return self.base_labels[np.asarray(indices, dtype=np.int64) % self.n_base]


class ClientTable:
    """Client ``index``'s file: ``X`` float32 (n, width), its columns encoded and standardised by
    its own first ``spec.stats_rows`` rows; ``columns`` their names; ``ids`` the digest of its ids.
    ``holdout``: this fraction of the rows, the last ones, is left out of the statistics (a test split)."""

    def __init__(self, spec: TableSpec, index: int, *, holdout: float = 0.0):
        table, cid = _party_file(spec, index + 1)
        cols = [j for j in range(len(table.names)) if j != cid]
        if not cols:
            raise DataError(f"{table.path}: expected the client's feature columns beside the id, found none")
        categorical = set(column_refs(spec.categorical))
        self.n_holdout = holdout_rows(table.n_rows, holdout)
        head = min(spec.stats_rows, table.n_rows - self.n_holdout)
        self.categories: dict[str, np.ndarray] = {}
        columns, onehot = encode_columns(table, cols, None, categorical, self.categories, head)
        X = np.concatenate(columns, axis=1)
        mean, std = scale_of(X, onehot, head)
        self.X = (X.astype(np.float32) - mean) / std
        self.X.flags.writeable = False
        self.n_base, self.width = table.n_rows, int(X.shape[1])
        self.columns = [table.names[j] for j in cols]
        self.categorical = sorted(categorical & set(self.columns))  # its data.categorical columns
        self.ids = id_digest(table, cid, f"client {index}")
        self.path = table.path

    def rows(self, t0: int, n: int) -> np.ndarray:
        """float32 (n, width): the rows of rounds t0..t0+n-1 (round t is row t mod rows)."""
        return np.ascontiguousarray(self.X[np.arange(t0, t0 + n) % self.n_base])
