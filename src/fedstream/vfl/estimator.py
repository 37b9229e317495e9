"""Batch VFL as a scikit-learn classifier: :class:`VFLClassifier` (``fit`` / ``predict`` on arrays).

The same parties and trainer as ``fedstream run`` with ``task = "vfl"`` on a table: the columns are
encoded as a table file's are (:class:`~fedstream.data.table_source.TableSource`: numeric columns
standardised by the training rows, ``categorical`` ones one-hot), each client's MLP bottom model
reads its own columns (``partition``), and :func:`~fedstream.vfl.trainer.train_on` plays the
run's epochs. A prediction is the parties' own: each client embeds its columns of the rows and
sends them up, the server scores the embeddings (:func:`parties_proba`, as ``fedstream predict``).
"""

from __future__ import annotations

import copy

import numpy as np
import torch

from fedstream.data.table import Table
from fedstream.data.table_source import TableSource, TableSpec
from fedstream.errors import ConfigError, FedstreamError
from fedstream.estimators import ClassifierBase, as_value_error, label_column
from fedstream.transport import CompressionSpec
from fedstream.vfl.protocol import Batch, LocalCohort, play_scores
from fedstream.vfl.settings import BatchVFLSettings
from fedstream.vfl.table_data import ALL_ROWS, VerticalTable
from fedstream.vfl.trainer import batches, separate_ledger, train_on

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
    blocks), ``categorical`` (columns to one-hot), ``hidden``, ``embedding``, ``epochs``,
    ``batch_size``, ``lr``, ``compression`` (e.g. ``{"up": "topk", "down": "quant-huffman"}``),
    ``device`` (``auto`` | ``cpu`` | ``cuda``), ``seed``, ``client_model`` / ``server_model`` (your own
    bottom / top model: a factory callable or ``"module:function"`` path, called with the keyword
    arguments of :mod:`fedstream.own_models`; a client's ``input_shape`` is ``(its columns,)``). After
    ``fit``: ``classes_``, ``n_features_in_``, ``history_`` (a row per epoch: loss, bytes), ``bytes_``,
    ``client_columns_``.

    >>> import numpy as np
    >>> from fedstream.vfl import VFLClassifier
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(300, 6))
    >>> y = np.where(X[:, 0] + X[:, 4] > 0, "yes", "no")
    >>> clf = VFLClassifier(partition=[[0, 1, 2], [3, 4, 5]], hidden=16, epochs=8, batch_size=32, lr=0.1)
    >>> clf.fit(X[:240], y[:240]) is clf
    True
    >>> clf.classes_.tolist(), clf.n_features_in_, clf.client_columns_
    (['no', 'yes'], 6, [['0', '1', '2'], ['3', '4', '5']])
    >>> clf.predict(X[240:243]).shape, clf.predict_proba(X[240:243]).shape
    ((3,), (3, 2))
    >>> clf.score(X[240:], y[240:]) > 0.85
    True
    """

    def __init__(self, *, partition=2, categorical=None, hidden: int = 256, embedding: int | None = None,
                 epochs: int = 10, batch_size: int = 100, lr: float | None = None, compression=None,
                 device: str = "auto", seed: int = 0, client_model=None, server_model=None):
        self.partition = partition
        self.categorical = categorical
        self.hidden = hidden
        self.embedding = embedding
        self.epochs = epochs
        self.batch_size = batch_size
        self.lr = lr
        self.compression = compression
        self.device = device
        self.seed = seed
        self.client_model = client_model
        self.server_model = server_model

    def fit(self, X, y) -> VFLClassifier:
        """Train on ``X`` (n, d) and labels ``y`` (n,): ``epochs`` epochs of the parties' protocol."""
        table = self._table(X, fitting=True)
        y = label_column(y, table.n_rows)
        try:
            text, n_clients = partition_text(self.partition, table)
            categorical = self.categorical if self.categorical is None or isinstance(self.categorical, str) \
                else ",".join(str(c) for c in self.categorical)
            spec = TableSpec("<X>", LABEL, None, categorical, text, n_clients, ALL_ROWS)
            source = TableSource(spec, table=Table(table.path, [*table.names, LABEL], [*table.columns, y]))
            settings = BatchVFLSettings(
                dataset="table", clients=n_clients, epochs=self.epochs, batch_size=self.batch_size,
                lr=self.lr, embedding=self.embedding, hidden=self.hidden, device=self.device,
                compression=CompressionSpec(**(self.compression or {})), table=(("data.path", "<X>"),),
                client_model=self.client_model, server_model=self.server_model,
            ).resolved()
        except FedstreamError as exc:
            raise as_value_error(exc) from None
        rows = np.arange(source.n_base)
        x, labels = source.features(rows), source.labels(rows)
        # evaluated on its own training rows each epoch (history_'s accuracy); training is unchanged
        data = VerticalTable("table", x, labels, x, labels, source.blocks, source.n_classes, source.classes,
                             source.client_columns, source)
        try:
            trained = train_on(settings, data, seed=self.seed)
        except ConfigError as exc:  # client_model / server_model that do not fit
            raise as_value_error(exc) from None
        self._settings, self._data, self._parties = settings, data, trained
        self.classes_ = np.array(source.classes)
        self.client_columns_ = source.client_columns
        self.history_ = trained.summary["per_epoch"]
        self.bytes_ = trained.summary["bytes"]
        return self

    def predict_proba(self, X) -> np.ndarray:
        """Class probabilities (n, len(classes_)) of the rows of ``X``, computed by the parties."""
        self._check_fitted()
        try:
            rows = self._data.source.standardise(self._table(X))
        except FedstreamError as exc:
            raise as_value_error(exc) from None
        p = self._parties
        proba, self.inference_bytes_ = parties_proba(
            self._settings, lambda b: self._data.client_inputs(rows[b.rows]), len(rows), p.clients, p.server,
            p.transport, first_id=len(self._data.train_y) + len(self._data.test_y))
        return np.zeros((0, len(self.classes_))) if proba is None else proba
