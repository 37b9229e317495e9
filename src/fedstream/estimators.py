"""What fedstream's scikit-learn classifiers share (:class:`fedstream.vfl.VFLClassifier`,
:class:`fedstream.chfl.CHFLClassifier`): scikit-learn's own base classes, ``BaseEstimator`` and
``ClassifierMixin``, so they work in a ``Pipeline``, ``GridSearchCV``, ``cross_val_score`` and
``clone`` and pass ``check_estimator`` (docs/estimators.md lists the few checks that cannot apply).

* constructor parameters are keyword-only and stored as given (``get_params`` / ``set_params``,
  scikit-learn's); nothing is checked before ``fit``;
* ``fit(X, y)`` returns the estimator; what it learnt ends in ``_`` (``classes_``,
  ``n_features_in_``, ``feature_names_in_`` for named columns);
* ``predict`` / ``predict_proba`` / ``score`` before ``fit`` raise :class:`~fedstream.errors.NotFittedError`;
  a wrong shape or a bad value is a ValueError that says what was expected.

``X`` is a 2-D array, a pandas DataFrame or a dict of columns (:func:`fedstream.data.table.as_table`);
arrays and DataFrames go through scikit-learn's own ``validate_data`` (feature counts and names,
finite values, labels of a classification), so the messages are scikit-learn's.
"""

from __future__ import annotations

import numpy as np
from scipy.sparse import issparse
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.exceptions import NotFittedError as SklearnNotFittedError
from sklearn.metrics import accuracy_score
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import column_or_1d, validate_data

import fedstream.errors
from fedstream.data.table import Table, as_table
from fedstream.errors import FedstreamError


class NotFittedError(fedstream.errors.NotFittedError, SklearnNotFittedError):
    """:class:`fedstream.errors.NotFittedError` that is also scikit-learn's (``check_is_fitted``'s)."""


class ClassifierBase(ClassifierMixin, BaseEstimator):
    """The fitted check, X's conversion and checks, ``predict`` from ``predict_proba``, ``score``
    (accuracy); subclasses define ``fit`` and ``predict_proba``."""

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.categorical = True  # ``categorical`` columns (text labels) are one-hot encoded
        return tags

    def _check_fitted(self) -> None:
        if not hasattr(self, "classes_"):
            raise NotFittedError(f"This {type(self).__name__} instance is not fitted yet. Call 'fit' with "
                                 "appropriate arguments before using this estimator.")

    def _table(self, X, y=None, *, fitting: bool = False):
        """X as a table whose columns carry the names ``fit`` saw (``feature_names_in_``, or
        positions "0", "1", ... for an array); with ``y``, (table, y) with y checked. ``fit``
        records ``n_features_in_`` (and ``feature_names_in_`` for named columns), afterwards X is
        checked against them."""
        if fitting and y is None:
            raise ValueError(f"{type(self).__name__} requires y to be passed, but the target y is None: "
                             "fit(X, y) needs a label per row")
        if isinstance(X, dict) and not issparse(X):  # columns by name (not scikit-learn's): checked here
            X = self._dict_columns(X, fitting)
        elif hasattr(X, "columns"):  # a DataFrame: its own dtype per column (text for categoricals)
            validate_data(self, X, reset=fitting, skip_check_array=True)
        else:
            # numbers, unless text columns are declared categorical (then each column keeps its values)
            dtype = None if getattr(self, "categorical", None) is not None else "numeric"
            X = validate_data(self, X, reset=fitting, dtype=dtype, ensure_all_finite=dtype is not None)
        table = as_table(X)
        if fitting and table.n_rows < 2:
            raise ValueError(f"X has {table.n_rows} sample (n_samples = {table.n_rows}): a classifier needs "
                             "at least 2 rows")
        names = ([str(n) for n in self.feature_names_in_] if hasattr(self, "feature_names_in_")
                 else [str(j) for j in range(len(table.names))])
        table = Table(table.path, names, table.columns)
        if y is None:
            return table
        y = np.asarray(y)
        if y.ndim == 2 and y.shape[1] == 1:  # a column vector: scikit-learn's DataConversionWarning
            y = column_or_1d(y, warn=True)
        if y.shape != (table.n_rows,):
            raise ValueError(f"y has shape {y.shape}, expected ({table.n_rows},): one label per row of X")
        check_classification_targets(y)
        return table, y

    def _dict_columns(self, X: dict, fitting: bool) -> dict:
        """A dict of columns, recorded by ``fit`` (names and count), afterwards in ``fit``'s order."""
        if fitting:
            self.n_features_in_ = len(X)
            self.feature_names_in_ = np.array([str(k) for k in X], dtype=object)
            return X
        given = {str(k): v for k, v in X.items()}
        missing = [n for n in self.feature_names_in_ if n not in given]
        if missing or len(given) != self.n_features_in_:
            raise ValueError(f"X has columns {', '.join(given)}, but {type(self).__name__} is expecting "
                             f"the {self.n_features_in_} columns {', '.join(self.feature_names_in_)}")
        return {n: given[n] for n in self.feature_names_in_}

    def predict(self, X, **kwargs) -> np.ndarray:
        """The most probable class of each row of ``X`` (a label of ``classes_``)."""
        self._check_fitted()
        return self.classes_[self.predict_proba(X, **kwargs).argmax(axis=1)]

    def score(self, X, y, sample_weight=None, **kwargs) -> float:
        """Mean accuracy of :meth:`predict` on ``X`` against ``y`` (``kwargs``: :meth:`predict`'s)."""
        y = np.asarray(y)
        predicted = self.predict(X, **kwargs)
        if y.shape != predicted.shape:
            raise ValueError(f"y has shape {y.shape}, expected ({len(predicted)},): one label per row of X")
        return float(accuracy_score(y, predicted, sample_weight=sample_weight))


def as_value_error(exc: FedstreamError) -> ValueError:
    """A data or config problem found while fitting, as scikit-learn reports it: a ValueError."""
    return ValueError(str(exc))
