"""``fedstream.vfl.VFLClassifier`` and ``fedstream.chfl.CHFLClassifier`` (issue 21): scikit-learn's
conventions, and the same accuracy as ``fedstream run`` on the same data, settings and seed."""

from __future__ import annotations

import doctest
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import fedstream.chfl.estimator
import fedstream.vfl.estimator
from fedstream.chfl import CHFLClassifier
from fedstream.chfl.splits import split_rows
from fedstream.cli import main
from fedstream.errors import NotFittedError
from fedstream.vfl import VFLClassifier

ROOT = Path(__file__).resolve().parents[1]
CUSTOMERS = ROOT / "examples" / "customers.csv"
BANK = ["income", "balance", "loans", "card_spend"]
SHOP = ["visits", "basket", "returns", "channel"]
TELECOM = ["minutes", "data_gb", "tenure", "late_payments"]


def customers(rows: slice = slice(None)) -> tuple[pd.DataFrame, np.ndarray]:
    """The example table's columns as pandas reads them (numbers as numbers, ``channel`` as text)."""
    table = pd.read_csv(CUSTOMERS).iloc[rows]
    return table[BANK + SHOP + TELECOM], table["segment"].to_numpy()


@pytest.mark.parametrize("module", [fedstream.vfl.estimator, fedstream.chfl.estimator])
def test_docstring_examples(module):
    result = doctest.testmod(module)
    assert result.failed == 0 and result.attempted > 0


@pytest.mark.parametrize("cls", [VFLClassifier, CHFLClassifier])
def test_scikit_learn_conventions(cls):
    clf = cls(seed=3, categorical=["c"])
    assert clf.get_params()["seed"] == 3 and clf.get_params()["categorical"] == ["c"]  # stored as given
    assert clf.set_params(seed=4) is clf and clf.seed == 4
    with pytest.raises(ValueError, match="Invalid parameter 'nope'"):
        clf.set_params(nope=1)
    X = np.random.default_rng(0).normal(size=(60, 4))
    with pytest.raises(NotFittedError, match="not fitted yet"):
        clf.predict(X)
    assert isinstance(NotFittedError("x"), (ValueError, AttributeError))
    clf = cls(**({"hidden": 8, "epochs": 1} if cls is VFLClassifier else
                 {"clients": 2, "hidden": (8,), "rounds": 1, "local_epochs": 1, "mus": (0.0,)}))
    with pytest.raises(ValueError, match="Expected 2D array, got 1D array"):
        clf.fit(X[:, 0], np.arange(60) % 2)
    with pytest.raises(ValueError, match=r"y has shape \(59,\)"):
        clf.fit(X, np.arange(59) % 2)
    assert clf.fit(X, np.arange(60) % 2) is clf
    assert clf.n_features_in_ == 4 and clf.classes_.tolist() == [0, 1]
    with pytest.raises(ValueError, match="X has 3 features, but .* is expecting 4"):
        clf.predict(X[:, :3])
    proba = clf.predict_proba(X[:5])
    assert proba.shape == (5, 2) and np.allclose(proba.sum(axis=1), 1)
    assert set(clf.predict(X).tolist()) <= {0, 1} and 0 <= clf.score(X, np.arange(60) % 2) <= 1


def test_vfl_fit_predict_gives_fedstream_runs_accuracy(tmp_path):
    run = tmp_path / "run"
    assert main(["run", str(ROOT / "examples" / "customers-vfl.toml"), "--quiet", "--out", str(run),
                 "--set", f"data.path={CUSTOMERS}", "--set", "train.epochs=5"]) == 0
    summary = json.loads((run / "summary.json").read_text())
    n_train = summary["train_rows"]
    X, y = customers(slice(0, n_train))
    clf = VFLClassifier(partition={"bank": BANK, "shop": SHOP, "telecom": TELECOM}, categorical="channel",
                        hidden=32, epochs=5, batch_size=32, optimizer="sgd", lr=0.05, seed=0).fit(X, y)
    assert clf.client_columns_ == summary["client_columns"]
    assert [r["train_loss"] for r in clf.history_] == [r["train_loss"] for r in summary["per_epoch"]]
    assert clf.bytes_ == summary["bytes"]
    X_test, y_test = customers(slice(n_train, None))
    assert clf.score(X_test, y_test) == pytest.approx(summary["final_accuracy"])
    assert clf.feature_names_in_.tolist() == BANK + SHOP + TELECOM


def test_chfl_fit_predict_gives_fedstream_runs_accuracy(tmp_path):
    run = tmp_path / "run"
    assert main(["run", str(ROOT / "examples" / "customers-chfl.toml"), "--quiet", "--out", str(run),
                 "--set", f"data.path={CUSTOMERS}"]) == 0
    summary = json.loads((run / "summary.json").read_text())
    X, y = customers()
    clf = CHFLClassifier(clients=3, common_ratio=0.3, hidden=(64, 32), rounds=3, local_epochs=3, lrs=(0.003,),
                         mus=(0.0, 0.5), categorical="channel", seed=0, batch_size=64,
                         validation_fraction=0.2, test_fraction=0.2).fit(X, y)  # the run's split
    assert clf.result_["test_acc"] == summary["test_acc"]
    assert clf.result_["bytes"] == summary["bytes"]
    test = split_rows(len(y), 3, seed=0).test
    X_test = X.iloc[test]
    scores = [clf.score(X_test, y[test], client=k) for k in range(3)]
    np.testing.assert_allclose(scores, summary["test_acc_per_client"])


def test_vfl_classifier_compresses_as_the_run_does():
    """``compression`` is the run's compression.* keys: top-k embeddings send fewer bytes up."""
    rng = np.random.default_rng(2)
    X = rng.normal(size=(120, 4))
    y = (X[:, 0] > 0).astype(int)
    plain, topk = (VFLClassifier(partition=[[0, 1], [2, 3]], hidden=8, epochs=1, compression=c).fit(X, y)
                   for c in (None, {"up": "topk", "ratio": 0.25}))
    assert topk.bytes_["up"] < plain.bytes_["up"] and topk.bytes_["down"] == plain.bytes_["down"]
    with pytest.raises(ValueError, match="compression.up"):
        VFLClassifier(compression={"up": "zip"}).fit(X, y)


@pytest.mark.parametrize("compression", [{"up": "topk", "ratio": 0.25, "cache": True},
                                         {"up": "topk", "ratio": 0.25, "feedback": True}])
def test_vfl_classifier_predicts_through_a_cached_or_feedback_link(compression):
    """Rows to predict are new samples to the links (an empty cache row, a zero residual), sent through
    a copy of the fitted transport: the prediction is repeatable, and after one epoch it is the
    evaluation's (which met those rows, ids n_train + j, for the first time too)."""
    rng = np.random.default_rng(5)
    X = rng.normal(size=(150, 4))
    y = (X[:, 0] + X[:, 3] > 0).astype(int)
    clf = VFLClassifier(partition=[[0, 1], [2, 3]], hidden=8, epochs=1, batch_size=32, optimizer="sgd",
                        lr=0.1, compression=compression).fit(X, y)
    proba = clf.predict_proba(X)
    assert proba.shape == (150, 2) and np.allclose(proba.sum(axis=1), 1)
    np.testing.assert_array_equal(clf.predict_proba(X), proba)  # the fitted links are left as they were
    assert clf.score(X, y) == clf.history_[-1]["test_accuracy"]


def test_chfl_classifier_takes_one_value_for_a_list_parameter():
    """``hidden=16`` and ``lrs=0.01`` are lists of one; a value that is no list is a ValueError naming
    the parameter, not a TypeError."""
    X = np.random.default_rng(1).normal(size=(80, 4))
    y = (X[:, 0] > 0).astype(int)
    clf = CHFLClassifier(clients=2, hidden=16, rounds=1, local_epochs=1, lrs=0.01, mus=0.0).fit(X, y)
    assert clf.hidden == 16 and clf.choices_  # stored as given, fitted with (16,), (0.01,), (0.0,)
    for name in ("hidden", "lrs", "mus"):
        with pytest.raises(ValueError, match=f"^{name}: expected a non-empty list"):
            CHFLClassifier(clients=2, rounds=1, local_epochs=1, **{name: None}).fit(X, y)


@pytest.mark.parametrize("partition, message", [
    ({"a": [0, 9]}, r"column '9' is not a column of X; X has only 6 columns \(0\.\.5\)"),
    ([[0, 6], [1]], r"column '6' is not a column of X; X has only 6 columns \(0\.\.5\)"),
    ([["0"], ["income"]], r"column 'income' is not a column of X; X's columns are 0, 1, 2, 3, 4, 5"),
])
def test_vfl_partition_is_checked_against_the_columns_of_x(partition, message):
    """Not against the estimator's table, which holds the label as one more column."""
    X = np.random.default_rng(1).normal(size=(40, 6))
    with pytest.raises(ValueError, match=message):
        VFLClassifier(partition=partition, hidden=8, epochs=1).fit(X, np.arange(40) % 2)


def test_adam_from_the_command_line_resumes_exactly_and_is_the_estimators(tmp_path):
    """``train.optimizer = "adam"`` (issue 32): every party steps with Adam; its state is in the
    checkpoint, so a run resumed after epoch 1 ends as an uninterrupted one; and the estimator with
    ``optimizer="adam"`` and the same settings gives the run's accuracy."""
    sets = ["--set", f"data.path={CUSTOMERS}", "--set", "train.optimizer=adam", "--set", "optimizer.lr=0.01"]
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    run = ["run", str(ROOT / "examples" / "customers-vfl.toml"), "--quiet"]
    assert main([*run, "--out", str(whole), *sets, "--set", "train.epochs=3"]) == 0
    assert main([*run, "--out", str(cut), *sets, "--set", "train.epochs=1"]) == 0
    assert main([*run, "--out", str(cut), *sets, "--set", "train.epochs=3", "--resume"]) == 0
    summary, resumed = (json.loads((d / "summary.json").read_text()) for d in (whole, cut))
    assert [r["train_loss"] for r in resumed["per_epoch"]] == [r["train_loss"] for r in summary["per_epoch"]]
    assert resumed["final_accuracy"] == summary["final_accuracy"]
    sgd = tmp_path / "sgd"
    assert main([*run, "--out", str(sgd), *sets[:2], "--set", "optimizer.lr=0.01",
                 "--set", "train.epochs=3"]) == 0
    assert json.loads((sgd / "summary.json").read_text())["per_epoch"][-1]["train_loss"] != \
        summary["per_epoch"][-1]["train_loss"]
    n_train = summary["train_rows"]
    X, y = customers(slice(0, n_train))
    clf = VFLClassifier(partition={"bank": BANK, "shop": SHOP, "telecom": TELECOM}, categorical="channel",
                        hidden=32, epochs=3, batch_size=32, optimizer="adam", lr=0.01, seed=0).fit(X, y)
    assert [r["train_loss"] for r in clf.history_] == [r["train_loss"] for r in summary["per_epoch"]]
    X_test, y_test = customers(slice(n_train, None))
    assert clf.score(X_test, y_test) == pytest.approx(summary["final_accuracy"])


def _four_column_table(seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(240, 7))
    return X, (X[:, :4].sum(axis=1) > 0).astype(int)


def test_chfl_predicts_the_mean_of_the_clients_own_probabilities():
    """``combine="mean"`` (the default): the federation's probabilities are the mean of every client's
    chosen model's, each on its own columns; ``"client0"`` is client 0's alone."""
    X, y = _four_column_table()
    kw = dict(clients=3, hidden=(8,), rounds=2, local_epochs=1, lrs=(0.01,), mus=(0.0,), seed=0)
    clf = CHFLClassifier(**kw).fit(X, y)
    own = [clf.predict_proba(X, client=k) for k in range(3)]
    combined = clf.predict_proba(X)
    np.testing.assert_allclose(combined, np.mean(own, axis=0), rtol=0, atol=1e-12)
    np.testing.assert_allclose(combined.sum(axis=1), 1.0, atol=1e-9)
    assert not np.allclose(own[0], own[1])  # two different models, so the mean is not one of them
    np.testing.assert_array_equal(clf.predict(X), clf.classes_[combined.argmax(axis=1)])
    first = CHFLClassifier(**kw, combine="client0").fit(X, y)
    np.testing.assert_allclose(first.predict_proba(X), own[0], rtol=0, atol=1e-12)


def test_chfl_client_reads_only_its_own_columns():
    """A column unique to client 1 changes client 1's answer, not client 0's."""
    X, y = _four_column_table()
    clf = CHFLClassifier(clients=2, hidden=(8,), rounds=2, local_epochs=1, lrs=(0.01,), mus=(0.0,)).fit(X, y)
    column = clf.result_["features"]["unique"][1][0]
    changed = X.copy()
    changed[:, column] += 5.0
    np.testing.assert_allclose(clf.predict_proba(changed, client=0), clf.predict_proba(X, client=0))
    assert not np.allclose(clf.predict_proba(changed, client=1), clf.predict_proba(X, client=1))


@pytest.mark.parametrize(("params", "match"), [({"validation_fraction": 0}, "validation_fraction"),
                                               ({"test_fraction": 1.5}, "test_fraction"),
                                               ({"validation_fraction": 0.6, "test_fraction": 0.4},
                                                "validation_fraction \\+ test_fraction"),
                                               ({"combine": "max"}, "combine")])
def test_chfl_refuses_bad_split_or_combine(params, match):
    X, y = _four_column_table()
    with pytest.raises(ValueError, match=match):
        CHFLClassifier(clients=2, rounds=1, local_epochs=1, **params).fit(X, y)


def test_chfl_defaults_learn_iris():
    """The defaults with 2 clients on scikit-learn's iris (75 / 25, seeded): 0.974 measured, as
    ``MLPClassifier()``; asserted with a margin of 3 test rows."""
    from sklearn.datasets import load_iris
    from sklearn.model_selection import train_test_split

    X_train, X_test, y_train, y_test = train_test_split(*load_iris(return_X_y=True), random_state=0)
    assert CHFLClassifier(clients=2, seed=0).fit(X_train, y_train).score(X_test, y_test) > 0.9
