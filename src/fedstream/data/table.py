"""Read a user's table file into named columns: CSV, CSV.gz, NPZ or Parquet.

* CSV / CSV.gz: comma-separated, the first line names the columns; cells are kept as strings
  (:mod:`fedstream.data.table_source` parses the numeric ones and names a bad cell's row).
* NPZ: one 1-D array per column, the array's key is the column's name (``np.savez(path, id=...,
  label=..., x0=...)``); the order of the keys is the order of the columns.
* Parquet: through pyarrow, an optional extra (``pip install "fedstream[parquet]"``).

Rows are numbered from 1 as data rows (the CSV header is not a row): row r is line r + 1 of a CSV.
"""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedstream.data._gz import GZIP_ERRORS, gzip_error, open_text
from fedstream.data._npz import NPZ_ERRORS, npz_error
from fedstream.errors import DataError

FORMATS = (".csv", ".csv.gz", ".npz", ".parquet")


@dataclass
class Table:
    """The columns of one file, in file order; ``columns[i]`` is a 1-D array of ``names[i]``."""

    path: Path
    names: list[str]
    columns: list[np.ndarray]

    @property
    def n_rows(self) -> int:
        return len(self.columns[0]) if self.columns else 0

    def index(self, ref: str) -> int:
        """The position of a column given by name or by its 0-based index in the file."""
        if ref in self.names:
            return self.names.index(ref)
        if ref.strip().isdigit():
            i = int(ref)
            if i < len(self.names):
                return i
            raise DataError(f"{self.path}: column {i}: the file has only {len(self.names)} columns "
                            f"(0..{len(self.names) - 1})")
        raise DataError(f"{self.path}: column {ref!r}: no such column; the file's columns are "
                        f"{', '.join(self.names)}")


def read_table(path: str | os.PathLike[str]) -> Table:
    """The columns of ``path`` by its suffix (see module doc); DataError naming the file if unreadable."""
    path = Path(path)
    name = path.name.lower()
    if not path.is_file():
        raise DataError(f"{path}: no such file (data.path)")
    if name.endswith((".csv", ".csv.gz")):
        table = _read_csv(path)
    elif name.endswith(".npz"):
        table = _read_npz(path)
    elif name.endswith(".parquet"):
        table = _read_parquet(path)
    else:
        raise DataError(f"{path}: unknown table format; expected a file ending in {', '.join(FORMATS)}")
    if table.n_rows == 0:
        raise DataError(f"{path}: empty: expected at least one data row, found none")
    dup = sorted({n for n in table.names if table.names.count(n) > 1})
    if dup:
        raise DataError(f"{path}: column {dup[0]!r} appears more than once in the header")
    return table


def _read_csv(path: Path) -> Table:
    try:
        with open_text(path) as f:
            reader = csv.reader(f)
            try:
                names = [s.strip() for s in next(reader)]
            except StopIteration:
                raise DataError(f"{path}: empty file: expected a header line naming the columns") from None
            rows = []
            for r, row in enumerate(reader, start=1):
                if not row:
                    continue
                if len(row) != len(names):
                    raise DataError(f"{path}: row {r} (line {r + 1}): expected {len(names)} cells, "
                                    f"one per column of the header, found {len(row)}")
                rows.append(row)
    except GZIP_ERRORS as e:
        raise gzip_error(path, e) from e
    except (UnicodeDecodeError, csv.Error) as e:
        raise DataError(f"{path}: not a readable CSV file: {e}") from None
    cells = np.array(rows, dtype=str).reshape(len(rows), len(names))
    return Table(path, names, [np.char.strip(cells[:, j]) for j in range(len(names))])


def _read_npz(path: Path) -> Table:
    try:
        with np.load(path, allow_pickle=False) as z:
            names = list(z.files)
            columns = [z[k] for k in names]
    except NPZ_ERRORS as e:
        raise npz_error(path, e) from None
    for name, col in zip(names, columns):
        if col.ndim != 1 or len(col) != len(columns[0]):
            raise DataError(f"{path}: array {name!r}: expected one 1-D array per column, all of length "
                            f"{len(columns[0])}, found shape {col.shape}")
    return Table(path, names, columns)


def _read_parquet(path: Path) -> Table:
    try:
        import pyarrow.parquet as pq  # optional extra: only Parquet files need it
    except ImportError:
        raise DataError(f"{path}: reading Parquet needs pyarrow: "
                        'pip install "fedstream[parquet]"') from None
    try:
        data = pq.read_table(path)
    except Exception as e:  # pyarrow's own error types: a damaged or foreign file
        raise DataError(f"{path}: not a readable Parquet file: {e}") from None
    columns = [np.asarray(data.column(i).to_numpy(zero_copy_only=False)) for i in range(data.num_columns)]
    return Table(path, [str(n) for n in data.column_names], columns)


def as_table(X, *, name: str = "X") -> Table:
    """Rows given in memory as a :class:`Table`: a 2-D array (columns named ``"0"``, ``"1"``, ...),
    a pandas DataFrame (its column names) or a dict of 1-D columns. ValueError in scikit-learn's
    words for anything else or a wrong shape."""
    if isinstance(X, dict) or hasattr(X, "columns"):
        names = [str(c) for c in (X.keys() if isinstance(X, dict) else X.columns)]
        columns = [np.asarray(X[c].to_numpy() if hasattr(X[c], "to_numpy") else X[c])
                   for c in (X.keys() if isinstance(X, dict) else X.columns)]
        if any(c.ndim != 1 or len(c) != len(columns[0]) for c in columns):
            raise ValueError(f"{name}: expected columns of one length each, found shapes "
                             f"{[c.shape for c in columns]}")
    else:
        array = np.asarray(X)
        if array.ndim != 2:
            raise ValueError(f"Expected 2D array, got {array.ndim}D array instead: {name} must be "
                             "(n_samples, n_features); reshape your data, e.g. X.reshape(-1, 1) for one "
                             "feature")
        names = [str(j) for j in range(array.shape[1])]
        columns = [array[:, j] for j in range(array.shape[1])]
    if not columns or len(columns[0]) == 0:
        raise ValueError(f"{name}: expected at least one sample and one feature")
    return Table(Path(f"<{name}>"), names, columns)
