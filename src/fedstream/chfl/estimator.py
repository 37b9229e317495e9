"""Batch CHFL as a scikit-learn classifier: :class:`CHFLClassifier` (``fit`` / ``predict`` on arrays).

The same run as ``fedstream run`` with ``task = "chfl"`` on a table: the columns are encoded as a
table file's are (:class:`~fedstream.data.table_source.TableSource`), the paper's splits deal the
columns (common / each client's own) and the rows (train / ``validation_fraction`` / ``test_fraction``,
where the paper's runs deal 60 / 20 / 20 %) to the clients, and
:func:`~fedstream.chfl.trainer.train_table` plays the FedAvg federations. Each client keeps the model
its validation rows chose (:class:`~fedstream.chfl.final.ChosenModels`). A prediction is the
federation's: the mean of every client's class probabilities, each client's chosen model on its own
columns of the rows (``combine="mean"``, the default), or client 0's alone (``combine="client0"``,
the rule before); ``predict(X, client=k)`` asks client ``k`` alone.
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

COMBINE = ("mean", "client0")
"""``combine``: how :meth:`CHFLClassifier.predict_proba` answers for the federation."""
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
    ``categorical`` (columns to one-hot), ``device`` (``auto`` | ``cpu`` | ``cuda``), ``seed``,
    ``validation_fraction`` (the share of the rows that chooses each client's model, 0.1 as
    ``MLPClassifier``'s), ``test_fraction`` (the share that scores the run, ``result_``; 0.2 and 0.2
    give a ``fedstream run``'s split), ``combine`` (``"mean"``: predictions average every client's
    probabilities; ``"client0"``: client 0's). After ``fit``: ``classes_``, ``n_features_in_``,
    ``result_`` (the run's summary figures: ``test_acc``, ``test_acc_per_client``, ``bytes``, the
    feature split), ``choices_`` (each client's chosen candidate, learning rate and round).

    >>> import numpy as np
    >>> from fedstream.chfl import CHFLClassifier
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(400, 6))
    >>> y = (X.sum(axis=1) > 0).astype(int)  # every client sees some of the evidence
    >>> clf = CHFLClassifier(clients=2, hidden=(16,), rounds=2, local_epochs=2, lrs=(0.01,), mus=(0.0,))
    >>> clf.fit(X, y) is clf
    True
    >>> clf.classes_.tolist(), clf.n_features_in_, len(clf.choices_)
    ([0, 1], 6, 2)
    >>> clf.predict_proba(X[:3], client=1).shape
    (3, 2)
    >>> clf.score(X, y) > 0.75  # the mean of both clients' probabilities (combine="mean")
    True
    """

    def __init__(self, *, clients: int = 3, common_ratio: float = 0.3, split: str = "random",
                 hidden=(64, 32), rounds: int = 10, local_epochs: int = 10, batch_size: int = 32,
                 lrs=(0.003,), mus=(0.0, 0.5), method: str = "chfl", categorical=None, device: str = "auto",
                 seed: int = 0, client_model=None, server_model=None, validation_fraction: float = 0.1,
                 test_fraction: float = 0.05, combine: str = "mean"):
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
        self.validation_fraction = validation_fraction
        self.test_fraction = test_fraction
        self.combine = combine

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
            fractions = self._fractions(source.n_base, self.clients)
            result, ex, cohort = train_table(source.features(rows), source.labels(rows), settings,
                                             method=self.method, seed=self.seed, n_classes=source.n_classes,
                                             fractions=fractions)
        except FedstreamError as exc:
            raise as_value_error(exc) from None
        self._chosen = ChosenModels(ex, cohort, Standardise(source))
        self.classes_ = np.array(source.classes)
        self.result_ = result
        self.choices_ = [self._chosen.choice(k) for k in range(ex.settings.clients)]
        return self

    def _fractions(self, n_rows: int, n_clients) -> tuple[float, float, float]:
        """The rows' train / validation / test shares: ``validation_fraction`` chooses each client's
        model, ``test_fraction`` scores the run (``result_``), the rest trains. On a table so small
        that the shares round to no test row or fewer validation rows than clients, one test row and
        a validation row per client are taken (from the training share)."""
        shares = {}
        for name, lo, hi in (("validation_fraction", 0.0, 1.0), ("test_fraction", 0.0, 1.0)):
            v = getattr(self, name)
            number = isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)
            if not number or not lo < v < hi:
                raise ValueError(f"{name}: expected a number in ({lo:g}, {hi:g}), found {v!r}")
            shares[name] = float(v)
        vf, tf = shares["validation_fraction"], shares["test_fraction"]
        if vf + tf >= 1:
            raise ValueError("validation_fraction + test_fraction: expected less than 1 (rows left to "
                             "train), "
                             f"found {vf:g} + {tf:g}")
        if self.combine not in COMBINE:
            raise ValueError(f"combine: expected one of {', '.join(COMBINE)}, found {self.combine!r}")
        fractions = (1.0 - vf - tf, vf, tf)
        n_train, n_val = round(fractions[0] * n_rows), round(fractions[1] * n_rows)
        clients = n_clients if isinstance(n_clients, int) and not isinstance(n_clients, bool) else 1
        if n_rows - n_train - n_val >= 1 and n_val >= clients:
            return fractions  # as split_rows rounds them (the paper's 60 / 20 / 20 gives a run's split)
        n_test, n_val = max(1, round(tf * n_rows)), max(clients, round(vf * n_rows))
        return ((n_rows - n_test - n_val) / n_rows, n_val / n_rows, n_test / n_rows)

    def predict_proba(self, X, *, client: int | None = None) -> np.ndarray:
        """Class probabilities (n, len(classes_)) of the rows of ``X``: the federation's answer by
        ``combine`` (``"mean"``: the mean of every client's chosen model's probabilities, each on its
        own columns of the rows; ``"client0"``: client 0's), or client ``client``'s model alone."""
        self._check_fitted()
        try:
            table = self._table(X)
            if client is not None:
                return self._chosen.predict_proba(table, client)
            if self.combine not in COMBINE:  # set_params after fit
                raise ValueError(f"combine: expected one of {', '.join(COMBINE)}, found {self.combine!r}")
            if self.combine == "client0":
                return self._chosen.predict_proba(table, 0)
            clients = range(self._chosen.n_clients)
            return np.mean([self._chosen.predict_proba(table, k) for k in clients], axis=0)
        except FedstreamError as exc:
            raise as_value_error(exc) from None
