"""A user's table as a :class:`~fedstream.data.sources.Source`: ``data.name = "table"``.

One file (``data.path = "customers.csv"``) holds the label, an optional id and the features;
``vfl.partition`` gives each client its columns (clients separated by ``;``, columns by ``,``, by
name or by 0-based file index or index range such as ``0-13``); without it the feature columns
(every column but the label and the id, in file order) are cut in ``vfl.clients`` equal contiguous
blocks. Several files (``data.path = "server.csv;bank.csv;shop.csv"``): the first, the server's,
holds the id and the label; each further file is one client's and holds the id and that client's
own columns, in any order and with any overlap. The parties' ids are matched by private set
intersection (:mod:`fedstream.data.table_align`, the protocol of :mod:`fedstream.alignment`, played
in this process); the server file's row order is the stream's order. A client that lacks a row's
id has zeros (its columns' means) in that row and is marked absent in :attr:`TableSource.held`;
with ``shared=True`` (batch VFL) only the rows that every party holds are kept.

Numeric columns are standardised by the mean and std of the first ``stats_rows`` rows, as HIGGS
is; ``data.categorical`` columns are one-hot encoded with the categories seen in those rows (a
later unseen category is all zeros). Labels may be any values: the classes are the distinct
labels, sorted (numerically when every label is a number), and class i is the i-th of them.

Every problem with the files is a DataError naming the file, the row and the column.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedstream.alignment import Alignment
from fedstream.data.imnist import check_indices
from fedstream.data.table import Table, read_table
from fedstream.data.table_align import align_tables, id_position
from fedstream.errors import ConfigError, DataError, shown


@dataclass(frozen=True)
class TableSpec:
    """The config keys that say how to read a table (see module doc)."""

    path: str
    label: str | None = None
    id: str | None = None
    categorical: str | None = None
    partition: str | None = None
    n_clients: int = 4
    stats_rows: int = 10000

    @classmethod
    def from_config(cls, config: dict) -> TableSpec:
        if not config.get("data.path"):
            raise ConfigError('data.name = "table" needs data.path (the table file, or one file per '
                              "party separated by ';')")
        return cls(config["data.path"], config["data.label"], config["data.id"], config["data.categorical"],
                   config["vfl.partition"], config["vfl.clients"], config["data.stats_rows"])


def _where(table: Table, row: int) -> str:
    """Row ``row`` (0-based) as the messages name it: 1-based, with the line of a CSV."""
    line = f" (line {row + 2})" if table.path.name.lower().endswith((".csv", ".csv.gz")) else ""
    return f"{table.path}: row {row + 1}{line}"


def numeric_column(table: Table, j: int, rows: np.ndarray | None = None) -> np.ndarray:
    """Column ``j`` as float64; DataError at the first cell that is not a finite number."""
    col = table.columns[j] if rows is None else table.columns[j][rows]
    order = np.arange(len(col)) if rows is None else rows
    try:
        values = col.astype(np.float64)
    except (ValueError, TypeError):
        values = None
    if values is None or not np.isfinite(values).all():
        for i, cell in enumerate(col):
            try:
                ok = np.isfinite(float(cell))
            except (ValueError, TypeError):
                ok = False
            if not ok:
                raise DataError(f"{_where(table, int(order[i]))}, column {table.names[j]!r}: expected a "
                                f"finite number, found {str(cell)!r} (list a text column in "
                                "data.categorical)")
    return values


def as_strings(col: np.ndarray) -> np.ndarray:
    return col.astype(str) if col.dtype.kind != "U" else col


def label_keys(table: Table, j: int) -> np.ndarray:
    """The labels of column ``j`` as sortable keys (:func:`column_keys`); no cell may be empty."""
    col = table.columns[j]
    if col.dtype.kind not in "iub":
        empty = np.flatnonzero(as_strings(col) == "")
        if empty.size:
            raise DataError(f"{_where(table, int(empty[0]))}, column {table.names[j]!r} (data.label): "
                            "expected a label, found an empty cell")
    return column_keys(col)


def column_keys(col: np.ndarray) -> np.ndarray:
    """Labels as sortable keys, decided for the whole column: numbers (also when written as text,
    when every one is a finite number) or text.

    >>> column_keys(np.array(["1", "2.0"])), column_keys(np.array(["01", "a"]))
    (array([1., 2.]), array(['01', 'a'], dtype='<U2'))
    """
    if col.dtype.kind in "iub":
        return col
    text = as_strings(col)
    try:
        keys = text.astype(np.float64)
    except ValueError:
        return text
    return keys if np.isfinite(keys).all() else text


def encode_labels(
    table: Table, j: int, known: np.ndarray | None = None
) -> tuple[np.ndarray, list, np.ndarray]:
    """Class indices int64, the sorted classes of label column ``j`` (at least two) and their keys;
    with ``known`` (the keys of another file's classes) the labels must be among them."""
    col = table.columns[j]
    keys = label_keys(table, j)
    if known is not None:
        lookup = {k.item(): i for i, k in enumerate(known)}
        y = np.array([lookup.get(k.item(), -1) for k in keys], dtype=np.int64)
        if (y < 0).any():
            r = int(np.flatnonzero(y < 0)[0])
            raise DataError(f"{_where(table, r)}, column {table.names[j]!r} (data.label): label "
                            f"{str(col[r])!r} is not a class of the training rows")
        return y, [], known
    classes, y = np.unique(keys, return_inverse=True)
    if len(classes) < 2:
        raise DataError(f"{table.path}: column {table.names[j]!r} (data.label): expected at least two "
                        f"classes, found only {shown(classes[0])} in all {table.n_rows} rows")
    if keys is not col and keys.dtype.kind == "f":  # numbers written as text: list them as written
        first = {}
        for k, s in zip(y, as_strings(col)):
            first.setdefault(int(k), str(s))
        names = [_as_number(first[i]) for i in range(len(classes))]
    else:
        names = [c.item() if hasattr(c, "item") else c for c in classes]
    return y.astype(np.int64), names, classes


def _as_number(text: str):
    value = float(text)
    return int(value) if value.is_integer() and "." not in text and "e" not in text.lower() else value


def column_refs(text: str | None) -> list[str]:
    return [s.strip() for s in (text or "").split(",") if s.strip()]


def label_position(table: Table, label: str | None, sid: int | None) -> int:
    """The label column's position: ``label`` (data.label) by name or index, else the first column
    that is not the id (position ``sid``); DataError when there is none, ConfigError when
    ``label`` names the id."""
    if label:
        lid = column_positions(table, [label], "data.label")[0]
        if lid == sid:
            raise ConfigError(f"data.label and data.id name the same column {table.names[lid]!r}")
        return lid
    lid = next((j for j in range(len(table.names)) if j != sid), None)
    if lid is None:
        raise DataError(f"{table.path}: expected a label column beside the id, found none")
    return lid


def column_positions(table: Table, refs: list[str], key: str) -> list[int]:
    """Positions of columns given by name, index or index range ``a-b``; DataError naming ``key``."""
    out = []
    for ref in refs:
        lo, dash, hi = ref.partition("-")
        try:
            if dash and lo.strip().isdigit() and hi.strip().isdigit() and ref not in table.names:
                a, b = int(lo), int(hi)
                if a > b:
                    raise DataError(f"{table.path}: range {ref!r}: expected a <= b")
                out += [table.index(str(i)) for i in range(a, b + 1)]
            else:
                out.append(table.index(ref))
        except DataError as exc:
            raise DataError(f"{key}: {exc}") from None
    return out


def _partition(table: Table, spec: TableSpec, reserved: dict[int, str]) -> list[list[int]]:
    """Each client's column positions in ``table`` (one file holding every party's columns)."""
    if spec.partition:
        groups = [column_positions(table, column_refs(g), "vfl.partition") for g in spec.partition.split(";")]
        owner: dict[int, int] = {}
        for m, group in enumerate(groups):
            if not group:
                raise ConfigError(f"vfl.partition = {spec.partition!r}: client {m} has no column")
            for j in group:
                if j in reserved:
                    raise DataError(f"vfl.partition: column {table.names[j]!r} of {table.path} is "
                                    f"{reserved[j]}; a client cannot hold it")
                if j in owner:
                    raise DataError(f"vfl.partition: column {table.names[j]!r} of {table.path} is "
                                    f"given to two clients ({owner[j]} and {m})")
                owner[j] = m
        if len(groups) != spec.n_clients:
            raise ConfigError(f"vfl.partition names {len(groups)} clients but vfl.clients = {spec.n_clients}")
        return groups
    features = [j for j in range(len(table.names)) if j not in reserved]
    if not 1 <= spec.n_clients <= len(features):
        raise ConfigError(f"vfl.clients = {spec.n_clients}: must be between 1 and the {len(features)} "
                          f"feature columns of {table.path}")
    return [[int(j) for j in part] for part in np.array_split(features, spec.n_clients)]


def encode_columns(
    table: Table, cols: list[int], rows: np.ndarray | None, categorical: set[str],
    categories: dict[str, np.ndarray], head: int,
) -> tuple[list[np.ndarray], list[bool]]:
    """Columns ``cols`` of ``table`` (in the order ``rows``, None: file order) as float64 (n, k)
    arrays: a numeric column as it is, a ``categorical`` one one-hot over ``categories[name]`` (set
    from its first ``head`` rows when missing); and for each output column whether it is one-hot."""
    out, onehot = [], []
    for j in cols:
        if table.names[j] in categorical:
            col = as_strings(table.columns[j] if rows is None else table.columns[j][rows])
            cats = categories.setdefault(table.names[j], np.unique(col[:head]))
            out.append((col[:, None] == cats[None, :]).astype(np.float64))
            onehot += [True] * len(cats)
        else:
            out.append(numeric_column(table, j, rows)[:, None])
            onehot.append(False)
    return out, onehot


def scale_of(X: np.ndarray, onehot: list[bool], head: int) -> tuple[np.ndarray, np.ndarray]:
    """float32 mean and std of the first ``head`` rows of each column (one-hot: 0 and 1; std 0 -> 1)."""
    mean, std = X[:head].mean(axis=0), X[:head].std(axis=0)
    is_hot = np.array(onehot, dtype=bool)
    mean[is_hot], std[is_hot | (std == 0)] = 0.0, 1.0
    return mean.astype(np.float32), std.astype(np.float32)


def table_paths(path: str) -> list[str]:
    """The files of ``data.path``: one, or one per party separated by ``;``."""
    return [p.strip() for p in path.split(";") if p.strip()]


def check_table_spec(spec: TableSpec) -> list[str]:
    """The checks of the table keys that need no file's contents, made alike by the simulator
    (:class:`TableSource`) and by each party of a deployment (:mod:`fedstream.data.table_party`);
    return the files of ``data.path``. With several files (the server's, then one per client):
    ``data.id`` is set, ``vfl.partition`` is not, and there is one client file per client."""
    paths = table_paths(spec.path)
    if spec.label and spec.label == spec.id:
        raise ConfigError(f"data.label and data.id name the same column {spec.id!r}")
    if len(paths) > 1:
        if not spec.id:
            raise ConfigError("several files in data.path need data.id, the column that aligns their rows")
        if spec.partition:
            raise ConfigError("vfl.partition applies to one file; with one file per party each client's "
                              "columns are those of its file")
        if len(paths) - 1 != spec.n_clients:
            raise ConfigError(f"data.path names {len(paths) - 1} client files but vfl.clients = "
                              f"{spec.n_clients}")
    return paths


def check_categorical(refs: set[str], known: set[str], files: list[str]) -> None:
    """Every ``data.categorical`` column (``refs``) must be a feature column (``known``, the
    feature columns of ``files``); DataError naming the first that is not."""
    unknown = sorted(refs - known)
    if unknown:
        raise DataError(f"data.categorical: column {unknown[0]!r} is not a feature column of "
                        f"{', '.join(dict.fromkeys(files))}")


class TableSource:
    """The rows of a user's table(s), standardised, with each client's feature block (module doc).

    ``blocks[m]`` is client m's slice of the feature columns; ``client_columns[m]`` the names of
    its file columns; ``classes[c]`` the label value of class c.
    """

    name = "table"

    def __init__(self, spec: TableSpec, *, fit: TableSource | None = None, holdout: float = 0.0,
                 table: Table | None = None, shared: bool = False):
        """``fit``: take the classes, categories and statistics of that source (a test file);
        ``holdout``: this fraction of the rows, the last ones, is left out of the statistics (a
        test split: :attr:`n_holdout` rows, at least one); ``table``: these columns, already in
        memory (arrays given to an estimator's ``fit``), instead of the file ``spec.path``;
        ``shared``: with one file per party, keep only the rows whose id every party holds."""
        paths = [str(table.path)] if table is not None else check_table_spec(spec)
        server = table if table is not None else read_table(Path(paths[0]))
        if len(paths) == 1:
            sid = column_positions(server, [spec.id], "data.id")[0] if spec.id else None
        else:
            sid = id_position(server, spec.id, "the server")
        lid = label_position(server, spec.label, sid)
        reserved = {lid: "the label (data.label)"} | ({} if sid is None else {sid: "the id (data.id)"})
        self.base_labels, self.classes, self.class_keys = encode_labels(
            server, lid, None if fit is None else fit.class_keys)
        if fit is not None:
            self.classes = fit.classes
        self.n_base = server.n_rows
        self.alignment: Alignment | None = None  # per-party files: the PSI that matched their ids
        self.held: np.ndarray | None = None  # (n_base, clients) bool, where some client lacks a row's id
        parts: list[tuple[Table, list[int], np.ndarray | None]] = []  # (file, columns, rows in server order)
        if len(paths) == 1:
            parts = [(server, g, None) for g in _partition(server, spec, reserved)]
        else:
            clients = [read_table(Path(p)) for p in paths[1:]]
            positions = [id_position(t, spec.id, f"client {m}") for m, t in enumerate(clients)]
            for m, (table, cid) in enumerate(zip(clients, positions)):
                if len(table.names) == 1:
                    raise DataError(f"{table.path} (client {m}): expected the client's feature columns "
                                    "beside the id, found none")
            self.alignment, rows, keep = align_tables(server, sid, list(zip(clients, positions)),
                                                      shared=shared)
            if keep is not None:
                self.base_labels, self.n_base = self.base_labels[keep], int(keep.size)
            parts = [(t, [j for j in range(len(t.names)) if j != cid], r)
                     for t, cid, r in zip(clients, positions, rows)]
            held = np.stack([r >= 0 for r in rows], axis=1)
            self.held = None if held.all() else held
        categorical = set(column_refs(spec.categorical))
        check_categorical(categorical, {table.names[j] for table, cols, _ in parts for j in cols},
                          [str(t.path) for t, _, _ in parts])
        self.n_holdout = max(1, round(self.n_base * holdout)) if holdout else 0
        if self.n_holdout >= self.n_base:
            raise DataError(f"{paths[0]}: {self.n_base} rows: too few to hold out {self.n_holdout} test rows "
                            f"(data.test_fraction = {holdout}) and train on the others")
        head = min(spec.stats_rows, self.n_base - self.n_holdout)
        self.categories: dict[str, np.ndarray] = {} if fit is None else dict(fit.categories)
        self.categorical = categorical
        if self.held is not None:
            self._encode_partial(parts, head, fit)
            return
        blocks, columns, names, onehot = [], [], [], []
        for table, cols, rows in parts:
            start = sum(c.shape[1] for c in columns)
            block, hot = encode_columns(table, cols, rows, categorical, self.categories, head)
            columns += block
            onehot += hot
            blocks.append(slice(start, sum(c.shape[1] for c in columns)))
            names.append([table.names[j] for j in cols])
        self._check_columns(names, fit, paths[0])
        X = np.concatenate(columns, axis=1)
        self.mean, self.std = scale_of(X, onehot, head) if fit is None else (fit.mean, fit.std)
        self._X = (X.astype(np.float32) - self.mean) / self.std
        self._X.flags.writeable = False
        self.n_features = int(X.shape[1])
        self.n_classes = len(self.classes)
        self.blocks = blocks
        self.client_columns = names

    def _check_columns(self, names: list[list[str]], fit: TableSource | None, path: str) -> None:
        if fit is not None and names != fit.client_columns:
            raise DataError(f"{path}: the clients' columns {names} differ from those of the training "
                            f"rows {fit.client_columns}")

    def _encode_partial(self, parts: list, head: int, fit: TableSource | None) -> None:
        """The clients' blocks where some client lacks some rows' ids: each client's columns are
        encoded and standardised by the first ``head`` training rows (stream order) that it holds,
        block by block; a row it lacks is zeros (its columns' means)."""
        blocks, names, means, stds, filled = [], [], [], [], []
        start = 0
        for m, (table, cols, rows) in enumerate(parts):
            held = np.flatnonzero(rows >= 0)
            own_head = min(head, int((held < self.n_base - self.n_holdout).sum()))
            if own_head == 0:
                raise DataError(f"{table.path} (client {m}): holds none of the training rows' ids")
            columns, hot = encode_columns(table, cols, rows[held], self.categorical, self.categories,
                                          own_head)
            X = np.concatenate(columns, axis=1)
            width = X.shape[1]
            if fit is None:
                mean, std = scale_of(X, hot, own_head)
            else:
                mean, std = fit.mean[fit.blocks[m]], fit.std[fit.blocks[m]]
            block = np.zeros((self.n_base, width), np.float32)
            block[held] = (X.astype(np.float32) - mean) / std
            filled.append(block)
            means.append(mean)
            stds.append(std)
            blocks.append(slice(start, start + width))
            names.append([table.names[j] for j in cols])
            start += width
        self._check_columns(names, fit, str(parts[0][0].path))
        self.mean, self.std = np.concatenate(means), np.concatenate(stds)
        self._X = np.concatenate(filled, axis=1)
        self._X.flags.writeable = False
        self.n_features = int(self._X.shape[1])
        self.n_classes = len(self.classes)
        self.blocks = blocks
        self.client_columns = names

    def features(self, indices: np.ndarray) -> np.ndarray:
        return self._X[check_indices(indices) % self.n_base]

    def standardise(self, raw) -> np.ndarray:
        """float32 (n, n_features): the rows of ``raw`` (a table holding every client's columns, by
        name; other columns are ignored) encoded as the training rows are: categorical columns
        one-hot over the training categories, then the training mean and std."""
        if not isinstance(raw, Table):
            raise DataError(f"expected rows of a table file (CSV, CSV.gz, NPZ or Parquet) with the columns "
                            f"{', '.join(n for names in self.client_columns for n in names)} by name, found "
                            f"{type(raw).__name__}")
        where = {n: i for i, n in enumerate(raw.names)}
        columns = []
        for name in (n for names in self.client_columns for n in names):
            if name not in where:
                raise DataError(f"{raw.path}: column {name!r}: no such column; the run's clients hold "
                                f"{', '.join(n for names in self.client_columns for n in names)}")
            columns += encode_columns(raw, [where[name]], None, self.categorical, self.categories, 0)[0]
        return (np.concatenate(columns, axis=1).astype(np.float32) - self.mean) / self.std

    def labels(self, indices: np.ndarray) -> np.ndarray:
        return self.base_labels[check_indices(indices) % self.n_base]


def load_table_source(config: dict) -> TableSource:
    """The source of a config with ``data.name = "table"``."""
    return TableSource(TableSpec.from_config(config))
