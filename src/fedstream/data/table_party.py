"""One party's own file of a table with one file per party, read on that party's machine only.

In a deployment (``fedstream deploy`` / ``fedstream serve``) with ``data.path =
"server.csv;bank.csv;shop.csv"`` each process opens its own file and no other:

* :class:`ServerTable`: the server's file (``data.id`` and ``data.label``): the labels, encoded as
  :class:`~fedstream.data.table_source.TableSource` encodes them (same classes, same order);
* :class:`ClientTable`: client m's file (``data.id`` and its columns), encoded and standardised by
  its own first ``data.stats_rows`` rows, exactly as the simulator encodes that client's block.

The simulator aligns each client file to the server file by private set intersection
(:mod:`fedstream.data.table_align`); a deployment runs the same exchange over its channel before
setup (:mod:`fedstream.deploy.psi`). Then each client's file is *placed*: its rows in the order the
training plays the server's rows (``placement``: its row of each, -1 where it lacks the id), encoded
and standardised as the simulator encodes that client's block, and the server's labels are those of
the rows the training plays. Each party reports :func:`placed_digest` of the ids it plays, and the
server refuses a node whose digest differs from the one it expects.
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


def placed_digest(ids: list[str], rows: np.ndarray) -> str:
    """sha256 of the ids at ``rows`` (an empty line for -1, an absent row), one per line."""
    h = hashlib.sha256()
    for r in np.asarray(rows).tolist():
        h.update((ids[r] if r >= 0 else "").encode() + b"\n")
    return h.hexdigest()


def party_id_list(spec: TableSpec, index: int) -> list[str]:
    """Party ``index``'s ids (0: the server's file, m + 1: client m's) as distinct text, checked as
    the simulator checks them (:func:`fedstream.data.table_ids.party_ids`)."""
    table, j = _party_file(spec, index)
    return party_ids(table, j, "the server" if index == 0 else f"client {index - 1}")


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
        self.ids: str | list[str] = id_digest(table, sid, "the server")  # aligned: per client, placed_digest
        self.path = table.path
        self.id_list = party_ids(table, sid, "the server")
        self.alignment = None  # per-party files aligned by PSI (fedstream.deploy.psi)
        self.held: np.ndarray | None = None  # (n_base, clients) bool, where some client lacks an id

    def place(self, alignment) -> None:
        """Take the alignment (:class:`~fedstream.alignment.session.Alignment`) the server made with
        the nodes: with ``kept`` (batch VFL) only the labels of those rows, and the digest every node
        reports; otherwise every row, and per client the digest of the ids it holds (absent: empty)."""
        self.alignment = alignment
        ranks = alignment.ranks()
        if alignment.kept is not None:
            self.base_labels = self.base_labels[alignment.kept]
            self.n_base = int(alignment.kept.size)
            self.ids = placed_digest(self.id_list, alignment.kept)
            return
        rows = np.arange(self.n_base)
        self.ids = [placed_digest(self.id_list, np.where(r >= 0, rows, -1)) for r in ranks]
        held = np.stack([r >= 0 for r in ranks], axis=1)
        self.held = None if held.all() else held

    def features(self, indices: np.ndarray) -> np.ndarray:
        raise ConfigError(f"{self.path}: the server party holds the labels only, not the features")

    def labels(self, indices: np.ndarray) -> np.ndarray:
        return self.base_labels[np.asarray(indices, dtype=np.int64) % self.n_base]


class ClientTable:
    """Client ``index``'s file: ``X`` float32 (n, width), its columns encoded and standardised by
    its own first ``spec.stats_rows`` rows; ``columns`` their names; ``ids`` the digest of its ids.
    ``holdout``: this fraction of the rows, the last ones, is left out of the statistics (a test split).
    ``placement`` (from the alignment, :mod:`fedstream.deploy.psi`): the rows are those the training
    plays, its row of each (-1: it lacks the id, a row of zeros, its columns' means), standardised by
    the first ``spec.stats_rows`` training rows it holds, as the simulator's block of this client."""

    def __init__(self, spec: TableSpec, index: int, *, holdout: float = 0.0,
                 placement: np.ndarray | None = None):
        table, cid = _party_file(spec, index + 1)
        cols = [j for j in range(len(table.names)) if j != cid]
        if not cols:
            raise DataError(f"{table.path}: expected the client's feature columns beside the id, found none")
        categorical = set(column_refs(spec.categorical))
        n = table.n_rows if placement is None else len(placement)
        self.n_holdout = holdout_rows(n, holdout)
        head = min(spec.stats_rows, n - self.n_holdout)
        held = np.arange(n) if placement is None else np.flatnonzero(placement >= 0)
        if placement is not None:
            head = min(head, int((held < n - self.n_holdout).sum()))
            if head == 0:
                raise DataError(f"{table.path} (client {index}): holds none of the training rows' ids")
        self.categories: dict[str, np.ndarray] = {}
        rows = None if placement is None else placement[held]
        columns, onehot = encode_columns(table, cols, rows, categorical, self.categories, head)
        X = np.concatenate(columns, axis=1)
        mean, std = scale_of(X, onehot, head)
        self.mean, self.std = mean, std  # the training's statistics (own_rows encodes by them)
        if placement is None:
            self.X = (X.astype(np.float32) - mean) / std
            self.ids = id_digest(table, cid, f"client {index}")
        else:
            self.X = np.zeros((n, X.shape[1]), np.float32)
            self.X[held] = (X.astype(np.float32) - mean) / std
            self.ids = placed_digest(party_ids(table, cid, f"client {index}"), placement)
        self.X.flags.writeable = False
        self.n_base, self.width = n, int(X.shape[1])
        self.columns = [table.names[j] for j in cols]
        self.categorical = sorted(categorical & set(self.columns))  # its data.categorical columns
        self.path = table.path

    def rows(self, t0: int, n: int) -> np.ndarray:
        """float32 (n, width): the rows of rounds t0..t0+n-1 (round t is row t mod rows)."""
        return np.ascontiguousarray(self.X[np.arange(t0, t0 + n) % self.n_base])

    def own_rows(self, table: Table, positions: np.ndarray) -> np.ndarray:
        """float32 (len(positions), width): the rows of its own file (``table``, read again: the
        columns are not kept) at ``positions`` (file order; -1: an id it lacks, a row of zeros, its
        columns' means), encoded and standardised exactly as its training rows (:attr:`X`): the
        training's categories, mean and std. An id of its file that the training never played
        (outside the intersection) is encoded the same way."""
        positions = np.asarray(positions, dtype=np.int64)
        held = positions >= 0
        out = np.zeros((len(positions), self.width), np.float32)
        if held.any():
            cols = column_positions(table, self.columns, "its columns")
            columns, _ = encode_columns(table, cols, positions[held], set(self.categorical),
                                        self.categories, 0)
            out[held] = (np.concatenate(columns, axis=1).astype(np.float32) - self.mean) / self.std
        return out
