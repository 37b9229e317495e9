"""Per-party files whose ids differ (order, overlap, foreign ids), aligned by PSI in the simulator:
online VFL activates a client only on the events whose id it holds, batch VFL trains and tests on
the rows every party holds, and bad id columns stop the run with one line naming file and party."""

import json
import random

import numpy as np
import pytest

pytest.importorskip("private_set_intersection.python", reason="openmined-psi: pip install 'fedstream[psi]'")

from fedstream.cli import main  # noqa: E402
from fedstream.config import load_config  # noqa: E402
from fedstream.data import TableSource, TableSpec  # noqa: E402
from fedstream.ovfl.engine import CHUNK, OnlineVFL  # noqa: E402
from tests.test_data_table import rows, write_csv  # noqa: E402


def party_files(tmp_path, n=60, drop=(None, 3), foreign=5):
    """s.csv (id, label) and c0.csv / c1.csv (id + three columns): client m lacks every drop[m]-th
    id, holds ``foreign`` ids the server lacks, and every file is shuffled on its own."""
    body = rows(n)
    rng = random.Random(0)
    server = [r[:2] for r in body]
    rng.shuffle(server)
    paths = [write_csv(tmp_path / "s.csv", "id,label", server)]
    for m, (cols, every) in enumerate(zip(([2, 3, 4], [5, 6, 7]), drop)):
        mine = [[r[0], *(r[j] for j in cols)] for i, r in enumerate(body) if not every or i % every]
        mine += [[f"x{m}-{k}", "0.5", "1.5", "2.5"] for k in range(foreign)]
        rng.shuffle(mine)
        paths.append(write_csv(tmp_path / f"c{m}.csv", "id," + ",".join("abcdef"[j - 2] for j in cols), mine))
    return paths, server, body


def ovfl_config(paths, **keys):
    sets = {"task": "ovfl", "data.name": "table", "data.path": ";".join(map(str, paths)), "data.id": "id",
            "data.label": "label", "vfl.clients": 2, "eval.interval": 20, "data.stats_rows": 30} | keys
    return load_config(None, [f"{k}={v}" for k, v in sets.items()])


def test_the_source_holds_each_client_row_where_the_ids_meet(tmp_path):
    paths, server, body = party_files(tmp_path)
    src = TableSource(TableSpec(";".join(map(str, paths)), "label", "id", None, None, 2, 30))
    by_id = {r[0]: r for r in body}
    held = np.array([[True, int(r[0][1:]) % 3 != 0] for r in server])
    np.testing.assert_array_equal(src.held, held)
    assert [c["shared"] for c in src.alignment.summary()["clients"]] == [60, 40]
    assert [c["ids"] for c in src.alignment.summary()["clients"]] == [65, 45]
    X = src.features(np.arange(60))
    assert (X[~held[:, 1], 3:] == 0).all()  # an absent row is the client's columns' means
    # client 1's columns, standardised by the first 30 stream rows it holds (a plain reference)
    raw = np.array([[float(by_id[r[0]][j]) for j in (5, 6, 7)] for r in server])[held[:, 1]]
    ref = (raw - raw[:30].mean(axis=0)) / raw[:30].std(axis=0)
    np.testing.assert_allclose(X[held[:, 1], 3:], ref, rtol=1e-5, atol=1e-5)
    raw0 = np.array([[float(by_id[r[0]][j]) for j in (2, 3, 4)] for r in server])  # client 0 holds all
    np.testing.assert_allclose(X[:, :3], (raw0 - raw0[:30].mean(axis=0)) / raw0[:30].std(axis=0), atol=1e-5)


def test_full_activation_is_exactly_the_held_ids(tmp_path):
    paths, server, _ = party_files(tmp_path)
    run = OnlineVFL(ovfl_config(paths, **{"activation.name": "full", "stream.passes": 2}))
    X, _, idx = run.stream.batch(0, CHUNK)
    _, mask = run.chunk_inputs(0, X)
    holds = np.array([[True, int(server[i % 60][0][1:]) % 3 != 0] for i in idx])
    np.testing.assert_array_equal(mask, holds)
    summary = run.run()
    assert summary["rounds"] == 120
    np.testing.assert_allclose(summary["activation_rate"], [1.0, 40 / 60])
    assert summary["alignment"]["clients"][1]["shared"] == 40 and summary["alignment"]["bytes"] > 0


@pytest.mark.parametrize("name,keys", [("fixed", {"activation.k": 1}), ("random", {"activation.p": 0.5}),
                                       ("topl", {"activation.l": 1, "activation.explore": 4})])
def test_other_policies_choose_among_the_holders(tmp_path, name, keys):
    paths, _, _ = party_files(tmp_path, drop=(2, 3))
    run = OnlineVFL(ovfl_config(paths, **{"activation.name": name}, **keys))
    X, _, _ = run.stream.batch(0, CHUNK)
    held = run.chunk_held(0)
    _, mask = run.chunk_inputs(0, X)
    assert not (mask & ~held).any()  # never a client that lacks the id
    if name in ("fixed", "topl"):  # one of the holders (all holders in topl's exploration rounds)
        explore = np.arange(CHUNK) % 4 == 0 if name == "topl" else np.zeros(CHUNK, bool)
        np.testing.assert_array_equal(mask.sum(axis=1)[~explore], np.minimum(held.sum(axis=1), 1)[~explore])
        np.testing.assert_array_equal(mask[explore], held[explore])
    run.run()


def test_batch_vfl_trains_and_tests_on_the_rows_every_party_holds(tmp_path):
    from fedstream.vfl.settings import BatchVFLSettings
    from fedstream.vfl.table_data import load_vertical_table

    paths, server, _ = party_files(tmp_path, drop=(4, 3))
    keys = {"data.name": "table", "data.path": ";".join(map(str, paths)), "data.label": "label",
            "data.id": "id", "data.categorical": None, "vfl.partition": None, "data.test_fraction": 0.25,
            "data.test_path": None, "vfl.clients": 2}
    data = load_vertical_table(BatchVFLSettings.from_config(keys))
    both = [r for r in server if int(r[0][1:]) % 4 and int(r[0][1:]) % 3]  # in the server's order
    assert len(data.train_y) + len(data.test_y) == len(both) == 30
    assert (len(data.train_y), len(data.test_y)) == (22, 8)
    classes = {"cat": 0, "dog": 1, "emu": 2}
    np.testing.assert_array_equal(np.concatenate([data.train_y, data.test_y]), [classes[r[1]] for r in both])
    fields = data.summary_fields()
    assert fields["alignment"]["intersection"] == 30
    assert [c["shared"] for c in fields["alignment"]["clients"]] == [45, 40]


def test_batch_run_reports_the_intersection(tmp_path):
    paths, _, _ = party_files(tmp_path, drop=(4, 3))
    config = tmp_path / "vfl.toml"
    config.write_text('task = "vfl"\n[data]\nname = "table"\npath = "' + ";".join(map(str, paths)) + '"\n'
                      'id = "id"\nlabel = "label"\n[train]\nepochs = 1\nbatch_size = 8\n')
    assert main(["run", str(config), "--set", "vfl.clients=2", "--quiet", "--out", str(tmp_path / "r")]) == 0
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["alignment"]["intersection"] == 30
    assert summary["train_rows"] + summary["test_rows"] == 30


def cli_error(tmp_path, capsys, paths) -> str:
    config = tmp_path / "ovfl.toml"
    config.write_text('task = "ovfl"\n')
    sets = ["task=ovfl", "data.name=table", "data.id=id", "data.label=label", "vfl.clients=2",
            "data.path=" + ";".join(map(str, paths))]
    assert main(["run", str(config), *(x for s in sets for x in ("--set", s)), "--quiet",
                 "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


def test_duplicate_id_names_file_party_and_rows(tmp_path, capsys):
    paths, _, _ = party_files(tmp_path)
    with open(paths[2], "a") as f:
        f.write("r7,1,2,3\n")
    err = cli_error(tmp_path, capsys, paths)
    assert "c1.csv (client 1)" in err and "id r7 repeats row" in err and "np.str_" not in err


def test_empty_intersection_names_file_and_party(tmp_path, capsys):
    paths, _, _ = party_files(tmp_path)
    paths[1] = write_csv(tmp_path / "other.csv", "id,a,b,c", [["q1", "1", "2", "3"], ["q2", "2", "3", "4"]])
    err = cli_error(tmp_path, capsys, paths)
    assert "other.csv (client 0)" in err and "intersection is empty" in err


def test_missing_id_column_names_file_and_party(tmp_path, capsys):
    paths, _, _ = party_files(tmp_path)
    paths[2] = write_csv(tmp_path / "noid.csv", "key,d,e,f", [["r1", "1", "2", "3"]])
    err = cli_error(tmp_path, capsys, paths)
    assert "noid.csv (client 1)" in err and "data.id = 'id'" in err and "no such column" in err


def test_ids_that_are_not_text_or_integers(tmp_path, capsys):
    paths, _, body = party_files(tmp_path)
    np.savez(tmp_path / "c1.npz", id=np.arange(len(body)) + 0.5, d=np.ones(len(body)), e=np.ones(len(body)))
    err = cli_error(tmp_path, capsys, [paths[0], paths[1], tmp_path / "c1.npz"])
    assert "c1.npz (client 1)" in err and "text or integers" in err and "floats" in err


def test_integer_ids_match_text_ids(tmp_path):
    body = rows(30)
    server = write_csv(tmp_path / "s.csv", "id,label", [[str(i), r[1]] for i, r in enumerate(body)])
    np.savez(tmp_path / "c0.npz", id=np.arange(5, 30), a=np.ones(25), b=np.arange(25.0))
    np.savez(tmp_path / "c1.npz", id=np.array([str(i) for i in range(30)]), c=np.arange(30.0))
    src = TableSource(TableSpec(f"{server};{tmp_path / 'c0.npz'};{tmp_path / 'c1.npz'}", "label", "id",
                                None, None, 2, 30))
    np.testing.assert_array_equal(src.held[:, 0], np.arange(30) >= 5)


def test_shuffled_files_holding_every_id_read_as_the_aligned_ones(tmp_path):
    body = rows(50)
    aligned = [write_csv(tmp_path / "s.csv", "id,label", [r[:2] for r in body]),
               write_csv(tmp_path / "c0.csv", "id,a,b,c", [[r[0], *r[2:5]] for r in body]),
               write_csv(tmp_path / "c1.csv", "id,d,e,f", [[r[0], *r[5:8]] for r in body])]
    shuffled = random.Random(1).sample(body, len(body))
    (tmp_path / "x").mkdir()
    clients = [write_csv(tmp_path / "x" / "c0.csv", "id,a,b,c", [[r[0], *r[2:5]] for r in shuffled]),
               write_csv(tmp_path / "x" / "c1.csv", "id,d,e,f", [[r[0], *r[5:8]] for r in shuffled[::-1]])]
    a = TableSource(TableSpec(";".join(map(str, aligned)), "label", "id", None, None, 2, 30))
    b = TableSource(TableSpec(";".join(map(str, [aligned[0], *clients])), "label", "id", None, None, 2, 30))
    assert a.held is None and b.held is None
    np.testing.assert_array_equal(a.features(np.arange(50)), b.features(np.arange(50)))  # bit for bit


def test_the_false_positive_rate_is_raised_where_the_hash_range_would_overflow():
    from fedstream.alignment.psi import HASH_RANGE_MAX, effective_fpr

    assert effective_fpr(1e-9, 1000, 500) == 1e-9
    for n in (68_000, 100_000, 1_000_000):
        fpr = effective_fpr(1e-9, n, n)
        assert fpr >= 1e-9 and n * n / fpr <= HASH_RANGE_MAX
    assert effective_fpr(1e-9, 1_000_000, 1_000_000) == pytest.approx(2.17e-7, rel=1e-2)
