"""Batch CHFL as a scikit-learn classifier: :class:`CHFLClassifier` (``fit`` / ``predict`` on arrays).

The same run as ``fedstream run`` with ``task = "chfl"`` on a table: the columns are encoded as a
table file's are (:class:`~fedstream.data.table_source.TableSource`), the paper's splits deal the
columns (common / each client's own) and the rows (60 / 20 / 20 %) to the clients, and
:func:`~fedstream.chfl.trainer.train_table` plays the FedAvg federations. Each client keeps the model
its validation rows chose; a prediction is one client's (``predict(X, client=k)``, default 0), on
its own columns of the rows (:class:`~fedstream.chfl.final.ChosenModels`).
"""

from __future__ import annotations

import numpy as np

from fedstream.chfl.final import ChosenModels
from fedstream.chfl.settings import CHFLSettings
from fedstream.chfl.table_data import ALL_ROWS
from fedstream.chfl.trainer import train_table
from fedstream.data.table import Table
from fedstream.data.table_source import TableSource, TableSpec
from fedstream.errors import FedstreamError
from fedstream.estimators import ClassifierBase, as_value_error

LABEL = "\x00label"  # the label's column in the estimator's table (no user column is called so)


def _as_list(value):
    """A list parameter as the settings take it: a scalar (``hidden=16``, ``lrs=0.01``) is a list of
    one; a sequence as a tuple; anything else as given, for the settings to refuse naming the field."""
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
        return (value,)
    return tuple(value) if isinstance(value, (list, tuple, np.ndarray)) else value


class Standardise:
    """New raw rows in the run's feature space, as ``source`` encodes its own (the same for every
    client: :class:`~fedstream.chfl.final.ChosenModels`' ``encode``); picklable, unlike a lambda."""

    def __init__(self, source: TableSource):
        self.source = source

    def __call__(self, raw, k: int) -> np.ndarray:
        return self.source.standardise(raw)


class CHFLClassifier(ClassifierBase):
    """Continual horizontal FL (batch) as a scikit-learn classifier: ``clients`` clients each hold
    some rows, the common columns and their own; ``fit`` runs the federation, each client keeps the
    model its validation rows choose (``fedstream run`` with ``task = "chfl"``, the same trainer).

    Parameters (stored as given; see the ``chfl.*`` config keys): ``clients``, ``common_ratio``,
    ``split``, ``hidden``, ``rounds``, ``local_epochs``, ``batch_size``, ``lrs``, ``mus`` (``hidden``,
    ``lrs``, ``mus``: a list, or one value for a list of one), ``method``,
    ``categorical`` (columns to one-hot), ``device`` (``auto`` | ``cpu`` | ``cuda``), ``seed``. After
    ``fit``: ``classes_``, ``n_features_in_``, ``result_`` (the run's summary figures: ``test_acc``,
    ``test_acc_per_client``, ``bytes``, the feature split), ``choices_`` (each client's chosen
    candidate, learning rate and round).

    >>> import numpy as np
    >>> from fedstream.chfl import CHFLClassifier
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(400, 6))
    >>> y = (X[:, 0] - X[:, 1] > 0).astype(int)
    >>> clf = CHFLClassifier(clients=2, hidden=(16,), rounds=2, local_epochs=2, lrs=(0.01,), mus=(0.0,))
    >>> clf.fit(X, y) is clf
    True
    >>> clf.classes_.tolist(), clf.n_features_in_, len(clf.choices_)
    ([0, 1], 6, 2)
    >>> clf.predict_proba(X[:3], client=1).shape
    (3, 2)
    >>> clf.score(X, y) > 0.8
    True
    """

    def __init__(self, *, clients: int = 3, common_ratio: float = 0.3, split: str = "random",
                 hidden=(64, 32), rounds: int = 10, local_epochs: int = 10, batch_size: int = 64,
                 lrs=(0.003,), mus=(0.0, 0.5), method: str = "chfl", categorical=None, device: str = "auto",
                 seed: int = 0, client_model=None, server_model=None):
        self.clients = clients
        self.common_ratio = common_ratio
        self.split = split
        self.hidden = hidden
        self.rounds = rounds
        self.local_epochs = local_epochs
        self.batch_size = batch_size
        self.lrs = lrs
        self.mus = mus
        self.method = method
        self.categorical = categorical
        self.device = device
        self.seed = seed
        self.client_model = client_model
        self.server_model = server_model

    def fit(self, X, y) -> CHFLClassifier:
        """Deal the rows and columns of ``X`` (n, d) with labels ``y`` to the clients and federate."""
        table, y = self._table(X, y, fitting=True)
        try:
            if len(table.names) < 2:
                raise ValueError(f"X has {len(table.names)} feature(s) (n_features = {len(table.names)}): "
                                 "CHFL deals common and own columns to the clients, and needs at least 2")
            categorical = self.categorical if self.categorical is None or isinstance(self.categorical, str) \
                else ",".join(str(c) for c in self.categorical)
            spec = TableSpec("<X>", LABEL, None, categorical, None, 1, ALL_ROWS)
            source = TableSource(spec, table=Table(table.path, [*table.names, LABEL], [*table.columns, y]))
            settings = CHFLSettings(  # a bad value: a ConfigError naming the parameter
                dataset="table", clients=self.clients, common_ratio=self.common_ratio, split=self.split,
                hidden=_as_list(self.hidden), rounds=self.rounds, local_epochs=self.local_epochs,
                batch_size=self.batch_size, lrs=_as_list(self.lrs), mus=_as_list(self.mus),
                device=self.device, client_model=self.client_model, server_model=self.server_model)
            rows = np.arange(source.n_base)
            result, ex, cohort = train_table(source.features(rows), source.labels(rows), settings,
                                             method=self.method, seed=self.seed, n_classes=source.n_classes)
        except FedstreamError as exc:
            raise as_value_error(exc) from None
        self._chosen = ChosenModels(ex, cohort, Standardise(source))
        self.classes_ = np.array(source.classes)
        self.result_ = result
        self.choices_ = [self._chosen.choice(k) for k in range(ex.settings.clients)]
        return self

    def predict_proba(self, X, *, client: int = 0) -> np.ndarray:
        """Class probabilities (n, len(classes_)) of the rows of ``X`` by client ``client``'s model."""
        self._check_fitted()
        try:
            return self._chosen.predict_proba(self._table(X), client)
        except FedstreamError as exc:
            raise as_value_error(exc) from None
