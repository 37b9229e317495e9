"""CHFL dataset readers: covertype (Kaggle CSV, UCI covtype.data), Sensorless (text, npz), OpenML
(ARFF, CSV, rtdl npz) on small files written here in the real formats, the dataset registry,
and the real files in shared/data."""

from pathlib import Path

import numpy as np
import pytest

from fedstream.data import _numtext
from fedstream.data.chfl_datasets import SPECS, load_chfl_dataset
from fedstream.data.covertype import FEATURES, read_covertype_kaggle, read_covertype_uci
from fedstream.data.openml import read_arff, read_openml_csv, read_rtdl_valtest_npz
from fedstream.data.sensorless import read_sensorless_npz, read_sensorless_txt
from fedstream.errors import ConfigError, DataError
from tests.helpers.data import write


def covertype_rows(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Integer features like the real file: 10 quantitative, 4 + 40 one-hot; classes 1..7."""
    rng = np.random.default_rng(seed)
    X = np.zeros((n, 54), dtype=np.int64)
    X[:, :10] = rng.integers(-200, 4000, size=(n, 10))
    X[np.arange(n), 10 + rng.integers(0, 4, n)] = 1
    X[np.arange(n), 14 + rng.integers(0, 40, n)] = 1
    return X, rng.integers(1, 8, n)


def kaggle_text(X: np.ndarray, y: np.ndarray, columns: list[str] | None = None) -> str:
    names = ["Id", *FEATURES, "Cover_Type"]
    rows = [[str(i + 1), *map(str, x), str(c)] for i, (x, c) in enumerate(zip(X, y))]
    if columns is not None:  # reorder / drop columns by name
        idx = [names.index(c) for c in columns]
        names, rows = columns, [[r[i] for i in idx] for r in rows]
    return "\r\n".join([",".join(names)] + [",".join(r) for r in rows]) + "\r\n"


@pytest.mark.parametrize("fname", ["train.csv", "train.csv.gz"])
def test_kaggle_covertype(tmp_path: Path, fname: str) -> None:
    X, y = covertype_rows(30)
    t = read_covertype_kaggle(write(tmp_path / fname, kaggle_text(X, y)))
    assert t.X.dtype == np.float32 and t.X.shape == (30, 54) and t.y.dtype == np.int64
    np.testing.assert_array_equal(t.X, X)
    np.testing.assert_array_equal(t.y, y - 1)
    assert t.feature_names == FEATURES


def test_kaggle_covertype_columns_found_by_name(tmp_path: Path) -> None:
    X, y = covertype_rows(12)
    cols = ["Cover_Type", *reversed(FEATURES)]  # no Id, reversed order
    t = read_covertype_kaggle(write(tmp_path / "t.csv", kaggle_text(X, y, cols)))
    np.testing.assert_array_equal(t.X, X)
    np.testing.assert_array_equal(t.y, y - 1)


def test_kaggle_covertype_missing_columns(tmp_path: Path) -> None:
    X, y = covertype_rows(5)
    names = ["Id", *FEATURES, "Cover_Type"]
    p = write(tmp_path / "test.csv", kaggle_text(X, y, [n for n in names if n != "Cover_Type"]))
    with pytest.raises(
        DataError, match=r"test\.csv: covertype CSV: line 1 \(header\): missing column\(s\) Cover_Type"
    ):
        read_covertype_kaggle(p)
    p = write(tmp_path / "t.csv", kaggle_text(X, y, [n for n in names if n != "Soil_Type7"]))
    with pytest.raises(DataError, match=r"t\.csv: .*missing column\(s\) Soil_Type7; expected"):
        read_covertype_kaggle(p)


@pytest.mark.parametrize("bad,col,match", [
    ("abc", 3, r"line 4, column 3 \(Aspect\): expected a number but found 'abc'"),
    ("", 2, r"line 4, column 2 \(Elevation\): expected a number but the value is missing"),
    ("8", 56, r"line 4, column 56 \(Cover_Type, the class\): expected an integer class 1\.\.7 but found '8'"),
    ("0", 56, r"line 4, column 56 \(Cover_Type, the class\): expected an integer class 1\.\.7 but found '0'"),
    ("2.5", 56, r"line 4, column 56 \(Cover_Type, the class\): expected an integer class 1\.\.7"),
])
def test_kaggle_covertype_bad_values(tmp_path: Path, bad: str, col: int, match: str) -> None:
    X, y = covertype_rows(6)
    lines = kaggle_text(X, y).split("\r\n")
    f = lines[3].split(",")
    f[col - 1] = bad
    lines[3] = ",".join(f)
    p = write(tmp_path / "k.csv.gz", "\r\n".join(lines))
    with pytest.raises(DataError, match=r"k\.csv\.gz: covertype CSV: " + match):
        read_covertype_kaggle(p)


def test_covtype_data(tmp_path: Path) -> None:
    X, y = covertype_rows(20)
    text = "".join(",".join(map(str, [*x, c])) + "\n" for x, c in zip(X, y))
    t = read_covertype_uci(write(tmp_path / "covtype.data.gz", text))
    np.testing.assert_array_equal(t.X, X)
    np.testing.assert_array_equal(t.y, y - 1)
    lines = text.splitlines()
    lines[6] = lines[6].rsplit(",", 2)[0]
    p = write(tmp_path / "covtype.data", "\n".join(lines) + "\n")
    with pytest.raises(
        DataError, match=r"covtype\.data: covertype covtype\.data: line 7: expected 55 columns but found 53"
    ):
        read_covertype_uci(p)


def test_errors_found_across_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_numtext, "CHUNK_LINES", 4)
    X, y = covertype_rows(23)
    y[17] = 9
    text = "".join(",".join(map(str, [*x, c])) + "\n" for x, c in zip(X, y))
    with pytest.raises(
        DataError,
        match=r"line 18, column 55 \(Cover_Type, the class\): expected an integer class 1\.\.7 but found '9'",
    ):
        read_covertype_uci(write(tmp_path / "c.data", text))
    y[17] = 3
    text = "".join(",".join(map(str, [*x, c])) + "\n" for x, c in zip(X, y))
    t = read_covertype_uci(write(tmp_path / "c.data", text))
    np.testing.assert_array_equal(t.X, X)


def sensorless_text(X: np.ndarray, y: np.ndarray) -> str:
    return "".join(" ".join(f"{v:.5g}" for v in x) + f" {c}\n" for x, c in zip(X, y))


def test_sensorless_txt(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    X = rng.standard_normal((15, 48)) * 1e-5
    y = rng.integers(1, 12, 15)
    t = read_sensorless_txt(write(tmp_path / "Sensorless_drive_diagnosis.txt", sensorless_text(X, y)))
    assert t.X.shape == (15, 48) and t.feature_names is None
    np.testing.assert_allclose(t.X, X, rtol=1e-4)
    np.testing.assert_array_equal(t.y, y - 1)


@pytest.mark.parametrize(
    "edit,match",
    [
        (
            lambda f: f.__setitem__(48, "12"),
            r"line 3, column 49 \(class, the class\): expected an integer class 1\.\.11 but found '12'",
        ),
        (
            lambda f: f.__setitem__(4, "x1"),
            r"line 3, column 5 \(feature 5\): expected a number but found 'x1'",
        ),
        (lambda f: f.__setitem__(4, "nan"), r"line 3, column 5 \(feature 5\): expected a finite number"),
        (lambda f: f.pop(7), r"line 3: expected 49 columns but found 48"),
    ],
)
def test_sensorless_txt_errors(tmp_path: Path, edit, match: str) -> None:
    rng = np.random.default_rng(2)
    lines = sensorless_text(rng.standard_normal((5, 48)), rng.integers(1, 12, 5)).splitlines()
    f = lines[2].split(" ")
    edit(f)
    lines[2] = " ".join(f)
    p = write(tmp_path / "s.txt.gz", "\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"s\.txt\.gz: Sensorless text: " + match):
        read_sensorless_txt(p)


def test_sensorless_npz(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    X, y = rng.standard_normal((11, 48)), np.arange(11)
    p = tmp_path / "s.npz"
    np.savez(p, X=X, y=y)
    t = read_sensorless_npz(p)
    assert t.X.dtype == np.float32 and t.y.tolist() == list(range(11))
    np.savez(p, X=X, y=y + 1)
    with pytest.raises(
        DataError, match=r"s\.npz: Sensorless npz: labels: expected classes 0\.\.10, found 11 at row 10"
    ):
        read_sensorless_npz(p)
    np.savez(p, X=X[:, :40], y=y)
    with pytest.raises(DataError, match=r"X: expected shape \(n, 48\), found \(11, 40\)"):
        read_sensorless_npz(p)
    np.savez(p, X=X)
    with pytest.raises(DataError, match=r"missing arrays \['y'\]"):
        read_sensorless_npz(p)


ARFF = """% jannis-like test file
% second comment

@RELATION 'test relation'

@ATTRIBUTE class {{0,1,2,3}}
@ATTRIBUTE V1 NUMERIC
@attribute 'V two' real
@ATTRIBUTE V3 integer

@DATA
{rows}"""


def arff_rows(rows: list[tuple]) -> str:
    return "".join(",".join(map(str, r)) + "\n" for r in rows)


@pytest.mark.parametrize("fname", ["j.arff", "j.arff.gz"])
def test_arff(tmp_path: Path, fname: str) -> None:
    rows = [(2, 0.5, -1.25, 3), ("'0'", 1e-3, 2, 7), (3, 0, 0, 0)]
    text = ARFF.format(rows=arff_rows(rows[:2]) + "% a comment in the data\n\n" + arff_rows(rows[2:]))
    t = read_arff(write(tmp_path / fname, text))
    np.testing.assert_allclose(t.X, [[0.5, -1.25, 3], [1e-3, 2, 7], [0, 0, 0]])
    assert t.y.tolist() == [2, 0, 3] and t.feature_names == ("V1", "V two", "V3")


@pytest.mark.parametrize(
    "row,match",
    [
        (
            (5, 1, 2, 3),
            r"line 13, column 1 \(class, the class\): expected one of the declared classes "
            r"\{0, 1, 2, 3\} but found '5'",
        ),
        ((1, "?", 2, 3), r"line 13, column 2 \(V1\): expected a number but the value is missing \('\?'\)"),
        ((1, 2, "a", 3), r"line 13, column 3 \(V two\): expected a number but found 'a'"),
    ],
)
def test_arff_bad_values(tmp_path: Path, row: tuple, match: str) -> None:
    p = write(tmp_path / "j.arff", ARFF.format(rows=arff_rows([(1, 1, 1, 1), row])))
    with pytest.raises(DataError, match=r"j\.arff: ARFF: " + match):
        read_arff(p)


def test_arff_header_errors(tmp_path: Path) -> None:
    p = write(tmp_path / "a.arff", ARFF.format(rows="1,1,1,1\n").replace("V3 integer", "V3 {a,b}"))
    with pytest.raises(
        DataError, match=r"a\.arff: ARFF: line 9: attribute 'V3' has type '\{a,b\}': expected numeric"
    ):
        read_arff(p)
    p = write(tmp_path / "a.arff", ARFF.format(rows="1,1,1,1\n"))
    with pytest.raises(DataError, match=r"missing class column 'Class2'"):
        read_arff(p, target="Class2")
    p = write(tmp_path / "a.arff", ARFF.format(rows="{0 1, 2 3.5}\n"))
    with pytest.raises(DataError, match=r"line 12: sparse ARFF rows"):
        read_arff(p)
    p = write(tmp_path / "a.arff", ARFF.format(rows="").replace("@DATA\n", ""))
    with pytest.raises(DataError, match=r"no @data line"):
        read_arff(p)
    p = write(tmp_path / "a.arff", ARFF.format(rows=""))
    with pytest.raises(DataError, match=r"a\.arff: ARFF: empty"):
        read_arff(p)


def test_arff_numeric_class(tmp_path: Path) -> None:
    text = ARFF.format(rows="1,0,0,0\n4,1,1,1\n").replace("class {0,1,2,3}", "class numeric")
    t = read_arff(write(tmp_path / "n.arff", text), label_min=1, n_classes=4)
    assert t.y.tolist() == [0, 3]
    with pytest.raises(DataError, match=r"expected an integer class 1\.\.3 but found '4'"):
        read_arff(write(tmp_path / "n.arff", text), label_min=1, n_classes=3)


def test_openml_csv(tmp_path: Path) -> None:
    text = '"V1","V2","Class","row_id"\n0.5,1,2,10\n-1,2e3,"0",11\n'
    t = read_openml_csv(write(tmp_path / "h.csv.gz", text), n_classes=100, ignore=["row_id"])
    np.testing.assert_allclose(t.X, [[0.5, 1], [-1, 2000]])
    assert t.y.tolist() == [2, 0] and t.feature_names == ("V1", "V2")
    with pytest.raises(
        DataError,
        match=r"h\.csv\.gz: OpenML CSV: line 2, column 3 \(Class, the class\): "
        r"expected an integer class 0\.\.1 but found '2'",
    ):
        read_openml_csv(tmp_path / "h.csv.gz", n_classes=2, ignore=["row_id"])
    with pytest.raises(DataError, match=r"h\.csv\.gz: OpenML CSV: missing class column 'target'"):
        read_openml_csv(tmp_path / "h.csv.gz", target="target")


def test_rtdl_npz(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    p = tmp_path / "j.npz"
    Xv, Xt = rng.standard_normal((4, 54)).astype(np.float32), rng.standard_normal((3, 54)).astype(np.float32)
    np.savez(p, X_val=Xv, y_val=[0, 1, 2, 3], X_test=Xt, y_test=[3, 3, 1], idx_test=[5, 6, 7])
    t = read_rtdl_valtest_npz(p, n_features=54, n_classes=4, name="jannis")
    np.testing.assert_array_equal(t.X, np.concatenate([Xv, Xt]))
    assert t.y.tolist() == [0, 1, 2, 3, 3, 3, 1]
    np.savez(p, X_val=Xv, y_val=[0, 1, 2, 4], X_test=Xt, y_test=[3, 3, 1])
    with pytest.raises(
        DataError, match=r"j\.npz: jannis npz: labels: expected classes 0\.\.3, found 4 at row 3"
    ):
        read_rtdl_valtest_npz(p, n_features=54, n_classes=4, name="jannis")
    np.savez(p, X_val=Xv, y_val=[0, 1, 2, 3])
    with pytest.raises(DataError, match=r"missing arrays \['X_test', 'y_test'\]"):
        read_rtdl_valtest_npz(p, n_features=54, n_classes=4, name="jannis")


def test_registry_picks_the_best_file_and_reports_status(tmp_path: Path) -> None:
    (tmp_path / "jannis_partial").mkdir()
    rng = np.random.default_rng(5)
    X = rng.standard_normal((6, 54)).astype(np.float32)
    np.savez(tmp_path / "jannis_partial" / "jannis_rtdl_valtest.npz", X_val=X[:3], y_val=[0, 1, 2],
             X_test=X[3:], y_test=[3, 0, 1])
    d = load_chfl_dataset("jannis", tmp_path)
    assert d.status.startswith("partial") and d.table.X.shape == (6, 54)
    (tmp_path / "jannis").mkdir()
    write(tmp_path / "jannis" / "jannis.arff", ARFF.format(rows="1,1,1,1\n"))
    d = load_chfl_dataset("jannis", tmp_path)
    assert d.status == "complete" and d.table.X.shape == (1, 3)
    with pytest.raises(
        DataError, match=r"(?s)helena: no data file found .*helena\.arff\.gz.*OpenML dataset 41169"
    ):
        load_chfl_dataset("helena", tmp_path)
    with pytest.raises(ConfigError, match=r"dataset 'mnist': expected one of covertype, covertype-uci"):
        load_chfl_dataset("mnist", tmp_path)


def test_real_files(data_root: Path) -> None:
    cov = load_chfl_dataset("covertype", data_root)
    if not cov.path.name.startswith("train.csv"):
        pytest.skip("Kaggle covertype not in the data root")
    assert cov.status == "complete" and cov.table.X.shape == (15120, 54)
    assert np.bincount(cov.table.y).tolist() == [2160] * 7
    np.testing.assert_array_equal(cov.table.X[0, :10], [2596, 51, 3, 258, 0, 510, 221, 232, 148, 6279])
    sen = load_chfl_dataset("sensorless", data_root)
    assert sen.status.startswith("subset") and sen.table.X.shape == (2200, 48)
    assert np.bincount(sen.table.y).tolist() == [200] * 11
    jan = load_chfl_dataset("jannis", data_root)
    assert jan.status.startswith("partial") and jan.table.X.shape == (30145, 54)
    assert np.bincount(jan.table.y).tolist() == [270 + 337, 4607 + 5758, 2357 + 2947, 6164 + 7705]
    assert SPECS["jannis"].n_classes == 4
