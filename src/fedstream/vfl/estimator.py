"""Batch VFL as a scikit-learn classifier: :class:`VFLClassifier` (``fit`` / ``predict`` on arrays).

The same parties and trainer as ``fedstream run`` with ``task = "vfl"`` on a table: the columns are
encoded as a table file's are (:class:`~fedstream.data.table_source.TableSource`: numeric columns
standardised by the training rows, ``categorical`` ones one-hot), each client's MLP bottom model
reads its own columns (``partition``), and :func:`~fedstream.vfl.trainer.train_on` plays the
run's epochs. The estimator's defaults are those of scikit-learn's ``MLPClassifier`` (Adam at
0.001, 100 hidden units, batches of up to 200, at most 200 epochs, stopping when 10 epochs have
not lowered the training loss by 1e-4; ``early_stopping=True`` holds out a validation fraction
instead); ``optimizer="sgd"`` with a fixed number of epochs is ``fedstream run``'s (the paper's)
training. A prediction is the parties' own: each client embeds its columns of the rows and
sends them up, the server scores the embeddings (:func:`parties_proba`, as ``fedstream predict``).
"""

from __future__ import annotations

import copy

import numpy as np
import torch

from fedstream.data.table import Table
from fedstream.data.table_source import TableSource, TableSpec
from fedstream.errors import ConfigError, FedstreamError
from fedstream.estimators import ClassifierBase, as_value_error
from fedstream.transport import CompressionSpec
from fedstream.vfl.protocol import Batch, LocalCohort, play_scores
from fedstream.vfl.settings import BatchVFLSettings
from fedstream.vfl.table_data import ALL_ROWS, VerticalTable
from fedstream.vfl.trainer import batches, nonfinite_parties, separate_ledger, train_on

LABEL = "\x00label"  # the label's column in the estimator's table (no user column is called so)


def parties_proba(settings: BatchVFLSettings, inputs, n: int, clients, server, transport, *, first_id: int
                  ) -> tuple[np.ndarray, dict]:
    """float64 (n, classes): every client embeds its input of the rows (``inputs(batch)``: one tensor
    per client), the server scores the embeddings, softmax; and the ledger of what went up.

    The rows are new samples to the links: row j is sample id ``first_id + j`` (pass an id past every
    one the training held, n_train + n_test), so a cached or error-feedback link starts each row from
    an empty cache row and a zero residual, and the embeddings go through a copy of ``transport`` so
    its fitted state is left as it was (predicting twice gives the same answer)."""
    cohort = LocalCohort(clients, copy.deepcopy(transport), inputs)
    plan = [Batch(j, "test", idx, first_id + idx) for j, idx in enumerate(batches(n, settings.batch_size))]
    with separate_ledger(cohort) as ledger, torch.no_grad():
        logits = [s.detach() for s in play_scores(plan, cohort, server)]
    proba = torch.softmax(torch.cat(logits), dim=1).double().numpy() if logits else None
    return proba, ledger.summary()


def partition_text(partition, table: Table) -> tuple[str | None, int]:
    """``partition`` (an int: that many equal blocks; a list of each client's columns; a dict client ->
    columns; columns by name or position) as ``vfl.partition`` text, and the number of clients."""
    if isinstance(partition, (int, np.integer)) and not isinstance(partition, bool):
        return None, int(partition)
    groups = list(partition.values()) if isinstance(partition, dict) else list(partition)
    if not groups or any(isinstance(g, (str, bytes)) or not len(g) for g in groups):
        raise ValueError(f"partition = {partition!r}: expected each client's columns, e.g. [[0, 1], [2, 3]] "
                         "or {'bank': ['income'], 'shop': ['visits']}, or a number of equal blocks")
    n = len(table.names)  # X's own columns, before the estimator adds its label column
    for c in (str(c) for g in groups for c in g):
        if c not in table.names and not (c.strip().isdigit() and int(c) < n):
            found = f"X has only {n} columns (0..{n - 1})" if c.strip().isdigit() else \
                f"X's columns are {', '.join(table.names)}"
            raise ValueError(f"partition = {partition!r}: column {c!r} is not a column of X; {found}")
    return ";".join(",".join(str(c) for c in g) for g in groups), len(groups)


class VFLClassifier(ClassifierBase):
    """Batch vertical FL as a scikit-learn classifier: M clients each hold some columns and an MLP
    bottom model, the server holds the labels and the top model (``fedstream run`` with ``task =
    "vfl"``, ``data.name = "table"``, the same trainer).

    Parameters (stored as given; see the ``vfl`` config keys): ``partition`` (each client's columns:
    a list or a dict client -> columns, by name or position; an int: that many equal contiguous
    blocks), ``categorical`` (columns to one-hot), ``hidden``, ``embedding``, ``epochs`` (at most
    this many), ``batch_size`` (rows per step, at most the rows there are), ``optimizer``
    (``adam`` | ``sgd``: ``train.optimizer``), ``lr`` (None: 0.001 for Adam, the paper's 0.01 for
    SGD), ``early_stopping`` (hold out ``validation_fraction`` of the rows, stratified, stop when
    their accuracy has not improved by ``tol`` for ``n_iter_no_change`` epochs and keep the best
    epoch's models; False: train on every row and stop when the training loss has not improved by
    ``tol`` for ``n_iter_no_change`` epochs, as ``MLPClassifier`` does), ``compression`` (e.g.
    ``{"up": "topk", "down": "quant-huffman"}``), ``device`` (``auto`` | ``cpu`` | ``cuda``),
    ``seed``, ``client_model`` / ``server_model`` (your own bottom / top model: a factory
    callable or ``"module:function"`` path, called with the keyword arguments of
    :mod:`fedstream.own_models`; a client's ``input_shape`` is ``(its columns,)``). After ``fit``:
    ``classes_``, ``n_features_in_``, ``history_`` (a row per epoch: loss, bytes, accuracy on the
    validation rows, or on the training rows without early stopping),
    ``n_iter_`` (epochs played), ``best_validation_score_`` (with early stopping), ``bytes_``,
    ``client_columns_``; :meth:`inference_bytes` counts what a prediction sends.

    >>> import numpy as np
    >>> from fedstream.vfl import VFLClassifier
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(300, 6))
    >>> y = np.where(X[:, 0] + X[:, 4] > 0, "yes", "no")
    >>> clf = VFLClassifier(partition=[[0, 1, 2], [3, 4, 5]], hidden=16, epochs=30)
    >>> clf.fit(X[:240], y[:240]) is clf
    True
    >>> clf.classes_.tolist(), clf.n_features_in_, clf.client_columns_
    (['no', 'yes'], 6, [['0', '1', '2'], ['3', '4', '5']])
    >>> clf.predict(X[240:243]).shape, clf.predict_proba(X[240:243]).shape
    ((3,), (3, 2))
    >>> clf.score(X[240:], y[240:]) > 0.85
    True
    """

    def __init__(self, *, partition=2, categorical=None, hidden: int = 100, embedding: int | None = None,
                 epochs: int = 200, batch_size: int = 200, optimizer: str = "adam", lr: float | None = None,
                 early_stopping: bool = False, validation_fraction: float = 0.1, n_iter_no_change: int = 10,
                 tol: float = 1e-4, compression=None, device: str = "auto", seed: int = 0,
                 client_model=None, server_model=None):
        self.partition = partition
        self.categorical = categorical
        self.hidden = hidden
        self.embedding = embedding
        self.epochs = epochs
        self.batch_size = batch_size
        self.optimizer = optimizer
        self.lr = lr
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.n_iter_no_change = n_iter_no_change
        self.tol = tol
        self.compression = compression
        self.device = device
        self.seed = seed
        self.client_model = client_model
        self.server_model = server_model

    def fit(self, X, y) -> VFLClassifier:
        """Train on ``X`` (n, d) and labels ``y`` (n,): at most ``epochs`` epochs of the parties' protocol."""
        table, y = self._table(X, y, fitting=True)
        self._check_stopping()
        try:
            text, n_clients = partition_text(self.partition, table)
            if len(table.names) < n_clients:
                raise ValueError(f"X has {len(table.names)} feature(s) (n_features = {len(table.names)}), "
                                 f"but partition = {self.partition!r} needs at least one per client")
            categorical = self.categorical if self.categorical is None or isinstance(self.categorical, str) \
                else ",".join(str(c) for c in self.categorical)
            spec = TableSpec("<X>", LABEL, None, categorical, text, n_clients, ALL_ROWS)
            source = TableSource(spec, table=Table(table.path, [*table.names, LABEL], [*table.columns, y]))
            lr = self.lr if self.lr is not None else 0.001 if self.optimizer == "adam" else None
            batch = self.batch_size
            if isinstance(batch, int) and not isinstance(batch, bool):  # else refused by the settings
                batch = min(batch, table.n_rows)
            settings = BatchVFLSettings(
                dataset="table", clients=n_clients, epochs=self.epochs, batch_size=batch, lr=lr,
                optimizer=self.optimizer, embedding=self.embedding, hidden=self.hidden, device=self.device,
                compression=CompressionSpec(**(self.compression or {})), table=(("data.path", "<X>"),),
                client_model=self.client_model, server_model=self.server_model,
            ).resolved()
        except FedstreamError as exc:
            raise as_value_error(exc) from None
        rows = np.arange(source.n_base)
        x, labels = source.features(rows), source.labels(rows)
        fit_rows, check_rows = validation_split(labels, self.validation_fraction if self.early_stopping
                                                else 0.0, self.seed)
        if check_rows.size:  # early stopping: evaluated on the held-out rows each epoch
            test_x, test_y = x[check_rows], labels[check_rows]
            x, labels = x[fit_rows], labels[fit_rows]
        else:  # evaluated on its own training rows each epoch (history_'s accuracy); training is unchanged
            test_x, test_y = x, labels
        data = VerticalTable("table", x, labels, test_x, test_y, source.blocks, source.n_classes,
                             source.classes, source.client_columns, source)
        key = "test_accuracy" if check_rows.size else "train_loss"
        stopping = Stopping(key, self.tol, self.n_iter_no_change)
        try:
            trained = train_on(settings, data, seed=self.seed, until=stopping)
        except ConfigError as exc:  # client_model / server_model that do not fit
            raise as_value_error(exc) from None
        if bad := nonfinite_parties(trained.clients, trained.server):
            raise ValueError(f"training diverged: the model of {', '.join(bad)} holds NaN or inf "
                             f"(lr = {settings.lr}; try a smaller one)")
        stopping.restore_best(trained.clients, trained.server)
        self._settings, self._data, self._parties = settings, data, trained
        self.classes_ = np.array(source.classes)
        self.client_columns_ = source.client_columns
        self.history_ = trained.summary["per_epoch"]
        self.n_iter_ = len(self.history_)
        if check_rows.size:
            self.best_validation_score_ = stopping.best
        elif hasattr(self, "best_validation_score_"):
            del self.best_validation_score_
        self.bytes_ = trained.summary["bytes"]
        return self

    def _check_stopping(self) -> None:
        """The early-stopping parameters (the others are checked by the settings, naming the key)."""
        if not isinstance(self.early_stopping, (bool, np.bool_)):
            raise ValueError(f"early_stopping = {self.early_stopping!r}: expected True or False")
        f = self.validation_fraction
        if isinstance(f, bool) or not isinstance(f, (int, float)) or not 0 < f < 1:
            raise ValueError(f"validation_fraction = {f!r}: expected a number in (0, 1)")
        n = self.n_iter_no_change
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"n_iter_no_change = {n!r}: expected an integer >= 1")
        if isinstance(self.tol, bool) or not isinstance(self.tol, (int, float)) or self.tol < 0:
            raise ValueError(f"tol = {self.tol!r}: expected a number >= 0")

    def predict_proba(self, X) -> np.ndarray:
        """Class probabilities (n, len(classes_)) of the rows of ``X``, computed by the parties."""
        proba, _ = self._play(X)
        return np.zeros((0, len(self.classes_))) if proba is None else proba

    def inference_bytes(self, X) -> dict:
        """The payload bytes of predicting the rows of ``X`` (each client's embeddings up; nothing
        comes down), as the transport's ledger counts them: ``{"up", "down", "total", ...}``."""
        return self._play(X)[1]

    def _play(self, X) -> tuple[np.ndarray | None, dict]:
        """The parties' prediction of the rows of ``X``: probabilities and the ledger's summary."""
        self._check_fitted()
        try:
            rows = self._data.source.standardise(self._table(X))
        except FedstreamError as exc:
            raise as_value_error(exc) from None
        p = self._parties
        return parties_proba(self._settings, lambda b: self._data.client_inputs(rows[b.rows]), len(rows),
                             p.clients, p.server, p.transport,
                             first_id=len(self._data.train_y) + len(self._data.test_y))


def validation_split(labels: np.ndarray, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(training rows, validation rows), sorted: ``fraction`` of each class's rows, drawn from
    ``seed``, held out (rounded; a class keeps at least one training row); none when fraction is 0."""
    if fraction <= 0:
        return np.arange(len(labels)), np.zeros(0, dtype=np.int64)
    rng = np.random.default_rng(seed)
    held = []
    for c in np.unique(labels):
        rows = rng.permutation(np.flatnonzero(labels == c))
        held.append(rows[:min(int(round(fraction * len(rows))), len(rows) - 1)])
    held = np.sort(np.concatenate(held))
    return np.setdiff1d(np.arange(len(labels)), held), held


class Stopping:
    """Early stopping after each epoch (:func:`~fedstream.vfl.trainer.train_on`'s ``until``), as
    scikit-learn's ``MLPClassifier`` stops: on ``key`` of the epoch's row, ``test_accuracy`` (higher
    is better; the best epoch's models are kept and :meth:`restore_best` puts them back) or
    ``train_loss`` (lower is better; the last models are kept); stop when ``patience`` epochs in a
    row have not improved on the best by ``tol``."""

    def __init__(self, key: str, tol: float, patience: int):
        self.key, self.tol, self.patience = key, tol, patience
        self.sign = 1.0 if key == "test_accuracy" else -1.0
        self.best = None
        self.stale = 0
        self._weights = None

    def __call__(self, rows: list[dict], clients, server) -> bool:
        value = rows[-1][self.key]
        if value != value:  # an epoch without a training row (NaN loss): nothing to judge
            return False
        score = self.sign * value
        self.stale = 0 if self.best is None or score > self.sign * self.best + self.tol else self.stale + 1
        if self.best is None or score > self.sign * self.best:
            self.best = value
            if self.key == "test_accuracy":
                self._weights = [copy.deepcopy(p.model.state_dict()) for p in (*clients, server)]
        return self.stale >= self.patience

    def restore_best(self, clients, server) -> None:
        """Put the best epoch's models back (``test_accuracy`` only)."""
        if self._weights is not None:
            for party, weights in zip((*clients, server), self._weights):
                party.model.load_state_dict(weights)
