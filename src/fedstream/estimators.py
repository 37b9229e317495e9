"""What fedstream's scikit-learn-style classifiers share (:class:`fedstream.vfl.VFLClassifier`,
:class:`fedstream.chfl.CHFLClassifier`): scikit-learn's conventions without depending on it.

* constructor parameters are keyword-only and stored as given (``get_params`` / ``set_params``
  read and write them; nothing is checked before ``fit``);
* ``fit(X, y)`` returns the estimator; what it learnt ends in ``_`` (``classes_``,
  ``n_features_in_``, ``feature_names_in_`` for named columns);
* ``predict`` / ``predict_proba`` / ``score`` before ``fit`` raise :class:`~fedstream.errors.NotFittedError`;
  a wrong shape or a bad value is a ValueError that says what was expected.

``X`` is a 2-D array, a pandas DataFrame or a dict of columns (:func:`fedstream.data.table.as_table`).
"""

from __future__ import annotations

import inspect

import numpy as np

from fedstream.data.table import Table, as_table
from fedstream.errors import FedstreamError, NotFittedError


class ClassifierBase:
    """get/set_params, the fitted check, X's conversion and shape check, ``score`` (accuracy)."""

    def get_params(self, deep: bool = True) -> dict:
        """The constructor's parameters, as given."""
        return {name: getattr(self, name) for name in inspect.signature(type(self).__init__).parameters
                if name != "self"}

    def set_params(self, **params) -> ClassifierBase:
        valid = self.get_params()
        for name, value in params.items():
            if name not in valid:
                raise ValueError(f"Invalid parameter {name!r} for {type(self).__name__}; valid parameters "
                                 f"are {sorted(valid)}")
            setattr(self, name, value)
        return self

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.get_params().items())})"

    def _check_fitted(self) -> None:
        if not hasattr(self, "classes_"):
            raise NotFittedError(f"This {type(self).__name__} instance is not fitted yet. Call 'fit' with "
                                 "appropriate arguments before using this estimator.")

    def _table(self, X, *, fitting: bool = False) -> Table:
        """X as a table of named columns; after ``fit``, checked against what ``fit`` saw."""
        table = as_table(X)
        if fitting:
            self.n_features_in_ = len(table.names)
            if not isinstance(X, np.ndarray) and not table.names == [str(j) for j in range(len(table.names))]:
                self.feature_names_in_ = np.array(table.names, dtype=object)
            return table
        if len(table.names) != self.n_features_in_:
            raise ValueError(f"X has {len(table.names)} features, but {type(self).__name__} is expecting "
                             f"{self.n_features_in_} features as input.")
        if hasattr(self, "feature_names_in_"):
            return table
        return Table(table.path, [str(j) for j in range(len(table.names))], table.columns)

    def predict(self, X, **kwargs) -> np.ndarray:
        """The most probable class of each row of ``X`` (a label of ``classes_``)."""
        self._check_fitted()
        return self.classes_[self.predict_proba(X, **kwargs).argmax(axis=1)]

    def score(self, X, y, **kwargs) -> float:
        """Mean accuracy of :meth:`predict` on ``X`` against ``y``."""
        y = np.asarray(y)
        predicted = self.predict(X, **kwargs)
        if y.shape != predicted.shape:
            raise ValueError(f"y has shape {y.shape}, expected ({len(predicted)},): one label per row of X")
        return float(np.mean(predicted == y))


def label_column(y, n_rows: int) -> np.ndarray:
    """``y`` as a 1-D array of ``n_rows`` labels; ValueError otherwise."""
    y = np.asarray(y)
    if y.ndim == 2 and y.shape[1] == 1:
        y = y.ravel()
    if y.shape != (n_rows,):
        raise ValueError(f"y has shape {y.shape}, expected ({n_rows},): one label per row of X")
    return y


def as_value_error(exc: FedstreamError) -> ValueError:
    """A data or config problem found while fitting, as scikit-learn reports it: a ValueError."""
    return ValueError(str(exc))
