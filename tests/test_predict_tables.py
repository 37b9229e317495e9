"""``fedstream predict`` on runs over a user's table (issue 21): every task, a categorical column
encoded as the run encoded it, and a CHFL run's chosen models predicting as the run scored them."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from fedstream.chfl.splits import split_rows
from fedstream.cli import main
from fedstream.config import load_config
from fedstream.data.table import read_table
from fedstream.data.table_source import TableSource, TableSpec
from fedstream.errors import DataError
from fedstream.predict import predict_run

ROOT = Path(__file__).resolve().parents[1]
CUSTOMERS = ROOT / "examples" / "customers.csv"


def customer_rows() -> tuple[list[str], list[list[str]]]:
    with open(CUSTOMERS) as f:
        rows = list(csv.reader(f))
    return rows[0], rows[1:]


def write_rows(path: Path, header: list[str], rows: list[list[str]]) -> Path:
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows([header, *rows])
    return path


def predictions(path: Path) -> tuple[list[str], list[str], np.ndarray]:
    with open(path) as f:
        rows = list(csv.reader(f))
    return rows[0], [r[0] for r in rows[1:]], rows[1:]


def test_a_table_source_standardises_new_rows_as_its_own_categorical_included(tmp_path):
    spec = TableSpec(str(CUSTOMERS), "segment", "id", "channel", None, n_clients=3, stats_rows=200)
    source = TableSource(spec)
    table = read_table(CUSTOMERS)
    np.testing.assert_array_equal(source.standardise(table), source.features(np.arange(source.n_base)))
    assert source.n_features == 11 + len(source.categories["channel"]) >= 13  # channel one-hot
    header, rows = customer_rows()
    keep = [j for j, n in enumerate(header) if n != "channel"]
    lacking = write_rows(tmp_path / "lacking.csv", [header[j] for j in keep], [[r[j] for j in keep]
                                                                               for r in rows[:3]])
    with pytest.raises(DataError, match="column 'channel': no such column"):
        source.standardise(read_table(lacking))
    with pytest.raises(DataError, match="expected rows of a table file"):
        source.standardise(np.zeros((2, 14)))


def test_ovfl_on_a_table_predicts_rows_of_a_csv_with_a_categorical_column(tmp_path):
    run = tmp_path / "run"
    assert main(["run", str(ROOT / "examples" / "customers-ovfl.toml"), "--quiet", "--out", str(run),
                 "--set", f"data.path={CUSTOMERS}", "--set", "stream.passes=1"]) == 0
    header, rows = customer_rows()
    data = write_rows(tmp_path / "new.csv", [n for n in header if n != "segment"],
                      [[c for j, c in enumerate(r) if header[j] != "segment"] for r in rows[:50]])
    assert main(["predict", str(run), "--data", str(data), "--out", str(tmp_path / "p.csv"), "--quiet"]) == 0
    head, ids, body = predictions(tmp_path / "p.csv")
    assert head == ["id", "prediction", "p_bronze", "p_gold", "p_silver"]
    assert ids == [r[0] for r in rows[:50]]
    assert {r[1] for r in body} <= {"bronze", "gold", "silver"}
    np.testing.assert_allclose([sum(float(p) for p in r[2:]) for r in body], 1.0, atol=1e-5)


def test_vfl_on_a_table_predicts_its_test_rows_as_it_scored_them(tmp_path):
    run = tmp_path / "run"
    assert main(["run", str(ROOT / "examples" / "customers-vfl.toml"), "--quiet", "--out", str(run),
                 "--set", f"data.path={CUSTOMERS}"]) == 0
    summary = json.loads((run / "summary.json").read_text())
    header, rows = customer_rows()
    test = rows[-summary["test_rows"]:]
    data = write_rows(tmp_path / "test.csv", header, test)
    assert main(["predict", str(run), "--data", str(data), "--out", str(tmp_path / "p.csv"), "--quiet"]) == 0
    _, ids, body = predictions(tmp_path / "p.csv")
    assert ids == [r[0] for r in test]
    accuracy = np.mean([p[1] == r[header.index("segment")] for p, r in zip(body, test)])
    assert accuracy == pytest.approx(summary["final_accuracy"])
    assert predict_run(run, data).score.accuracy == pytest.approx(summary["final_accuracy"])  # data.label
    unknown = write_rows(tmp_path / "unknown.csv", header,
                         [[("platinum" if n == "segment" else c) for n, c in zip(header, r)] for r in test])
    message = "column 'segment' \\(data.label\\): row 0: label 'platinum' is not a class of the run"
    with pytest.raises(DataError, match=message + "; expected one of \\['bronze', 'gold', 'silver'\\]"):
        predict_run(run, unknown)


@pytest.mark.parametrize("label", ["1", ""], ids=["by-index", "by-default"])
def test_the_label_column_is_found_as_the_run_found_it(tmp_path, label):
    """data.label as a 0-based index, or left out (the first column that is not the id): the file's
    labels are still scored, and give the accuracy the run reported."""
    run = tmp_path / "run"
    assert main(["run", str(ROOT / "examples" / "customers-vfl.toml"), "--quiet", "--out", str(run),
                 "--set", f"data.path={CUSTOMERS}", "--set", f"data.label={label}"]) == 0
    summary = json.loads((run / "summary.json").read_text())
    header, rows = customer_rows()
    data = write_rows(tmp_path / "test.csv", header, rows[-summary["test_rows"]:])
    assert predict_run(run, data).score.accuracy == pytest.approx(summary["final_accuracy"])
    unlabelled = write_rows(tmp_path / "new.csv", [n for n in header if n != "segment"],
                            [[c for n, c in zip(header, r) if n != "segment"] for r in rows[:5]])
    assert predict_run(run, unlabelled).score is None


def test_chfl_keeps_its_final_model_and_each_client_predicts_as_the_run_scored_it(tmp_path):
    run = tmp_path / "run"
    config = ROOT / "examples" / "customers-chfl.toml"
    assert main(["run", str(config), "--quiet", "--out", str(run), "--set", f"data.path={CUSTOMERS}"]) == 0
    assert (run / "model.pt").exists() and not (run / "checkpoint.pt").exists()
    summary = json.loads((run / "summary.json").read_text())
    header, rows = customer_rows()
    cfg = load_config(config, {"data.path": str(CUSTOMERS)})
    test = [rows[i] for i in split_rows(len(rows), cfg["chfl.clients"], seed=cfg["seed"]).test]
    data = write_rows(tmp_path / "test.csv", header, test)
    for k in range(cfg["chfl.clients"]):
        out = tmp_path / f"p{k}.csv"
        assert main(["predict", str(run), "--data", str(data), "--out", str(out), "--client", str(k),
                     "--quiet"]) == 0
        head, ids, body = predictions(out)
        assert head[:2] == ["id", "prediction"] and ids == [r[0] for r in test]
        accuracy = np.mean([p[1] == r[header.index("segment")] for p, r in zip(body, test)])
        assert accuracy == pytest.approx(summary["test_acc_per_client"][k])
        assert predict_run(run, data, client=k).score.accuracy == pytest.approx(accuracy)  # its labels
    assert main(["predict", str(run), "--data", str(data), "--out", str(tmp_path / "x.csv"), "--client",
                 "7"]) == 2


def test_every_source_standardises_raw_rows_as_it_gives_its_own():
    """Source.standardise is what predict applies for every task: on a source's own raw rows it must
    give what features() gives (images, a tabular data set; the table: above)."""
    from fedstream.data.sources import ImageSource, TabularSource

    rng = np.random.default_rng(1)
    images = rng.integers(0, 256, (20, 28, 28), dtype=np.uint8)
    source = ImageSource(images, np.arange(20) % 10, name="mnist", deform=False)
    np.testing.assert_array_equal(source.standardise(images), source.features(np.arange(20)))
    np.testing.assert_array_equal(source.standardise(images.reshape(20, -1)), source.features(np.arange(20)))
    with pytest.raises(DataError, match="0..255"):
        source.standardise(images.astype(np.int16) - 1)
    X = rng.normal(size=(30, 5)).astype(np.float32)
    tabular = TabularSource(X, np.arange(30) % 2, name="higgs", stats_rows=10)
    np.testing.assert_array_equal(tabular.standardise(X), tabular.features(np.arange(30)))
    with pytest.raises(DataError, match=r"expected raw rows, an array \(n, 5\)"):
        tabular.standardise(X[:, :4])


def test_chfl_on_a_data_set_predicts_raw_rows_of_it(covertype_root, tmp_path):
    """chfl-covertype (a 700-row subset): the raw rows of the run's test split, predicted by each
    client's chosen model, give the accuracy the run reported for it."""
    from fedstream.data.chfl_datasets import load_chfl_dataset

    run = tmp_path / "run"
    sets = ["chfl.max_rows=700", "chfl.hidden=8", "chfl.rounds=2", "chfl.local_epochs=1", "chfl.lrs=0.01",
            f"data.root={covertype_root}"]
    args = [x for s in sets for x in ("--set", s)]
    assert main(["run", "chfl-covertype", "--quiet", "--out", str(run), *args]) == 0
    summary = json.loads((run / "summary.json").read_text())
    loaded = load_chfl_dataset("covertype", covertype_root)
    n = len(loaded.table.y)
    subset = np.sort(np.random.default_rng([0, 4]).choice(n, 700, replace=False))
    test = subset[split_rows(700, summary["settings"]["clients"], seed=0).test]
    np.savez(tmp_path / "rows.npz", X=loaded.table.X[test], id=test)
    for k in (0, 2):
        out = tmp_path / f"p{k}.csv"
        assert main(["predict", str(run), "--data", str(tmp_path / "rows.npz"), "--out", str(out), "--client",
                     str(k), "--quiet"]) == 0
        head, ids, body = predictions(out)
        assert ids == [str(i) for i in test] and len(head) == 2 + 7
        accuracy = np.mean([int(p[1]) == t for p, t in zip(body, loaded.table.y[test])])
        assert accuracy == pytest.approx(summary["test_acc_per_client"][k])


def test_chfl_with_one_file_per_client_predicts_each_clients_rows(tmp_path):
    """Each client file's own test rows, predicted by that client from its own columns (by name),
    give the accuracy the run reported for it."""
    from fedstream.chfl.splits import FRACTIONS

    header, rows = customer_rows()
    own = {0: ["income", "balance", "visits"], 1: ["income", "balance", "channel", "minutes"],
           2: ["income", "balance", "tenure"]}
    files = []
    for k, columns in own.items():
        keep = [header.index(c) for c in ["id", "segment", *columns]]
        files.append(write_rows(tmp_path / f"c{k}.csv", [header[j] for j in keep],
                                [[r[j] for j in keep] for r in rows[200 * k:200 * (k + 1)]]))
    config = tmp_path / "chfl.toml"
    config.write_text('task = "chfl"\n')
    sets = [f"data.path={';'.join(map(str, files))}", "data.name=table", "data.id=id", "data.label=segment",
            "data.categorical=channel", "chfl.hidden=16", "chfl.rounds=2", "chfl.local_epochs=2",
            "chfl.lrs=0.01", "chfl.mus=0"]
    run = tmp_path / "run"
    args = [x for s in sets for x in ("--set", s)]
    assert main(["run", str(config), *args, "--out", str(run), "--quiet"]) == 0
    summary = json.loads((run / "summary.json").read_text())
    for k, path in enumerate(files):
        head, body = customer_like(path)
        n_train, n_val = round(FRACTIONS[0] * len(body)), round(FRACTIONS[1] * len(body))
        test = np.sort(np.random.default_rng([0, 3, k]).permutation(len(body))[n_train + n_val:])
        data = write_rows(tmp_path / f"test{k}.csv", head, [body[i] for i in test])
        out = tmp_path / f"p{k}.csv"
        assert main(["predict", str(run), "--data", str(data), "--out", str(out), "--client", str(k),
                     "--quiet"]) == 0
        _, ids, got = predictions(out)
        assert ids == [body[i][0] for i in test]
        accuracy = np.mean([p[1] == body[i][1] for p, i in zip(got, test)])
        assert accuracy == pytest.approx(summary["test_acc_per_client"][k])


def customer_like(path: Path) -> tuple[list[str], list[list[str]]]:
    with open(path) as f:
        rows = list(csv.reader(f))
    return rows[0], rows[1:]
