"""Predictions by id on a table with one file per party (``--ids FILE``): each party looks its own
rows up by id in its own file.

A run on ``data.path = "server.csv; bank.csv; ..."`` has no file that holds every column: the
parties of a prediction are the parties of the training. ``--ids FILE`` names the customers to
predict (FILE: a table file with a column named as the run's ``data.id``); client m finds each id
in its own file (:func:`id_positions`) and encodes those rows as it encoded its training rows
(:class:`PartyBlock`). An id that client m does not hold is *absent* there: online VFL pads it as
its training pads a row the client lacks (the client's columns at their training means, zeros once
standardised, embedded by the client's model); batch VFL trains only on the ids every party holds
and refuses it (:func:`refuse_absent`). The server's own file plays no part: a new customer need
not be in it (it holds labels, and a prediction needs none).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedstream.data.table import Table, read_table
from fedstream.data.table_source import as_strings, column_positions, table_paths
from fedstream.errors import ConfigError, DataError

MAX_IDS = 1_000_000  # ids of one prediction (a file); a served request takes fewer (serving.MAX_REQUEST)


def id_keys(values) -> np.ndarray:
    """Ids as the text keys they are matched by (``as_strings``, surrounding blanks dropped): the id
    ``1000`` of a CSV and ``"1000"`` of a request are one id."""
    return np.char.strip(as_strings(np.asarray(values)))


def read_ids(path: Path, id_column: str | None) -> np.ndarray:
    """The ids of file ``path`` (CSV, CSV.gz, NPZ, Parquet: column ``id_column``, the run's
    ``data.id``), as text keys, in file order; a DataError naming the file and column otherwise."""
    if not id_column:
        raise ConfigError("--ids: the run has no data.id (its rows have no ids to predict by)")
    path = Path(path)
    table = read_table(path)
    if id_column not in table.names:
        raise DataError(f"{path}: no column {id_column!r} (the run's data.id); the file's columns are "
                        f"{', '.join(table.names)}")
    ids = id_keys(table.columns[table.names.index(id_column)])
    check_ids(ids, str(path))
    return ids


def check_ids(ids: np.ndarray, where: str) -> None:
    """At least one id, at most MAX_IDS, none empty."""
    if len(ids) == 0:
        raise DataError(f"{where}: no id to predict")
    if len(ids) > MAX_IDS:
        raise DataError(f"{where}: {len(ids):,} ids; at most {MAX_IDS:,} in one prediction")
    empty = np.flatnonzero(ids == "")
    if empty.size:
        raise DataError(f"{where}: row {int(empty[0])}: an empty id")


def party_file(config: dict, index: int) -> Path:
    """Client ``index``'s own file of a run with one file per party."""
    paths = table_paths(config.get("data.path") or "")
    if config.get("data.name") != "table" or len(paths) < 2:
        raise ConfigError("--ids predicts by id on a table with one file per party (data.path = "
                          "\"server.csv; bank.csv; ...\"); this run reads one data set: give --data FILE")
    return Path(paths[index + 1])


def id_positions(table: Table, id_column: str, ids: np.ndarray) -> np.ndarray:
    """int64 (len(ids),): the row of each id in ``table`` (file order), -1 where it lacks it; a
    DataError naming the file for an id the file holds twice."""
    j = column_positions(table, [id_column], "data.id")[0]
    own = id_keys(table.columns[j])
    order = np.argsort(own, kind="stable")
    keys = own[order]
    dup = np.flatnonzero(keys[1:] == keys[:-1])
    if dup.size:
        raise DataError(f"{table.path}: id {str(keys[dup[0]])!r} appears twice in column {id_column!r} "
                        "(data.id): each id must name one row")
    at = np.searchsorted(keys, ids)
    at = np.minimum(at, len(keys) - 1)
    found = keys[at] == ids if len(keys) else np.zeros(len(ids), bool)
    return np.where(found, order[at], -1).astype(np.int64)


@dataclass
class PartyBlock:
    """Client ``index``'s rows for the ids: ``X`` float32 (n, width), encoded and standardised as its
    training rows (zeros where absent), and ``held`` (n,) bool."""

    index: int
    X: np.ndarray
    held: np.ndarray

    @classmethod
    def from_rows(cls, index: int, rows: np.ndarray, positions: np.ndarray) -> PartyBlock:
        """From the party's own standardised rows in file order (``rows``: (n_file, width))."""
        held = positions >= 0
        X = np.zeros((len(positions), rows.shape[1]), np.float32)
        X[held] = rows[positions[held]]
        return cls(index, X, held)


def refuse_absent(block: PartyBlock, ids: np.ndarray, where: str) -> None:
    """Batch VFL: every party must hold every id (its training rows are the ids all parties hold)."""
    if not block.held.all():
        missing = ids[~block.held]
        raise DataError(f"{where}: client {block.index} does not hold id {str(missing[0])!r}"
                        f"{f' (and {len(missing) - 1} more)' if len(missing) > 1 else ''}: a batch VFL model "
                        "predicts only ids that every party holds, as it trained on those")


def own_table(config: dict, index: int) -> Table:
    return read_table(party_file(config, index))


def source_block(source, config: dict, index: int, ids: np.ndarray) -> PartyBlock:
    """Client ``index``'s rows for ``ids`` as the simulator encodes them: its own file's rows,
    encoded with the run's categories and standardised with the run's statistics of its block
    (``source``: the run's :class:`~fedstream.data.table_source.TableSource`)."""
    from fedstream.data.table_source import encode_columns  # the simulator's encoding

    table = own_table(config, index)
    positions = id_positions(table, config["data.id"], ids)
    names = source.client_columns[index]
    cols = [table.names.index(n) for n in names]
    held = positions >= 0
    block = source.blocks[index]
    X = np.zeros((len(ids), block.stop - block.start), np.float32)
    if held.any():
        columns, _ = encode_columns(table, cols, positions[held], source.categorical, source.categories, 0)
        raw = np.concatenate(columns, axis=1).astype(np.float32)
        X[held] = (raw - source.mean[block]) / source.std[block]
    return PartyBlock(index, X, held)
