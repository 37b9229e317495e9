"""data.name = "table": the reader (CSV, CSV.gz, NPZ, Parquet), partitions, classes, several files, and
bad input as one line with exit 2 naming the file, row and column (files written here)."""

import gzip
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from fedstream.cli import main
from fedstream.config import load_config
from fedstream.data import TableSource, TableSpec, read_table
from fedstream.errors import ConfigError, DataError

HEADER = "id,label,a,b,c,d,e,f"


def rows(n: int = 40, seed: int = 0) -> list[list[str]]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 6))
    labels = np.array(["cat", "dog", "emu"])[np.arange(n) % 3]
    return [[f"r{i}", labels[i], *(f"{v:.4f}" for v in X[i])] for i in range(n)]


def write_csv(path: Path, header: str = HEADER, body: list[list[str]] | None = None) -> Path:
    text = header + "\n" + "".join(",".join(r) + "\n" for r in (rows() if body is None else body))
    if path.name.endswith(".gz"):
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


def source(path, **keys) -> TableSource:
    spec = dict(path=str(path), label="label", id="id", n_clients=2, stats_rows=20) | keys
    return TableSource(TableSpec(**spec))


@pytest.mark.parametrize("name", ["t.csv", "t.csv.gz"])
def test_csv_default_partition_classes_and_standardisation(tmp_path, name):
    src = source(write_csv(tmp_path / name))
    assert src.n_base == 40 and src.n_features == 6 and src.n_classes == 3
    assert src.classes == ["cat", "dog", "emu"]
    assert src.blocks == [slice(0, 3), slice(3, 6)]  # equal contiguous blocks over the features
    assert src.client_columns == [["a", "b", "c"], ["d", "e", "f"]]
    np.testing.assert_array_equal(src.labels(np.arange(4)), [0, 1, 2, 0])
    X = src.features(np.arange(20))
    np.testing.assert_allclose(X.mean(axis=0), 0, atol=1e-5)  # standardised by the first 20 rows
    np.testing.assert_allclose(X.std(axis=0), 1, atol=1e-4)
    np.testing.assert_array_equal(src.features(np.array([40])), src.features(np.array([0])))  # passes


def test_npz_matches_csv(tmp_path):
    body = rows()
    cols = list(zip(*body))
    np.savez(tmp_path / "t.npz", id=np.array(cols[0]), label=np.array(cols[1]),
             **{k: np.array(cols[2 + j], dtype=np.float64) for j, k in enumerate("abcdef")})
    a, b = source(tmp_path / "t.npz"), source(write_csv(tmp_path / "t.csv", body=body))
    np.testing.assert_array_equal(a.features(np.arange(40)), b.features(np.arange(40)))
    np.testing.assert_array_equal(a.labels(np.arange(40)), b.labels(np.arange(40)))


@pytest.mark.skipif(importlib.util.find_spec("pyarrow") is None,
                    reason="pyarrow is not installed (the optional extra fedstream[parquet])")
def test_parquet_matches_csv(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    body = rows()
    cols = list(zip(*body))
    data = {"id": list(cols[0]), "label": list(cols[1])} | {k: [float(v) for v in cols[2 + j]]
                                                              for j, k in enumerate("abcdef")}
    pq.write_table(pa.table(data), tmp_path / "t.parquet")
    a, b = source(tmp_path / "t.parquet"), source(write_csv(tmp_path / "t.csv", body=body))
    np.testing.assert_array_equal(a.features(np.arange(40)), b.features(np.arange(40)))


def test_parquet_without_pyarrow_says_how_to_install(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    (tmp_path / "t.parquet").write_bytes(b"PAR1")
    with pytest.raises(DataError, match=r'pip install "fedstream\[parquet\]"'):
        read_table(tmp_path / "t.parquet")


def test_partition_by_name_and_index_range_and_categorical(tmp_path):
    body = [r[:5] + [["red", "blue"][i % 2]] + r[6:] for i, r in enumerate(rows())]
    src = source(write_csv(tmp_path / "t.csv", body=body), partition="a, 4-4; f,e,d", categorical="d")
    assert src.client_columns == [["a", "c"], ["f", "e", "d"]]
    assert src.blocks == [slice(0, 2), slice(2, 6)]  # d: two one-hot columns
    hot = src.features(np.arange(4))[:, 4:6]
    np.testing.assert_array_equal(hot, [[0, 1], [1, 0], [0, 1], [1, 0]])  # blue, red sorted; not scaled


def test_numeric_labels_sorted_by_value(tmp_path):
    body = [[r[0], ["10", "2", "3"][i % 3], *r[2:]] for i, r in enumerate(rows())]
    assert source(write_csv(tmp_path / "t.csv", body=body)).classes == [2, 3, 10]


def test_several_files_aligned_by_id(tmp_path):
    body = rows()
    server = write_csv(tmp_path / "s.csv", "id,label", [r[:2] for r in body])
    shuffled = body[::-1]
    c0 = write_csv(tmp_path / "c0.csv", "a,b,c,id", [r[2:5] + [r[0]] for r in shuffled])
    c1 = write_csv(tmp_path / "c1.csv", "id,d,e,f", [[r[0]] + r[5:] for r in body])
    one = source(write_csv(tmp_path / "t.csv", body=body))
    many = source(f"{server};{c0};{c1}")
    assert many.client_columns == [["a", "b", "c"], ["d", "e", "f"]]
    np.testing.assert_array_equal(many.features(np.arange(40)), one.features(np.arange(40)))


def test_config_infers_clients_and_rounds(tmp_path):
    path = write_csv(tmp_path / "t.csv")
    cfg = load_config(None, {"data.name": "table", "data.path": str(path), "vfl.partition": "a;b;c,d"})
    assert cfg["vfl.clients"] == 3 and cfg["rounds"] is None
    with pytest.raises(ConfigError, match="read only with data.name"):
        load_config(None, {"data.name": "higgs", "data.path": str(path)})


def run(tmp_path, *sets):
    common = ["--set", "task=ovfl", "--set", "data.name=table", "--set", "data.id=id", "--set",
              "data.label=label", "--set", "vfl.clients=2", "--set", "eval.interval=20", "--quiet"]
    config = tmp_path / "ovfl.toml"
    config.write_text('task = "ovfl"\n')
    return main(["run", str(config), *common, *(x for s in sets for x in ("--set", s)),
                 "--out", str(tmp_path / "run")])


def test_run_end_to_end_with_passes(tmp_path):
    path = write_csv(tmp_path / "t.csv")
    assert run(tmp_path, f"data.path={path}", "stream.passes=2") == 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["rounds"] == 80 and summary["classes"] == ["cat", "dog", "emu"]
    assert len(summary["interval_errors"]) == 4


def bad(body_edit=None, header=HEADER):
    body = rows()
    if body_edit:
        body_edit(body)
    return header, body


def set_cell(r, c, v):
    def edit(body):
        body[r][c] = v
    return edit


@pytest.mark.parametrize("edit,sets,needles", [
    (set_cell(6, 3, "abc"), [], ["row 7 (line 8)", "column 'b'", "'abc'"]),
    (set_cell(9, 4, "nan"), [], ["row 10 (line 11)", "column 'c'", "'nan'"]),
    (set_cell(2, 5, ""), [], ["row 3 (line 4)", "column 'd'"]),
    (None, ["vfl.partition=a,b;c,zz"], ["vfl.partition", "'zz'", "t.csv"]),
    (None, ["vfl.partition=a,b;b,c"], ["column 'b'", "two clients", "t.csv"]),
    (None, ["data.label=klass"], ["'klass'", "no such column", "t.csv"]),
    (None, ["vfl.partition=a,label;c"], ["'label'", "data.label"]),
    (set_cell(0, 1, ""), [], ["row 1 (line 2)", "column 'label'"]),
    (lambda b: [r.__setitem__(1, "x") for r in b], [], ["t.csv", "column 'label'", "two classes", "'x'"]),
    (None, ["rounds=81", "stream.passes=2"], ["rounds = 81", "40 rows", "stream.passes = 2"]),
])
def test_bad_input_one_line_exit_2(tmp_path, capsys, edit, sets, needles):
    header, body = bad(edit)
    path = write_csv(tmp_path / "t.csv", header, body)
    assert run(tmp_path, f"data.path={path}", *sets) == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert "np." not in err, err  # values as the file has them, not numpy's reprs
    for needle in needles:
        assert needle in err, err


@pytest.mark.parametrize("which,needles", [
    ("missing", None),  # aligned by private set intersection (tests/test_table_alignment.py)
    ("extra", None),
    ("repeat", ["c1.csv (client 1)", "row 41 (line 42)", "id r3 repeats row 4"]),
])
def test_ids_that_do_not_match_between_files(tmp_path, capsys, which, needles):
    body = rows()
    server = write_csv(tmp_path / "s.csv", "id,label", [r[:2] for r in body])
    c0 = write_csv(tmp_path / "c0.csv", "id,a,b,c", [[r[0]] + r[2:5] for r in body])
    client = [[r[0]] + r[5:] for r in body]
    if which == "missing":
        del client[4]
    else:
        client.append(["zz" if which == "extra" else "r3", "1", "2", "3"])
    c1 = write_csv(tmp_path / "c1.csv", "id,d,e,f", client)
    pytest.importorskip("private_set_intersection.python", reason="openmined-psi")
    assert run(tmp_path, f"data.path={server};{c0};{c1}") == (2 if needles else 0)
    if not needles:
        return
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert "np." not in err, err  # the id as the file has it, not numpy's repr np.str_('r4')
    for needle in needles:
        assert needle in err, err


def test_vfl_test_file_uses_the_training_encoding(tmp_path):
    from fedstream.vfl.settings import BatchVFLSettings
    from fedstream.vfl.table_data import load_vertical_table

    body = [r[:5] + [["red", "blue"][i % 2]] + r[6:] for i, r in enumerate(rows())]
    train = write_csv(tmp_path / "train.csv", body=body[:30])
    test = write_csv(tmp_path / "test.csv", body=body[30:])
    keys = {"data.name": "table", "data.path": str(train), "data.label": "label", "data.id": "id",
            "data.categorical": "d", "vfl.partition": "a,b,c;d,e,f", "data.test_fraction": 0.2,
            "data.test_path": str(test), "vfl.clients": 2}
    data = load_vertical_table(BatchVFLSettings.from_config(keys))
    assert data.train_x.shape == (30, 7) and data.test_x.shape == (10, 7)
    np.testing.assert_allclose(data.train_x[:, :3].mean(axis=0), 0, atol=1e-5)  # the training rows' stats
    split = load_vertical_table(BatchVFLSettings.from_config(keys | {"data.test_path": None,
                                                                     "data.path": str(write_csv(
                                                                         tmp_path / "all.csv", body=body))}))
    assert (len(split.train_y), len(split.test_y)) == (32, 8)
    bad = write_csv(tmp_path / "bad.csv", body=[r[:1] + ["yak"] + r[2:] for r in body[30:]])
    with pytest.raises(DataError, match=r"bad.csv: row 1 \(line 2\), column 'label'.*'yak' is not a class"):
        load_vertical_table(BatchVFLSettings.from_config(keys | {"data.test_path": str(bad)}))


def test_chfl_one_file_per_client(tmp_path):
    body = rows(60)
    files = []
    for k, cols in enumerate(("a,b,c", "a,b,d,e", "a,b,f")):
        idx = [2 + "abcdef".index(c) for c in cols.split(",")]
        files.append(write_csv(tmp_path / f"c{k}.csv", f"id,label,{cols}",
                               [r[:2] + [r[i] for i in idx] for r in body[20 * k:20 * (k + 1)]]))
    config = tmp_path / "chfl.toml"
    config.write_text('task = "chfl"\n')
    sets = [f"data.path={';'.join(map(str, files))}", "data.name=table", "data.id=id", "data.label=label",
            "chfl.hidden=8", "chfl.rounds=1", "chfl.local_epochs=1", "chfl.lrs=0.003", "chfl.mus=0"]
    out = tmp_path / "run"
    args = [x for s in sets for x in ("--set", s)]
    assert main(["run", str(config), *args, "--out", str(out), "--quiet"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["columns"] == ["a", "b", "c", "d", "e", "f"]
    assert summary["classes"] == ["cat", "dog", "emu"]
    assert summary["features"] == {"common": [0, 1], "unique": [[2], [3, 4], [5]]}
    assert summary["settings"]["clients"] == 3 and len(summary["test_acc_per_client"]) == 3


def test_what_is_not_wired_yet_is_refused_by_name(tmp_path):
    from fedstream.ovfl.deploy.parties import check_deployable

    path = str(write_csv(tmp_path / "t.csv"))
    with pytest.raises(ConfigError, match='one file per client runs with chfl.mode = "batch"'):
        load_config(None, {"task": "chfl", "data.name": "table", "data.path": f"{path};{path}",
                           "chfl.mode": "stream"})
    with pytest.raises(ConfigError, match="deploys with one file per party"):
        check_deployable(load_config(None, {"data.name": "table", "data.path": path}))
    with pytest.raises(ConfigError, match="only data.name = \"table\""):
        load_config(None, {"rounds": None})


def test_chfl_stream_mode_on_a_table(tmp_path):
    """chfl.mode = "stream" on one table: the rows dealt to the clients and played tick by tick."""
    config = tmp_path / "chfl.toml"
    config.write_text('task = "chfl"\n')
    body = [r[:5] + [["red", "blue"][i % 2]] + r[6:] for i, r in enumerate(rows(120))]
    sets = [f"data.path={write_csv(tmp_path / 't.csv', body=body)}", "data.name=table", "data.id=id",
            "data.label=label", "data.categorical=d", "chfl.mode=stream", "chfl.clients=2", "chfl.hidden=8",
            "chfl.stream_batch=4", "chfl.stream_sync_every=3", "chfl.stream_eval_every=5"]
    out = tmp_path / "run"
    args = [x for s in sets for x in ("--set", s)]
    assert main(["run", str(config), *args, "--out", str(out), "--quiet"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["ticks"] == 60 // 4 and 0 <= summary["prequential_acc"] <= 1
    assert summary["classes"] == ["cat", "dog", "emu"] and summary["columns"][3:5] == ["d=blue", "d=red"]
    assert summary["bytes"]["up"] > 0 and len(summary["curve"]) == 3


def test_numeric_ids_that_do_not_match_show_as_written(tmp_path, capsys):
    """Issue 31: ids read as numbers showed as np.str_('103758'). (Files with other ids now align by
    private set intersection; a repeated id is still an error, and names the id as written.)"""
    body = [[str(103750 + i)] + r[1:] for i, r in enumerate(rows())]
    server = write_csv(tmp_path / "s.csv", "id,label", [r[:2] for r in body])
    c0 = write_csv(tmp_path / "c0.csv", "id,a,b,c", [[r[0]] + r[2:5] for r in body])
    client = [[r[0]] + r[5:] for r in body]
    client[4][0] = client[3][0]
    c1 = write_csv(tmp_path / "c1.csv", "id,d,e,f", client)
    assert run(tmp_path, f"data.path={server};{c0};{c1}") == 2
    err = capsys.readouterr().err.strip()
    assert "id 103753 repeats row 4" in err and "np." not in err, err


def test_shown_gives_values_as_written():
    from fedstream.errors import shown

    assert shown(np.str_("103758")) == "'103758'" and shown(np.int64(3)) == "3"
    assert shown(np.float32(0.5)) == "0.5" and shown("x") == "'x'" and shown(7) == "7"
    assert shown(np.array([1, 2])) == repr(np.array([1, 2]))  # arrays are not scalars: as numpy shows them
