"""The estimators' defaults against scikit-learn's ``MLPClassifier`` on its bundled small tables
(issue 32: defaults that learn a small table out of the box).

Each of ``load_digits``, ``load_breast_cancer``, ``load_wine`` and ``load_iris`` is split 75 / 25
by ``train_test_split(X, y, random_state=0)``; on the same split, with default settings:

* ``MLPClassifier(random_state=0)``, the reference (its defaults: Adam, 100 hidden units, at most
  200 epochs, raw features as the user gives them);
* ``VFLClassifier()``: two clients, each the first or second half of the columns;
* ``CHFLClassifier(clients=2)``: two clients, each with the common columns and its own, 85 / 10 / 5
  % of the rows each for training, model choice and the run's own test inside ``fit``; scored by
  the mean of both clients' probabilities (``combine="mean"``, ``predict``'s default).

Reported: test accuracy and wall seconds of ``fit`` + ``score`` for each, all with BLAS on one
thread (fedstream's parties run torch on one thread); the target is the VFL estimator within 2
points of ``MLPClassifier``.
"""

from __future__ import annotations

import time
import warnings

TABLES = ("digits", "breast_cancer", "wine", "iris")
MODELS = ("MLPClassifier", "VFLClassifier", "CHFLClassifier")
TARGET = 0.02  # VFLClassifier() within 2 points of MLPClassifier()


def make_model(model: str, seed: int = 0):
    """One of :data:`MODELS` with its default settings (``seed``: ``random_state`` / ``seed``)."""
    if model == "MLPClassifier":
        from sklearn.neural_network import MLPClassifier

        return MLPClassifier(random_state=seed)
    if model == "VFLClassifier":
        from fedstream.vfl import VFLClassifier

        return VFLClassifier(seed=seed)
    if model == "CHFLClassifier":
        from fedstream.chfl import CHFLClassifier

        return CHFLClassifier(clients=2, seed=seed)
    raise ValueError(f"model {model!r}: expected one of {', '.join(MODELS)}")


def run(tables=TABLES, models=MODELS, seed: int = 0) -> list[dict]:
    """A row per (table, model): ``table``, ``model``, ``train_rows``, ``test_rows``, ``features``,
    ``accuracy``, ``seconds``."""
    from sklearn import datasets
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.model_selection import train_test_split
    from threadpoolctl import threadpool_limits

    rows = []
    for table in tables:
        X, y = getattr(datasets, f"load_{table}")(return_X_y=True)
        X_train, X_test, y_train, y_test = train_test_split(X, y, random_state=0)
        for model in models:
            tic = time.perf_counter()
            with warnings.catch_warnings(), threadpool_limits(1):  # MLPClassifier's 200 epochs on digits
                warnings.simplefilter("ignore", ConvergenceWarning)
                accuracy = make_model(model, seed).fit(X_train, y_train).score(X_test, y_test)
            rows.append({"table": table, "model": model, "train_rows": len(y_train), "test_rows": len(y_test),
                         "features": X.shape[1], "accuracy": float(accuracy),
                         "seconds": time.perf_counter() - tic})
    return rows


def markdown(rows: list[dict]) -> str:
    """The table: a row per data set, accuracy (seconds) per model, and each fedstream model minus MLP."""
    models = list(dict.fromkeys(r["model"] for r in rows))
    head = "| table | rows (train / test) | features | " + " | ".join(models) + " |"
    diffs = [m for m in ("VFLClassifier", "CHFLClassifier") if "MLPClassifier" in models and m in models]
    head += "".join(f" {m.removesuffix('Classifier')} - MLP |" for m in diffs)
    out = [head, "|---|---:|---:|" + "---:|" * (len(models) + len(diffs))]
    for table in dict.fromkeys(r["table"] for r in rows):
        cells = {r["model"]: r for r in rows if r["table"] == table}
        first = next(iter(cells.values()))
        scores = [f"{cells[m]['accuracy']:.3f} ({cells[m]['seconds']:.1f} s)" for m in models]
        line = f"| {table} | {first['train_rows']} / {first['test_rows']} | {first['features']} | " \
            + " | ".join(scores) + " |"
        for m in diffs:
            points = 100 * (cells[m]["accuracy"] - cells["MLPClassifier"]["accuracy"])
            line += f" {points:+.1f} |"
        out.append(line)
    return "\n".join(out)
