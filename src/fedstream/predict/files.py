"""The files of ``fedstream predict``: the run's task, the rows to predict, the predictions CSV."""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedstream.data.table import read_table
from fedstream.errors import DataError, FedstreamError
from fedstream.runs.files import atomic_open


@dataclass
class Predictions:
    """``ids`` (n,), ``classes`` (C labels, the server's output order), ``proba`` (n, C), and for
    each party what it computed (``parties``: name -> text).

    >>> p = Predictions(np.array([7, 8]), ["no", "yes"], np.array([[0.9, 0.1], [0.2, 0.8]]), {})
    >>> p.labels
    ['no', 'yes']
    """

    ids: np.ndarray
    classes: list
    proba: np.ndarray
    parties: dict[str, str]

    @property
    def labels(self) -> list:
        return [self.classes[i] for i in self.proba.argmax(axis=1)]


def run_summary(run_dir: Path) -> dict:
    """The summary.json of a finished run; FedstreamError naming the folder otherwise."""
    path = Path(run_dir) / "summary.json"
    try:
        summary = json.loads(path.read_text())
    except FileNotFoundError:
        raise FedstreamError(f"{path} does not exist: {run_dir} is not a finished run") from None
    except (OSError, ValueError) as exc:
        raise FedstreamError(f"{path}: cannot be read ({exc})") from None
    if summary.get("diverged"):
        raise FedstreamError(f"{run_dir}: the run diverged; it has no model to predict with")
    return summary


def class_names(summary: dict, n_classes: int) -> list:
    """The run's class labels, in the server's output order: ``summary["classes"]`` where a run
    lists them (a table with its own labels), else 0..n_classes-1."""
    classes = summary.get("classes")
    if isinstance(classes, list) and len(classes) == n_classes:
        return list(classes)
    return list(range(n_classes))


def run_task(run_dir: Path) -> str:
    return run_summary(run_dir)["config"]["task"]


@dataclass
class Rows:
    """The rows to predict: ``ids`` (n,) and the raw rows, ``raw``: an array (n, ...) read from an
    NPZ file's ``X``, or a :class:`~fedstream.data.table.Table` (a run on ``data.name = "table"``:
    the file's columns by name). :meth:`fedstream.data.sources.Source.standardise` encodes them."""

    ids: np.ndarray
    raw: object

    def __len__(self) -> int:
        return len(self.ids)


def read_rows(path: Path, *, table: bool = False, id_column: str | None = None) -> Rows:
    """The rows of ``path``: an NPZ file holding ``X`` and optionally ``id`` (:func:`read_features`);
    with ``table`` (a run on ``data.name = "table"``) a table file (CSV, CSV.gz, NPZ of columns,
    Parquet), its ids from column ``id_column`` when it has one (else the row numbers)."""
    if not table:
        return Rows(*read_features(path))
    rows = read_table(path)
    ids = rows.columns[rows.names.index(id_column)] if id_column in rows.names else np.arange(rows.n_rows)
    return Rows(np.asarray(ids), rows)


def read_features(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(ids, X) from an NPZ file: ``X`` (n, ...), the dataset's raw features (standardised by the
    run as its own data is: tabular rows (n, features); images (n, C, H, W) or flattened, 0-255),
    and optionally ``id`` (n,) (default: the row numbers)."""
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as data:
            if "X" not in data.files:
                raise DataError(f"{path}: expected an array 'X' (rows, features); found {data.files}")
            X = np.asarray(data["X"])
            ids = np.asarray(data["id"]) if "id" in data.files else np.arange(len(X))
    except DataError:
        raise
    except Exception as exc:  # noqa: BLE001 - np.load of a foreign or damaged file raises many kinds
        raise DataError(f"{path}: not a readable NPZ file ({type(exc).__name__}: {exc})") from None
    if X.ndim < 2 or not np.issubdtype(X.dtype, np.number):
        raise DataError(f"{path}: X must be a numeric array of rows (n, ...), found {X.dtype} {X.shape}")
    if ids.shape != (len(X),):
        raise DataError(f"{path}: id has shape {ids.shape}, expected ({len(X)},) (one per row of X)")
    if not np.isfinite(X).all():
        row = int(np.argwhere(~np.isfinite(X))[0][0])
        raise DataError(f"{path}: X holds NaN or inf (row {row})")
    return ids, X


def write_predictions(predictions: Predictions, out: Path) -> Path:
    """``id,prediction,p_<class>...`` one row per sample, written atomically."""
    out = Path(out)
    with atomic_open(out, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "prediction", *(f"p_{c}" for c in predictions.classes)])
        for i, label, row in zip(predictions.ids.tolist(), predictions.labels, predictions.proba):
            writer.writerow([i, label, *(f"{p:.6g}" for p in row)])
    return out
