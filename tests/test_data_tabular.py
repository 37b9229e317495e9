"""UCI HIGGS/SUSY CSV and rtdl higgs-small npz readers, on files written here and the real subset."""

import gzip
from pathlib import Path

import numpy as np
import pytest

from fedstream.data.tabular import read_higgs_npz, read_uci_csv
from fedstream.errors import DataError
from tests.helpers.data import DATA, uci_text, write

HIGGS_DIR = DATA / "higgs_subset"


def make_rows(n: int, d: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, d)).astype(np.float32), rng.integers(0, 2, n)


def h2o_text(X: np.ndarray, y: np.ndarray) -> str:
    """H2O style: header response,x1,... and values like 8.69E-01."""
    head = ",".join(["response"] + [f"x{j + 1}" for j in range(X.shape[1])]) + "\n"
    return head + "".join(",".join(f"{v:.2E}" for v in (float(lab), *row)) + "\n"
                          for lab, row in zip(y, X))


@pytest.mark.parametrize("d,name", [(28, "HIGGS"), (18, "SUSY")])
@pytest.mark.parametrize("fname", ["f.csv.gz", "f.csv"])
def test_uci_format(tmp_path: Path, d: int, name: str, fname: str) -> None:
    X, y = make_rows(50, d)
    Xr, yr = read_uci_csv(write(tmp_path / fname, uci_text(X, y)), n_features=d, name=name)
    assert Xr.dtype == np.float32 and Xr.shape == (50, d) and yr.dtype == np.int64
    np.testing.assert_array_equal(Xr, X)  # float32 printed with 18 digits: exact
    np.testing.assert_array_equal(yr, y)


@pytest.mark.parametrize("fname", ["f.csv.gz", "f.csv"])
def test_h2o_header_format(tmp_path: Path, fname: str) -> None:
    X, y = make_rows(40, 28)
    Xr, yr = read_uci_csv(write(tmp_path / fname, h2o_text(X, y)), n_features=28, name="HIGGS")
    assert Xr.shape == (40, 28)
    np.testing.assert_allclose(Xr, X, rtol=6e-3, atol=1e-6)
    np.testing.assert_array_equal(yr, y)


def test_integer_labels_blank_lines_crlf_and_max_rows(tmp_path: Path) -> None:
    X, y = make_rows(30, 18)
    text = uci_text(X, y).replace("1.000000000000000000e+00,", "1,", 3) + "\n\n"
    p = write(tmp_path / "s.csv", text.replace("\n", "\r\n"))
    Xr, yr = read_uci_csv(p, n_features=18, name="SUSY")
    np.testing.assert_array_equal(Xr, X)
    np.testing.assert_array_equal(yr, y)
    Xm, ym = read_uci_csv(p, n_features=18, name="SUSY", max_rows=7)
    np.testing.assert_array_equal(Xm, X[:7])
    np.testing.assert_array_equal(ym, y[:7])


def test_chunked_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fedstream.data import tabular

    monkeypatch.setattr(tabular, "CHUNK_LINES", 7)
    X, y = make_rows(50, 18)
    p = write(tmp_path / "s.csv.gz", h2o_text(X, y).replace("response", "label"))
    Xr, yr = read_uci_csv(p, n_features=18, name="SUSY")
    np.testing.assert_array_equal(yr, y)
    assert Xr.shape == (50, 18)
    assert read_uci_csv(p, n_features=18, name="SUSY", max_rows=23)[0].shape == (23, 18)


def lines_of(d: int, n: int = 5) -> list[str]:
    X, y = make_rows(n, d)
    return uci_text(X, y).splitlines()


@pytest.mark.parametrize("header", [False, True])
def test_wrong_column_count(tmp_path: Path, header: bool) -> None:
    lines = lines_of(28)
    lines[3] = lines[3].rsplit(",", 1)[0]  # 28 columns
    if header:
        lines.insert(0, "response," + ",".join(f"x{j}" for j in range(1, 29)))
    p = write(tmp_path / "h.csv.gz", "\n".join(lines) + "\n")
    line = 5 if header else 4
    with pytest.raises(DataError, match=rf"h\.csv\.gz: HIGGS CSV: line {line}: expected 29 columns "
                       r"\(label \+ 28 HIGGS features\) but found 28"):
        read_uci_csv(p, n_features=28, name="HIGGS")


def test_susy_file_read_as_higgs(tmp_path: Path) -> None:
    p = write(tmp_path / "SUSY.csv", "\n".join(lines_of(18)) + "\n")
    with pytest.raises(DataError, match="SUSY.csv: HIGGS CSV: line 1: expected 29 columns .* found 19"):
        read_uci_csv(p, n_features=28, name="HIGGS")


def test_non_numeric(tmp_path: Path) -> None:
    lines = lines_of(18)
    f = lines[2].split(",")
    f[5] = "abc"
    lines[2] = ",".join(f)
    p = write(tmp_path / "s.csv", "\n".join(lines) + "\n")
    with pytest.raises(
        DataError, match=r"s\.csv: SUSY CSV: line 3, column 6: expected a number but found 'abc'"
    ):
        read_uci_csv(p, n_features=18, name="SUSY")


@pytest.mark.parametrize("bad", ["nan", "inf", "-Infinity"])
def test_non_finite(tmp_path: Path, bad: str) -> None:
    lines = lines_of(18)
    f = lines[4].split(",")
    f[18] = bad
    lines[4] = ",".join(f)
    p = write(tmp_path / "s.csv.gz", "\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"s\.csv\.gz: SUSY CSV: line 5, column 19: expected a finite number"):
        read_uci_csv(p, n_features=18, name="SUSY")


@pytest.mark.parametrize("label", ["2", "0.5", "-1"])
def test_bad_label(tmp_path: Path, label: str) -> None:
    lines = lines_of(18)
    lines[1] = label + "," + lines[1].split(",", 1)[1]
    p = write(tmp_path / "s.csv", "\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"s\.csv: SUSY CSV: line 2, column 1 \(label\): expected 0 or 1"):
        read_uci_csv(p, n_features=18, name="SUSY")


@pytest.mark.parametrize("text", ["", "\n", "response," + ",".join(f"x{j}" for j in range(1, 19)) + "\n"])
def test_empty(tmp_path: Path, text: str) -> None:
    p = write(tmp_path / "e.csv.gz", text)
    with pytest.raises(DataError, match=r"e\.csv\.gz: SUSY CSV: empty"):
        read_uci_csv(p, n_features=18, name="SUSY")


def test_corrupt_gzip(tmp_path: Path) -> None:
    data = gzip.compress(("\n".join(lines_of(28, 400)) + "\n").encode())
    p = tmp_path / "HIGGS.csv.gz"
    p.write_bytes(data[: len(data) - 50])
    with pytest.raises(DataError, match=r"HIGGS\.csv\.gz: corrupt or truncated gzip"):
        read_uci_csv(p, n_features=28, name="HIGGS")
    p.write_bytes(b"<html>404</html>")
    with pytest.raises(DataError, match=r"HIGGS\.csv\.gz: not a gzip file"):
        read_uci_csv(p, n_features=28, name="HIGGS")


def test_npz_round_trip_and_errors(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    Xv, Xt = rng.standard_normal((4, 28)).astype(np.float32), rng.standard_normal((3, 28)).astype(np.float32)
    yv, yt = np.array([0, 1, 1, 0]), np.array([1, 0, 1])
    iv, it = np.array([9, 2, 5, 0]), np.array([7, 1, 3])
    p = tmp_path / "h.npz"
    np.savez(p, X_val=Xv, y_val=yv, idx_val=iv, X_test=Xt, y_test=yt, idx_test=it)
    X, y = read_higgs_npz(p)
    order = np.argsort(np.concatenate([iv, it]))
    np.testing.assert_array_equal(X, np.concatenate([Xv, Xt])[order])
    np.testing.assert_array_equal(y, np.concatenate([yv, yt])[order])
    np.savez(p, X_val=Xv, y_val=yv, idx_val=iv, X_test=Xt, y_test=yt)
    with pytest.raises(DataError, match=r"h\.npz: missing arrays \['idx_test'\]"):
        read_higgs_npz(p)
    Xv[1, 3] = np.nan
    np.savez(p, X_val=Xv, y_val=yv, idx_val=iv, X_test=Xt, y_test=yt, idx_test=it)
    with pytest.raises(DataError, match=r"h\.npz: X_val: expected finite"):
        read_higgs_npz(p)
    np.savez(p, X_val=Xv[:, :27], y_val=yv, idx_val=iv, X_test=Xt, y_test=yt, idx_test=it)
    with pytest.raises(DataError, match=r"h\.npz: X_val: expected shape \(n, 28\)"):
        read_higgs_npz(p)
    np.savez_compressed(p, X_val=Xv, y_val=yv, idx_val=iv, X_test=Xt, y_test=yt, idx_test=it)
    p.write_bytes(p.read_bytes()[:-200])  # truncated download
    with pytest.raises(DataError, match=r"h\.npz: not a readable npz"):
        read_higgs_npz(p)
    p.write_bytes(b"PK\x03\x04garbage")
    with pytest.raises(DataError, match=r"h\.npz: not a readable npz"):
        read_higgs_npz(p)


@pytest.mark.skipif(
    not HIGGS_DIR.is_dir(), reason=f"HIGGS subset not found at {HIGGS_DIR} (set FEDSTREAM_DATA)"
)
def test_real_higgs_subset() -> None:
    X, y = read_uci_csv(HIGGS_DIR / "higgs_first10k_h2o_3sigdigits.csv.gz", n_features=28, name="HIGGS")
    assert X.shape == (10000, 28) and np.bincount(y).tolist() == [4705, 5295]
    np.testing.assert_allclose(X[0, :3], [0.869, -0.635, 0.226], rtol=1e-6)
    Xn, yn = read_higgs_npz(HIGGS_DIR / "higgs_small_rtdl_valtest.npz")
    assert Xn.shape == (35298, 28) and Xn.dtype == np.float32
    assert np.bincount(yn).tolist() == [7396 + 9245, 8292 + 10365]
    # rtdl row 0 is HIGGS.csv row 1, i.e. row 1 of the H2O file (3 significant digits)
    np.testing.assert_allclose(Xn[0], X[1], rtol=6e-3, atol=1e-3)
    assert yn[0] == y[1] == 1
