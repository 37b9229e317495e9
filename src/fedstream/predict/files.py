"""The files of ``fedstream predict``: the run's task, the rows to predict, the predictions CSV."""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedstream.data.table import read_table
from fedstream.data.table_source import as_strings, column_keys, column_positions, label_position, table_paths
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
    score: Score | None = None  # set by predict_run when the rows carry their labels

    @property
    def labels(self) -> list:
        return [self.classes[i] for i in self.proba.argmax(axis=1)]


@dataclass(frozen=True)
class Score:
    """How the predictions of labelled rows fared: ``rows`` labelled, ``errors`` of them wrong.

    >>> Score(rows=4, errors=1).error, Score(rows=4, errors=1).accuracy
    (0.25, 0.75)
    """

    rows: int
    errors: int

    @property
    def error(self) -> float:
        return self.errors / self.rows if self.rows else 0.0

    @property
    def accuracy(self) -> float:
        return 1.0 - self.error


def matching_keys(classes, labels) -> tuple[np.ndarray, np.ndarray]:
    """Keys of the run's classes and of the true labels to match, each decided for its whole column
    as a table's labels are (:func:`~fedstream.data.table_source.column_keys`: ``"1"``, ``1`` and
    ``1.0`` are one class); where one side is text and the other numbers, both as text.

    >>> [k.tolist() for k in matching_keys([0, 1], np.array(["1", "0.0"]))]
    [[0, 1], [1.0, 0.0]]
    >>> [k.tolist() for k in matching_keys(["01", "1", "a"], np.array(["01", "a"]))]
    [['01', '1', 'a'], ['01', 'a']]
    """
    classes, labels = np.asarray(classes), np.asarray(labels)
    class_keys, keys = column_keys(classes), column_keys(labels)
    if (class_keys.dtype.kind == "U") != (keys.dtype.kind == "U"):
        return np.char.strip(as_strings(classes)), np.char.strip(as_strings(labels))
    return class_keys, keys


def score_predictions(predictions: Predictions, labels: np.ndarray, where: str) -> Score:
    """The error of ``predictions`` against the true ``labels`` (raw values, one per row), matched
    to the run's classes (``predictions.classes``: a table's label values, else the class indices
    0..C-1 the run's data gives its labels); a DataError naming ``where`` (file and field) for a
    label that is not one of them."""
    if len(labels) != len(predictions.ids):
        raise DataError(f"{where}: {len(labels)} labels, expected {len(predictions.ids)} (one per row)")
    classes, keys = matching_keys(predictions.classes, labels)
    index = {key: i for i, key in enumerate(classes.tolist())}
    truth = np.array([index.get(key, -1) for key in keys.tolist()], dtype=np.int64)
    if (truth < 0).any():
        r = int(np.flatnonzero(truth < 0)[0])
        value = labels[r].item() if hasattr(labels[r], "item") else labels[r]
        raise DataError(f"{where}: row {r}: label {value!r} is not a class of the run; expected one of "
                        f"{predictions.classes}")
    return Score(rows=len(truth), errors=int(np.count_nonzero(predictions.proba.argmax(axis=1) != truth)))


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
    labels: np.ndarray | None = None  # the true labels, when the file has them
    labels_from: str = ""  # where they were read: "FILE: y", "FILE: column 'segment'"

    def __len__(self) -> int:
        return len(self.ids)


def read_rows(path: Path, *, table: bool = False, id_column: str | None = None,
              label_column: str | None = None) -> Rows:
    """The rows of ``path``: an NPZ file holding ``X`` and optionally ``id`` and ``y`` (the labels)
    (:func:`read_features`); with ``table`` (a run on ``data.name = "table"``) a table file (CSV,
    CSV.gz, NPZ of columns, Parquet), its ids from column ``id_column`` when it has one (else the
    row numbers), its labels from column ``label_column`` (the run's label column,
    :func:`table_label_column`) when it has one."""
    if not table:
        ids, X, labels = read_features(path)
        return Rows(ids, X, labels, f"{path}: y" if labels is not None else "")
    rows = read_table(path)
    ids = rows.columns[rows.names.index(id_column)] if id_column in rows.names else np.arange(rows.n_rows)
    if label_column in rows.names:
        labels = rows.columns[rows.names.index(label_column)]
        return Rows(np.asarray(ids), rows, labels, f"{path}: column {label_column!r} (data.label)")
    return Rows(np.asarray(ids), rows)


def table_label_column(config: dict) -> str:
    """The name of a table run's label column: ``data.label`` by name or 0-based index, else the
    first column that is not the id, as the run found it in its (first) training file."""
    table = read_table(Path(table_paths(config["data.path"])[0]))
    sid = column_positions(table, [config["data.id"]], "data.id")[0] if config.get("data.id") else None
    return table.names[label_position(table, config.get("data.label"), sid)]


def read_features(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(ids, X, y) from an NPZ file: ``X`` (n, ...), the dataset's raw features (standardised by the
    run as its own data is: tabular rows (n, features); images (n, C, H, W) or flattened, 0-255),
    optionally ``id`` (n,) (default: the row numbers) and ``y`` (n,), the rows' labels (else None)."""
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as data:
            if "X" not in data.files:
                raise DataError(f"{path}: expected an array 'X' (rows, features); found {data.files}")
            X = np.asarray(data["X"])
            ids = np.asarray(data["id"]) if "id" in data.files else np.arange(len(X))
            try:
                y = np.asarray(data["y"]) if "y" in data.files else None
            except ValueError as exc:  # an object array (pickled): not read, as X is not
                raise DataError(f"{path}: y cannot be read ({exc}); expected numbers or text, one per "
                                "row") from None
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
    if y is not None and y.shape != (len(X),):
        raise DataError(f"{path}: y has shape {y.shape}, expected ({len(X)},) (one label per row of X)")
    if y is not None and y.dtype.kind == "f" and not np.isfinite(y).all():
        raise DataError(f"{path}: y holds NaN or inf (row {int(np.flatnonzero(~np.isfinite(y))[0])})")
    return ids, X, y


def write_predictions(predictions: Predictions, out: Path) -> Path:
    """``id,prediction,p_<class>...`` one row per sample, written atomically."""
    out = Path(out)
    with atomic_open(out, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "prediction", *(f"p_{c}" for c in predictions.classes)])
        for i, label, row in zip(predictions.ids.tolist(), predictions.labels, predictions.proba):
            writer.writerow([i, label, *(f"{p:.6g}" for p in row)])
    return out
