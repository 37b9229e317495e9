"""Batch CHFL on a user's own table (``data.name = "table"``).

One file: the table is read as the VFL tasks read it (:mod:`fedstream.data.table_source`:
``data.path``, ``data.label``, ``data.id`` (not a feature), ``data.categorical``). Then the paper's
splits apply: ``chfl.common_ratio`` of the columns, drawn by ``chfl.split``, are common to every
client, the rest dealt out as unique columns, and the rows are dealt to the clients (60 / 20 / 20 %
train / validation / test; :mod:`fedstream.chfl.splits`).

One file per client (``data.path = "a.csv;b.csv;c.csv"``): each holds that client's rows, the label
and its own columns. The columns every file holds (by name) are the common ones, the others each
client's unique ones; each client's rows are split 60 / 20 / 20 % at random (seeded) into its own
train, validation and test rows. Categorical columns take the categories of every file.
Every client standardises its columns by its own training rows (:func:`make_client_data`).

Stream mode (``chfl.mode = "stream"``, one file): :func:`run_stream_table` encodes the table with
the categories and statistics of its first rows (the stream's ``stats_rows``), then the stream form
deals the rows to the clients and plays them tick by tick (:mod:`fedstream.chfl.stream`).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from fedstream.chfl.checkpoint import RunFolder
from fedstream.chfl.client import make_client_data
from fedstream.chfl.cohort import LocalCohort
from fedstream.chfl.plan import Experiment
from fedstream.chfl.rounds import BatchRun
from fedstream.chfl.settings import CHFLSettings, check_method
from fedstream.chfl.splits import FRACTIONS, FeatureSplit
from fedstream.chfl.stream import StreamSettings, run_stream_on_table
from fedstream.chfl.trainer import METRIC_COLUMNS, identity, result_of, run_on_table, variants_of
from fedstream.data.table import Table, read_table
from fedstream.data.table_source import TableSource, TableSpec, encode_labels, label_keys, numeric_column
from fedstream.errors import ConfigError, DataError, shown
from fedstream.runs.threads import one_torch_thread

ALL_ROWS = 2**62  # statistics over every row


def run_table(settings: CHFLSettings, config: dict, *, method: str, seed: int, progress, run_dir,
              resume: bool) -> dict:
    """:func:`~fedstream.chfl.trainer.run_on_table` on the table of ``config``; the result also
    names the file (``data``), the label value of each class (``classes``) and the feature columns
    (``columns``: the column indices of ``features`` refer to these)."""
    if ";" in config["data.path"]:
        return run_client_files(settings, config, method=method, seed=seed, progress=progress,
                                run_dir=run_dir, resume=resume)
    spec = TableSpec(config["data.path"], config["data.label"], config["data.id"], config["data.categorical"],
                     None, n_clients=1, stats_rows=ALL_ROWS)
    source = TableSource(spec)
    rows = np.arange(source.n_base)
    out = run_on_table(source.features(rows), source.labels(rows), settings, method=method, seed=seed,
                       progress=progress, n_classes=source.n_classes, run_dir=run_dir, resume=resume)
    return out | {"data": {"name": "table", "path": config["data.path"], "status": "complete"},
                  "classes": list(source.classes), "columns": feature_names(source)}


def run_stream_table(settings: StreamSettings, config: dict, *, method: str, seed: int, run_dir,
                     resume: bool) -> dict:
    """Streaming CHFL (:func:`~fedstream.chfl.stream.run_stream_on_table`) on the table of ``config``
    (one file); the result also names the file, the classes and the feature columns."""
    spec = TableSpec(config["data.path"], config["data.label"], config["data.id"], config["data.categorical"],
                     None, n_clients=1, stats_rows=settings.stats_rows)
    source = TableSource(spec)
    rows = np.arange(source.n_base)
    out = run_stream_on_table(source.features(rows), source.labels(rows), settings, method=method, seed=seed,
                              n_classes=source.n_classes, run_dir=run_dir, resume=resume)
    return out | {"data": {"name": "table", "path": config["data.path"], "status": "complete"},
                  "classes": list(source.classes), "columns": feature_names(source)}


def feature_names(source: TableSource) -> list[str]:
    """The name of each feature column (a categorical column: ``name=category`` per one-hot column)."""
    names = []
    for column in source.client_columns[0]:
        cats = source.categories.get(column)
        names += [column] if cats is None else [f"{column}={c}" for c in cats]
    return names


def _label_column(table: Table, config: dict) -> int:
    ref = config["data.label"] or next(n for n in table.names if n != config["data.id"])
    if ref not in table.names and not (ref.isdigit() and int(ref) < len(table.names)):
        raise DataError(f"data.label: {table.path}: column {ref!r}: no such column; the file's columns are "
                        f"{', '.join(table.names)}")
    return table.index(ref)


def client_tables(config: dict, n_clients: int):
    """Every client file's features over the union of columns (X, NaN where a file lacks a column),
    labels, rows per file, the column names, the common and unique column indices, the classes and
    the categories of each categorical column."""
    paths = [p.strip() for p in config["data.path"].split(";") if p.strip()]
    if len(paths) != n_clients:
        raise ConfigError(f"data.path names {len(paths)} client files but chfl.clients = {n_clients}")
    tables = [read_table(Path(p)) for p in paths]
    labels = [_label_column(t, config) for t in tables]
    own = [[n for j, n in enumerate(t.names) if j != lab and n != config["data.id"]]
           for t, lab in zip(tables, labels)]
    union = list(dict.fromkeys(n for names in own for n in names))
    known = np.unique(np.concatenate([label_keys(t, j) for t, j in zip(tables, labels)]))
    if len(known) < 2:
        raise DataError(f"data.label: expected at least two classes over the files, found only "
                        f"{shown(known[0])}")
    categorical = {s.strip() for s in (config["data.categorical"] or "").split(",") if s.strip()}
    cats = {c: np.unique(np.concatenate([t.columns[t.names.index(c)].astype(str) for t in tables
                                         if c in t.names])) for c in categorical if c in union}
    names = [n for n in union for n in ([n] if n not in cats else [f"{n}={c}" for c in cats[n]])]
    X = np.full((sum(t.n_rows for t in tables), len(names)), np.nan)
    ys, rows, start = [], [], 0
    for t, lab, cols in zip(tables, labels, own):
        block = slice(start, start + t.n_rows)
        for name in cols:
            j, at = t.names.index(name), names.index(name if name not in cats else f"{name}={cats[name][0]}")
            if name in cats:
                X[block, at:at + len(cats[name])] = t.columns[j].astype(str)[:, None] == cats[name][None, :]
            else:
                X[block, at] = numeric_column(t, j)
        ys.append(encode_labels(t, lab, known)[0])
        rows.append(np.arange(block.start, block.stop))
        start = block.stop
    held = [{c for n in cols for c in ([n] if n not in cats else [f"{n}={v}" for v in cats[n]])}
            for cols in own]
    common = np.array([i for i, n in enumerate(names) if all(n in h for h in held)], dtype=np.int64)
    unique = tuple(np.array([i for i, n in enumerate(names) if n in h and i not in common], dtype=np.int64)
                   for h in held)
    classes = [k.item() for k in known]
    return X, np.concatenate(ys), rows, names, FeatureSplit(common, unique), classes, cats


def client_files_experiment(settings: CHFLSettings, config: dict, *, method: str,
                            seed: int) -> tuple[Experiment, list[str], list, dict[str, np.ndarray]]:
    """The experiment of one file per client (module doc): each client's own rows, split 60 / 20 / 20 %,
    through its own columns; with the column names, the classes and the categories."""
    check_method(method)
    X, y, rows, names, features, classes, cats = client_tables(config, settings.clients)
    if len(features.common) == 0:
        raise DataError("data.path: the client files share no column; CHFL needs columns every client holds")
    data = []
    for k, r in enumerate(rows):
        n_train, n_val = round(FRACTIONS[0] * len(r)), round(FRACTIONS[1] * len(r))
        if n_train < 1 or n_val < 1 or len(r) - n_train - n_val < 1:
            raise DataError(f"{config['data.path'].split(';')[k].strip()}: {len(r)} rows: too few for a "
                            "train, a validation and a test row")
        perm = r[np.random.default_rng([seed, 3, k]).permutation(len(r))]
        train, val, test = np.split(perm, [n_train, n_train + n_val])
        data.append(make_client_data(X, y, features.common, features.unique[k], np.sort(train), np.sort(val),
                                     np.sort(test)))
    return Experiment(settings, method, seed, features, data, len(classes), len(y)), names, classes, cats


def encode_client_rows(raw: Table, names: list[str], cats: dict[str, np.ndarray]) -> np.ndarray:
    """float64 (n, len(names)): a client's new rows (its file's columns by name) in the run's feature
    space, categorical columns one-hot over the run's categories; NaN where the file has no column."""
    X = np.full((raw.n_rows, len(names)), np.nan)
    for j, name in enumerate(raw.names):
        if name in cats:
            at = names.index(f"{name}={cats[name][0]}")
            X[:, at:at + len(cats[name])] = raw.columns[j].astype(str)[:, None] == cats[name][None, :]
        elif name in names:
            X[:, names.index(name)] = numeric_column(raw, j)
    return X


def run_client_files(settings: CHFLSettings, config: dict, *, method: str, seed: int, progress, run_dir,
                     resume: bool) -> dict:
    """Batch CHFL with one file per client (module doc): each client trains, validates and is
    tested on its own rows, through its own columns."""
    t0 = time.perf_counter()
    with one_torch_thread():
        ex, names, classes, _ = client_files_experiment(settings, config, method=method, seed=seed)
        folder = None if run_dir is None else RunFolder(
            run_dir, identity(settings, method, seed, ex.n_rows, ex.n_classes), METRIC_COLUMNS, resume=resume)
        run = BatchRun(ex.plan, LocalCohort(ex), folder, progress)
        run.run()
        variants = run.test_choices(variants_of(method, settings))
    return result_of(run, variants, n_rows=ex.n_rows, features=ex.features) | {
        "wall_seconds": run.elapsed + time.perf_counter() - t0, "resumed": run.elapsed > 0,
        "classes": classes, "columns": names,
        "data": {"name": "table", "path": config["data.path"], "status": "complete"}}
