"""MLflow tracking (``--track mlflow``, ``track.uri``): runs and experiments logged to a real MLflow
store and read back with ``MlflowClient``."""

import csv
import json
import sys

import numpy as np
import pytest

from fedstream.cli import main
from fedstream.experiments.definition import load_experiment
from tests.helpers.data import write_idx_split
from tests.test_experiments import TINY

mlflow_tracking = pytest.importorskip("mlflow.tracking", reason="MLflow is not installed (fedstream[mlflow])")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning")

ONLINE = ["--set", "rounds=600", "--set", "eval.interval=200", "--set", "checkpoint.every=0", "--quiet"]


def store(uri):
    client = mlflow_tracking.MlflowClient(tracking_uri=uri.as_uri())
    return client, client.get_experiment_by_name("fedstream")


def read_rows(path):
    with open(path) as fh:
        return list(csv.DictReader(fh))


def test_a_run_logs_config_metrics_per_interval_bytes_and_files(mnist_root, tmp_path):
    uri, out = tmp_path / "mlruns", tmp_path / "run"
    assert main(["run", "ovfl-imnist", "--out", str(out), "--track", "mlflow",
                 "--set", f"data.root={mnist_root}", "--set", f"track.uri={uri}", *ONLINE]) == 0
    client, exp = store(uri)
    (run,) = client.search_runs([exp.experiment_id])
    summary = json.loads((out / "summary.json").read_text())
    assert run.info.status == "FINISHED" and run.info.run_name == "ovfl-imnist"
    config = summary["config"]
    assert "track.uri" not in config  # where a run is logged is not part of the run
    assert run.data.params["optimizer.lr"] == str(config["optimizer.lr"])
    assert run.data.params["rounds"] == "600"
    assert run.data.params["compression.up"] == "none" and run.data.params["data.path"] == "none"
    assert len(run.data.params) == len(config)
    history = client.get_metric_history(run.info.run_id, "interval_error")
    rows = read_rows(out / "metrics.csv")
    assert [(m.step, m.value) for m in history] == \
        [(int(r["round"]), float(r["interval_error"])) for r in rows]
    assert [m.step for m in history] == [200, 400, 600]
    assert run.data.metrics["bytes.total"] == summary["bytes"]["total"] > 0
    assert run.data.metrics["bytes.up"] == summary["bytes"]["up"]
    assert run.data.metrics["wall_seconds"] == summary["wall_seconds"]
    assert run.data.metrics["accumulated_error"] == summary["accumulated_error"]
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert artifacts == {"summary.json", "metrics.csv", "config.yaml"}


def test_track_uri_alone_tracks_and_a_run_without_out_is_logged_from_a_temporary_folder(mnist_root, tmp_path,
                                                                                       monkeypatch):
    monkeypatch.chdir(tmp_path)  # nothing is written here but the store
    uri = tmp_path / "store"
    assert main(["run", "ovfl-imnist", "--set", f"data.root={mnist_root}", "--set", f"track.uri={uri}",
                 "--set", "track.experiment=mine", *ONLINE]) == 0
    client = mlflow_tracking.MlflowClient(tracking_uri=uri.as_uri())
    (run,) = client.search_runs([client.get_experiment_by_name("mine").experiment_id])
    assert len(client.get_metric_history(run.info.run_id, "interval_error")) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store"]


def test_a_batch_vfl_run_logs_each_epoch_at_its_step(tmp_path):
    rng = np.random.default_rng(0)
    for stem, n in (("train", 200), ("t10k", 100)):
        write_idx_split(tmp_path / "data" / "mnist", rng.integers(0, 256, (n, 28, 28), dtype=np.uint8),
              rng.integers(0, 10, n).astype(np.uint8), stem=stem)
    uri, out = tmp_path / "mlruns", tmp_path / "run"
    assert main(["run", "vfl-mnist", "--out", str(out), "--track", "mlflow", "--quiet",
                 "--set", f"data.root={tmp_path / 'data'}", "--set", f"track.uri={uri}",
                 "--set", "train.epochs=2", "--set", "vfl.clients=2", "--set", "model.hidden=16",
                 "--set", "model.client=tests.helpers.own_models:strip_cnn"]) == 0
    client, exp = store(uri)
    (run,) = client.search_runs([exp.experiment_id])
    assert run.data.params["model.client"] == "tests.helpers.own_models:strip_cnn"
    rows = read_rows(out / "metrics.csv")
    for key in ("test_accuracy", "bytes_up", "epoch_seconds"):
        history = client.get_metric_history(run.info.run_id, key)
        assert [(m.step, m.value) for m in history] == [(int(r["epoch"]), float(r[key])) for r in rows]


def test_an_experiment_is_a_parent_run_with_the_report_and_a_child_per_run(mnist_root, tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(TINY)
    exp, uri, out = load_experiment(path), tmp_path / "mlruns", tmp_path / "exp"
    assert main(["experiment", "run", str(exp.path), "--out", str(out), "--workers", "1", "--quiet",
                 "--set", f"data.root={mnist_root}", "--track", "mlflow", "--set", f"track.uri={uri}"]) == 0
    client, found = store(uri)
    runs = client.search_runs([found.experiment_id])
    (parent,) = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert parent.info.run_name == "tiny"
    assert sorted(r.info.run_name for r in children if r.data.tags["fedstream.stage"] == "runs") == \
        ["tiny/dlr", "tiny/ogd"]
    tuning = [r for r in children if r.data.tags["fedstream.stage"] == "tuning"]
    assert len(tuning) == len(list((out / "tuning").iterdir())) == 4  # 2 learning rates x 2 optimisers
    assert len(children) == len(runs) - 1
    ogd = next(r for r in children if r.info.run_name == "tiny/ogd")
    assert ogd.data.params["optimizer.name"] == "ogd"
    assert [m.step for m in client.get_metric_history(ogd.info.run_id, "interval_error")] == [200, 400, 600]
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"report.md", "experiment.json", "figures"} <= artifacts
    figures = {a.path for a in client.list_artifacts(parent.info.run_id, "figures")}
    assert figures == {f"figures/{p.name}" for p in (out / "figures").glob("*.png")} and len(figures) == 2


def test_without_mlflow_track_is_one_error_before_the_run(mnist_root, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "mlflow.tracking", None)  # import fails as if not installed
    out = tmp_path / "run"
    assert main(["run", "ovfl-imnist", "--out", str(out), "--track", "mlflow",
                 "--set", f"data.root={mnist_root}", *ONLINE]) == 2
    assert "--track mlflow needs MLflow: pip install 'fedstream[mlflow]'" in capsys.readouterr().err
    assert not out.exists()


def test_a_store_that_cannot_be_opened_is_one_error_before_the_run(mnist_root, tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    out = tmp_path / "run"
    assert main(["run", "ovfl-imnist", "--out", str(out), "--set", f"data.root={mnist_root}",
                 "--set", f"track.uri={blocker / 'mlruns'}", *ONLINE]) == 2
    err = capsys.readouterr().err
    assert "track.uri = " in err and "cannot open the MLflow store" in err and "Traceback" not in err
    assert not out.exists()
