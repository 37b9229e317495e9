"""``VFLClassifier`` and ``CHFLClassifier`` as scikit-learn estimators (issue 32): scikit-learn's
own ``check_estimator`` suite, and the tools users put them in (``Pipeline``, ``GridSearchCV``,
``cross_val_score``, ``clone``, pandas DataFrames, pickling)."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.compose import make_column_transformer
from sklearn.datasets import load_breast_cancer, load_iris
from sklearn.exceptions import NotFittedError
from sklearn.model_selection import GridSearchCV, cross_val_score, train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler
from sklearn.utils.estimator_checks import parametrize_with_checks

from fedstream.chfl import CHFLClassifier
from fedstream.vfl import VFLClassifier

# Small instances, fast enough for the default suite, that still learn scikit-learn's test data
# (check_classifiers_train wants > 83 % training accuracy on 300 blobs).
CHECKED = [
    VFLClassifier(hidden=16, epochs=8, batch_size=32, lr=0.03),
    # scikit-learn's checks fit tables of 2 columns; a CHFL client holds at least one common and one
    # own column, so 2 columns make one client (clients=2 needs 3 or more: tested below)
    CHFLClassifier(clients=1, hidden=(16,), rounds=6, local_epochs=2, lrs=(0.01,), mus=(0.0,)),
]

EXPECTED_FAILED_CHECKS: dict[str, str] = {}
"""Checks that cannot apply to a federated model, with the reason (docs/estimators.md): none. A
table of 1 column for 2 VFL clients, or for CHFL, is refused with scikit-learn's "n_features = 1"
wording, which ``check_fit2d_1feature`` accepts."""


@parametrize_with_checks(CHECKED, expected_failed_checks=lambda est: EXPECTED_FAILED_CHECKS)
def test_scikit_learn_check_estimator(estimator, check):
    check(estimator)


def _split(loader):
    X, y = loader(return_X_y=True, as_frame=True)
    return train_test_split(X, y, random_state=0)


def test_pipeline_and_grid_search_pick_the_parameters():
    """In a Pipeline behind a StandardScaler; GridSearchCV clones it, sets ``vflclassifier__*`` and
    refits the best; its score is the refitted pipeline's."""
    X_train, X_test, y_train, y_test = _split(load_iris)
    pipe = make_pipeline(StandardScaler(), VFLClassifier(hidden=16, epochs=30, batch_size=32))
    search = GridSearchCV(pipe, {"vflclassifier__lr": [1e-4, 0.01]}, cv=3).fit(X_train, y_train)
    assert search.best_params_ == {"vflclassifier__lr": 0.01}
    assert search.cv_results_["mean_test_score"][1] > search.cv_results_["mean_test_score"][0]
    best = search.best_estimator_[-1]
    assert best.lr == 0.01 and best.n_features_in_ == 4 and best is not pipe[-1]
    assert search.score(X_test, y_test) == search.best_estimator_.score(X_test, y_test) > 0.9


@pytest.mark.parametrize("estimator, least", [
    (VFLClassifier(hidden=16, epochs=10, batch_size=64), 0.9),
    # each CHFL client trains on 60 % of its rows and sees the common and its own columns only
    (CHFLClassifier(clients=2, hidden=(16,), rounds=3, local_epochs=3, lrs=(0.01,), mus=(0.0,)), 0.8),
], ids=["vfl", "chfl"])
def test_cross_val_score_and_clone(estimator, least):
    X, y = load_breast_cancer(return_X_y=True)
    scores = cross_val_score(estimator, X, y, cv=3)
    assert scores.shape == (3,) and scores.min() > least
    twin = clone(estimator)
    assert twin.get_params() == estimator.get_params() and not hasattr(twin, "classes_")
    with pytest.raises(NotFittedError):  # scikit-learn's own exception class
        twin.predict(X)


def test_dataframe_columns_by_name_and_text_categories():
    """A DataFrame's names give the partition and ``feature_names_in_``; a text column is one-hot
    encoded when named in ``categorical``; a DataFrame with other names is refused."""
    X, y = load_iris(return_X_y=True, as_frame=True)
    X = X.assign(colour=np.where(y.to_numpy() == 0, "red", np.where(X["petal width (cm)"] > 1.7, "blue",
                                                                      "green")))
    partition = {"lab": ["sepal length (cm)", "sepal width (cm)"],
                 "field": ["petal length (cm)", "petal width (cm)", "colour"]}
    clf = VFLClassifier(partition=partition, categorical=["colour"], hidden=16, epochs=30, batch_size=32)
    clf.fit(X, y)
    assert clf.feature_names_in_.tolist() == list(X.columns)
    assert clf.client_columns_[1][-1].startswith("colour") and clf.score(X, y) > 0.9
    proba = clf.predict_proba(X.iloc[:5])
    assert proba.shape == (5, 3) and np.allclose(proba.sum(axis=1), 1)
    with pytest.raises(ValueError, match="feature names"):
        clf.predict(X.rename(columns={"colour": "color"}))


def test_column_transformer_feeds_it_numbers():
    """A ColumnTransformer in front (one-hot in scikit-learn) gives it a plain numeric array."""
    X, y = load_iris(return_X_y=True, as_frame=True)
    X = X.assign(size=np.where(X["petal length (cm)"] > 4, "big", "small"))
    prep = make_column_transformer((OneHotEncoder(), ["size"]), remainder=StandardScaler())
    model = make_pipeline(prep, VFLClassifier(hidden=16, epochs=30, batch_size=32)).fit(X, y)
    assert model[-1].n_features_in_ == 6 and model.score(X, y) > 0.9


@pytest.mark.parametrize("estimator", [
    VFLClassifier(hidden=16, epochs=5, batch_size=64,
                  compression={"up": "topk", "ratio": 0.5, "cache": True}),
    CHFLClassifier(clients=2, hidden=(16,), rounds=1, local_epochs=1, lrs=(0.01,), mus=(0.0, 0.5)),
], ids=["vfl", "chfl"])
def test_a_fitted_estimator_pickles_and_predicts_the_same(estimator):
    X, y = load_breast_cancer(return_X_y=True)
    estimator.fit(X, y)
    twin = pickle.loads(pickle.dumps(estimator))
    np.testing.assert_array_equal(twin.predict_proba(X[:50]), estimator.predict_proba(X[:50]))


def test_vfl_early_stopping_holds_out_a_validation_fraction():
    """``early_stopping=True``: a stratified ``validation_fraction`` of the rows is held out, its
    accuracy is each epoch's ``test_accuracy``, training stops after ``n_iter_no_change`` epochs
    without improvement and the best epoch's models are kept; without it the training loss
    decides, as in ``MLPClassifier``."""
    X, y = load_breast_cancer(return_X_y=True)
    clf = VFLClassifier(hidden=16, epochs=200, early_stopping=True, validation_fraction=0.2,
                        n_iter_no_change=3, tol=0.0).fit(X, y)
    accuracies = [row["test_accuracy"] for row in clf.history_]
    assert clf.n_iter_ == len(accuracies) < 200
    assert clf.best_validation_score_ == max(accuracies)
    assert accuracies.index(max(accuracies)) == clf.n_iter_ - 4  # 3 epochs without improvement
    held = round(0.2 * (y == 0).sum()) + round(0.2 * (y == 1).sum())
    assert clf.history_[0]["steps"] == -(-(len(y) - held) // 200)  # batches of the training rows only
    plain = VFLClassifier(hidden=16, epochs=200, n_iter_no_change=3).fit(X, y)
    losses = [row["train_loss"] for row in plain.history_]
    assert min(losses[-3:]) > min(losses[:-3]) - 1e-4 and not hasattr(plain, "best_validation_score_")


@pytest.mark.parametrize("params, message", [
    ({"early_stopping": "yes"}, "early_stopping = 'yes'"),
    ({"validation_fraction": 1.0}, r"validation_fraction = 1.0: expected a number in \(0, 1\)"),
    ({"n_iter_no_change": 0}, "n_iter_no_change = 0"),
    ({"optimizer": "rmsprop"}, "train.optimizer = 'rmsprop': expected one of sgd, adam"),
])
def test_vfl_bad_training_parameters_name_themselves(params, message):
    X, y = load_iris(return_X_y=True)
    with pytest.raises(ValueError, match=message):
        VFLClassifier(**params).fit(X, y)
