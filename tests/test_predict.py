"""``fedstream predict``: a finished online or batch VFL run predicts raw rows through its own parties."""

import csv
import doctest
import json
import re

import numpy as np
import pytest

import fedstream.ovfl.inference
import fedstream.predict.files
from fedstream.cli import main
from fedstream.data import resolve_data_root
from fedstream.data.images import load_image_split
from fedstream.data.paths import find_file
from fedstream.data.tabular import read_uci_csv
from fedstream.errors import FedstreamError
from fedstream.predict import predict_run, score_predictions
from fedstream.predict.ovfl import load_final


@pytest.mark.parametrize("module", [fedstream.ovfl.inference, fedstream.predict.files])
def test_docstring_examples(module):
    result = doctest.testmod(module)
    assert result.failed == 0 and result.attempted > 0


@pytest.fixture(scope="module")
def higgs_run(tmp_path_factory):
    """A finished 1,500-round DLR-Random run on the HIGGS subset, and the raw HIGGS rows."""
    try:
        root = resolve_data_root(None)
        path = find_file(root, ["higgs_subset/higgs_first10k_h2o_3sigdigits.csv.gz"], dataset="higgs",
                         hint="FEDSTREAM_DATA")
    except FedstreamError as exc:  # no data folder here
        pytest.skip(f"HIGGS subset not available: {exc}")
    out = tmp_path_factory.mktemp("predict") / "run"
    argv = ["run", "ovfl-higgs", "--quiet", "--out", str(out)]
    for s in ("rounds=1500", "eval.interval=500", "checkpoint.every=0", "activation.name=random",
              "vfl.clients=3", "model.embedding=16"):
        argv += ["--set", s]
    assert main(argv) == 0
    X, y = read_uci_csv(path, n_features=28, name="HIGGS")
    return out, X, y


def test_cli_writes_ids_predictions_and_probabilities(higgs_run, tmp_path):
    run, X, y = higgs_run
    ids = np.arange(100, 400)
    np.savez(tmp_path / "rows.npz", X=X[ids], id=ids)
    assert main(["predict", str(run), "--data", str(tmp_path / "rows.npz"), "--out",
                 str(tmp_path / "preds.csv"), "--quiet"]) == 0
    with open(tmp_path / "preds.csv") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["id", "prediction", "p_0", "p_1"]
    assert [int(r[0]) for r in rows[1:]] == ids.tolist()
    proba = np.array([[float(p) for p in r[2:]] for r in rows[1:]])
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, atol=1e-5)
    assert [int(r[1]) for r in rows[1:]] == proba.argmax(axis=1).tolist()
    assert np.mean(proba.argmax(axis=1) != y[ids]) < 0.45  # learnt something


def test_the_parties_predict_as_they_do_in_a_round(higgs_run, tmp_path):
    """The run's standardisation of raw rows is its stream's, and the prediction of the next stream
    row equals the one the engine makes in that round, before it learns."""
    run_dir, X, _ = higgs_run
    run = load_final(run_dir)
    Xs, _, idx = run.stream.batch(run.t, 8)
    np.testing.assert_array_equal(run.stream.source.standardise(X[idx % len(X)]), Xs)
    np.savez(tmp_path / "next.npz", X=X[idx % len(X)])
    predicted = predict_run(run_dir, tmp_path / "next.npz")
    seen = []
    run.run(rounds=run.t + 1, on_round=lambda t, y, p: seen.append(p))
    assert seen == [int(predicted.proba[0].argmax())]
    assert set(predicted.parties) == {"client 0", "client 1", "client 2", "server"}


def test_labelled_rows_are_scored_against_the_predictions_written(higgs_run, tmp_path, capsys):
    """An NPZ file with ``y``: the error printed and returned is that of the CSV's predictions
    against ``y``, whichever way the labels are written (int, float, text)."""
    run, X, y = higgs_run
    ids = np.arange(2000, 2600)
    np.savez(tmp_path / "rows.npz", X=X[ids], id=ids, y=y[ids])
    assert main(["predict", str(run), "--data", str(tmp_path / "rows.npz"), "--out",
                 str(tmp_path / "preds.csv")]) == 0
    with open(tmp_path / "preds.csv") as f:
        predicted = np.array([int(r[1]) for r in list(csv.reader(f))[1:]])
    wrong = int(np.count_nonzero(predicted != y[ids]))
    assert 0 < wrong < 300
    printed = " ".join(capsys.readouterr().out.split())
    assert f"600: error {wrong / 600:.4f}, accuracy {1 - wrong / 600:.4f}" in printed
    for labels in (y[ids].astype(np.float32), y[ids].astype(str)):
        np.savez(tmp_path / "other.npz", X=X[ids], y=labels)
        assert predict_run(run, tmp_path / "other.npz").score.errors == wrong
    np.savez(tmp_path / "none.npz", X=X[ids])
    assert predict_run(run, tmp_path / "none.npz").score is None


def test_labels_match_the_classes_as_one_column_of_numbers_or_of_text():
    """Numbers match as numbers ("1", 1, 1.0, True are one class) only when every class and label
    is a number; otherwise as text, so that text classes "01" and "1" stay apart."""
    proba = np.eye(3)[[0, 1, 2, 1]]
    numbers = fedstream.predict.files.Predictions(np.arange(4), [0, 1, 2], proba, {})
    labels = np.array(["0", "1.0", "2", "1"])
    assert score_predictions(numbers, labels, "f").errors == 0
    assert score_predictions(numbers, np.array([False, True, True, True]), "f").errors == 1
    text = fedstream.predict.files.Predictions(np.arange(4), ["01", "1", "a"], proba, {})
    assert score_predictions(text, np.array(["01", "1", "a", "01"]), "f").errors == 1
    with pytest.raises(FedstreamError, match="f: row 0: label 'nan' is not a class of the run"):
        score_predictions(numbers, np.array(["nan", "1", "2", "1"]), "f")


@pytest.mark.parametrize("content, message", [
    ({"X": np.zeros((3, 28)), "y": np.array([0, 1])}, "y has shape \\(2,\\), expected \\(3,\\)"),
    ({"X": np.zeros((2, 28)), "y": np.array([0, 2])}, "row 1: label 2 is not a class of the run; "
                                                     "expected one of \\[0, 1\\]"),
    ({"X": np.zeros((2, 28)), "y": np.array([0.0, np.nan])}, "y holds NaN or inf \\(row 1\\)"),
    ({"X": np.zeros((2, 28)), "y": np.array([0, None], dtype=object)}, "y cannot be read"),
    ({"Z": np.zeros((2, 28))}, "expected an array 'X'"),
    ({"X": np.zeros((2, 5))}, "expected raw rows, an array \\(n, 28\\) of higgs's columns"),
    ({"X": np.full((2, 28), np.nan)}, "NaN or inf \\(row 0\\)"),
])
def test_bad_data_is_one_line_and_exit_2(higgs_run, tmp_path, capsys, content, message):
    run, _, _ = higgs_run
    np.savez(tmp_path / "bad.npz", **content)
    bad = str(tmp_path / "bad.npz")
    assert main(["predict", str(run), "--data", bad, "--out", str(tmp_path / "p.csv")]) == 2
    out = "".join(capsys.readouterr())
    assert "error:" in out
    assert re.search(message, " ".join(out.split()))


def test_not_a_finished_run(tmp_path, capsys):
    assert main(["predict", str(tmp_path), "--data", "x.npz", "--out", str(tmp_path / "p.csv")]) == 2
    assert "is not a finished run" in " ".join("".join(capsys.readouterr()).split())


def test_batch_vfl_run_predicts_its_test_rows_as_it_scored_them(tmp_path):
    """A finished vfl-mnist run keeps checkpoint.pt; its parties predict the raw test images, with
    the accuracy the run reported for the same rows (the evaluation's own path)."""
    try:
        X, y = load_image_split(resolve_data_root(None), "mnist", "test")
    except FedstreamError as exc:
        pytest.skip(f"MNIST not available: {exc}")
    run = tmp_path / "run"
    assert main(["run", "vfl-mnist", "--quiet", "--out", str(run), "--set", "train.epochs=2", "--set",
                 "data.train_rows=3000", "--set", "data.test_rows=400", "--set", "optimizer.lr=0.05"]) == 0
    np.savez(tmp_path / "rows.npz", X=X[:400])
    assert main(["predict", str(run), "--data", str(tmp_path / "rows.npz"), "--out",
                 str(tmp_path / "preds.csv"), "--quiet"]) == 0
    with open(tmp_path / "preds.csv") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["id", "prediction", *(f"p_{c}" for c in range(10))]
    accuracy = np.mean(np.array([int(r[1]) for r in rows[1:]]) == y[:400])
    summary = json.loads((run / "summary.json").read_text())
    assert accuracy == summary["final_accuracy"] and accuracy > 0.5
    np.savez(tmp_path / "labelled.npz", X=X[:400], y=y[:400])  # with the labels: the run's own score
    scored = predict_run(run, tmp_path / "labelled.npz").score
    assert scored.rows == 400 and scored.accuracy == summary["final_accuracy"]


@pytest.mark.parametrize("link", ["compression.cache=true", "compression.feedback=true"])
def test_cached_or_feedback_run_predicts_its_test_rows_as_its_first_evaluation(tmp_path, link):
    """Rows to predict are new samples to a cached (or error-feedback) link: an empty cache row, a
    zero residual. The run's evaluation met its test rows so only at its first epoch (later ones fill
    a test row's unsent entries from the previous evaluation), so a 1-epoch run's reported accuracy is
    reproduced."""
    try:
        X, y = load_image_split(resolve_data_root(None), "mnist", "test")
    except FedstreamError as exc:
        pytest.skip(f"MNIST not available: {exc}")
    run = tmp_path / "run"
    argv = ["run", "vfl-mnist", "--quiet", "--out", str(run)]
    for s in ("train.epochs=1", "data.train_rows=3000", "data.test_rows=400", "optimizer.lr=0.05",
              "compression.up=topk", link):
        argv += ["--set", s]
    assert main(argv) == 0
    np.savez(tmp_path / "rows.npz", X=X[:400])
    assert main(["predict", str(run), "--data", str(tmp_path / "rows.npz"), "--out",
                 str(tmp_path / "preds.csv"), "--quiet"]) == 0
    with open(tmp_path / "preds.csv") as f:
        predicted = np.array([int(r[1]) for r in list(csv.reader(f))[1:]])
    summary = json.loads((run / "summary.json").read_text())
    assert np.mean(predicted == y[:400]) == summary["final_accuracy"] > 0.3
