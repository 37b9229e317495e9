"""Readers for the UCI HIGGS / SUSY CSV files and the rtdl higgs-small npz.

UCI format: one row per event, comma-separated, label first (1 = signal, 0 = background, printed
as ``1.000000000000000000e+00`` or ``0``), then the features (28 for HIGGS, 18 for SUSY); plain or
gzip-compressed; no header. H2O's copies add a header line (``response,x1,...``) and round the
values (``8.69E-01``); a first line whose first field is not a number is taken as a header.

Fast path: ``np.loadtxt`` on chunks of lines (C parser, float32 result filled chunk by chunk so
the full 11M-row HIGGS needs ~1.2 GB, not twice that). When anything is wrong, a slow line-by-line
scan finds the first bad line and names it (line numbers are 1-based, header included).
"""

from __future__ import annotations

import itertools
import os
import warnings
from pathlib import Path

import numpy as np

from fedstream.data._gz import GZIP_ERRORS, gzip_error, open_text
from fedstream.data._npz import read_npz_arrays
from fedstream.data._numtext import number_problem
from fedstream.errors import DataError

CHUNK_LINES = 200_000


def _is_number(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


def _scan(path: Path, n_features: int, name: str, max_rows: int | None) -> str | None:
    """Describe the first bad line of the file (None when every line checked is fine)."""
    ncol = n_features + 1
    rows = 0
    try:
        with open_text(path) as f:
            for lineno, line in enumerate(f, start=1):
                line = line.rstrip("\r\n")
                if line == "":
                    continue
                fields = line.split(",")
                if lineno == 1 and not _is_number(fields[0]):
                    if len(fields) != ncol:
                        return (f"line 1 (header): expected {ncol} columns (label + {n_features} "
                                f"{name} features) but found {len(fields)}")
                    continue
                if max_rows is not None and rows >= max_rows:
                    return None
                rows += 1
                if len(fields) != ncol:
                    return (f"line {lineno}: expected {ncol} columns (label + {n_features} "
                            f"{name} features) but found {len(fields)}")
                for col, s in enumerate(fields, start=1):
                    problem = number_problem(s, f"line {lineno}, column {col}")
                    if problem:
                        return problem
                    if col == 1 and float(s) not in (0.0, 1.0):
                        return f"line {lineno}, column 1 (label): expected 0 or 1 but found {s!r}"
    except GZIP_ERRORS as e:
        raise gzip_error(path, e) from e
    return None


def _fail(path: Path, n_features: int, name: str, max_rows: int | None, fallback: str) -> DataError:
    msg = _scan(path, n_features, name, max_rows)
    return DataError(f"{path}: {name} CSV: {msg or fallback}")


def read_uci_csv(
    path: str | os.PathLike[str], *, n_features: int, name: str, max_rows: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Read a UCI HIGGS/SUSY-format CSV(.gz): X float32 (n, n_features), y int64 (n,) in {0, 1}.

    ``max_rows`` limits the number of data rows read (the header does not count).
    """
    path = Path(path)
    ncol = n_features + 1
    if max_rows is not None and max_rows < 0:
        raise ValueError(f"max_rows: expected >= 0 or None, found {max_rows}")
    parts: list[np.ndarray] = []
    n = 0
    try:
        with open_text(path) as f:
            first = f.readline()
            head = first.split(",")[0].strip()
            header = first.strip() != "" and not _is_number(head)
            if header and len(first.split(",")) != ncol:
                raise _fail(path, n_features, name, max_rows, "bad header")
            pending = [] if header else [first]
            while max_rows is None or n < max_rows:
                want = CHUNK_LINES if max_rows is None else min(CHUNK_LINES, max_rows - n)
                lines = pending + list(itertools.islice(f, want - len(pending)))
                pending = []
                if not lines:
                    break
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", UserWarning)  # "input contained no data"
                    try:
                        block = np.loadtxt(lines, delimiter=",", dtype=np.float64, ndmin=2,
                                           comments=None)
                    except ValueError as e:
                        raise _fail(path, n_features, name, max_rows, str(e)) from e
                if block.size == 0:
                    continue
                if block.shape[1] != ncol:
                    raise _fail(path, n_features, name, max_rows,
                                f"expected {ncol} columns, found {block.shape[1]}")
                if max_rows is not None:
                    block = block[: max_rows - n]
                if not np.isfinite(block).all():
                    raise _fail(path, n_features, name, max_rows, "non-finite value")
                if not ((block[:, 0] == 0) | (block[:, 0] == 1)).all():
                    raise _fail(path, n_features, name, max_rows, "label not in {0, 1}")
                parts.append(block.astype(np.float32))
                n += block.shape[0]
    except GZIP_ERRORS as e:
        raise gzip_error(path, e) from e
    if n == 0:
        raise DataError(f"{path}: {name} CSV: empty: expected at least one data row, found none")
    data = parts[0] if len(parts) == 1 else np.concatenate(parts)
    del parts
    if not np.isfinite(data).all():  # a value beyond the float32 range
        raise DataError(f"{path}: {name} CSV: a value overflows float32 (|x| > 3.4e38)")
    y = data[:, 0].astype(np.int64)
    X = np.ascontiguousarray(data[:, 1:])
    return X, y


NPZ_KEYS = ("X_val", "y_val", "idx_val", "X_test", "y_test", "idx_test")


def read_higgs_npz(path: str | os.PathLike[str]) -> tuple[np.ndarray, np.ndarray]:
    """Read the rtdl higgs-small val+test npz: X float32 (n, 28), y int64 (n,), rows in HIGGS order.

    The val and test rows are concatenated and sorted by their ``idx_*`` (row index in rtdl's
    higgs-small, which follows the order of HIGGS.csv).
    """
    path = Path(path)
    arr = read_npz_arrays(path, NPZ_KEYS)
    Xs, ys, ids = [], [], []
    for split in ("val", "test"):
        X, y, idx = arr[f"X_{split}"], arr[f"y_{split}"], arr[f"idx_{split}"]
        if X.ndim != 2 or X.shape[1] != 28:
            raise DataError(f"{path}: X_{split}: expected shape (n, 28), found {X.shape}")
        if y.shape != (X.shape[0],) or idx.shape != (X.shape[0],):
            raise DataError(
                f"{path}: y_{split}/idx_{split}: expected shape ({X.shape[0]},), found "
                f"{y.shape} and {idx.shape}"
            )
        if not np.isfinite(X).all():
            raise DataError(f"{path}: X_{split}: expected finite values, found NaN or inf")
        if not np.isin(y, (0, 1)).all():
            raise DataError(f"{path}: y_{split}: expected labels 0/1, found {np.unique(y)[:10]}")
        Xs.append(X)
        ys.append(y)
        ids.append(idx)
    idx = np.concatenate(ids)
    order = np.argsort(idx, kind="stable")
    if np.any(np.diff(idx[order]) == 0):
        raise DataError(f"{path}: idx_val/idx_test: expected distinct row indices, found duplicates")
    X = np.concatenate(Xs)[order].astype(np.float32)
    y = np.concatenate(ys)[order].astype(np.int64)
    return X, y
