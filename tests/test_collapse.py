"""A run that ends predicting one class says so (issue 31): metrics.csv records the share of the
most-predicted class per interval, the summary and the console warn when a run ends collapsed."""

import csv
import json

import numpy as np
import pytest

from fedstream.cli import main
from fedstream.metrics import Prequential
from fedstream.metrics.collapse import (
    COLLAPSED,
    SKEWED,
    collapse_fields,
    count_share,
    is_collapsed,
    most_collapsed,
    top_share,
)
from fedstream.ovfl.engine import OnlineVFL
from fedstream.vfl.results import make_summary
from tests.helpers.configs import small_config
from tests.helpers.data import synthetic_stream


def test_the_rule():
    assert top_share([3, 3, 3, 1]) == 0.75 and np.isnan(top_share([]))
    assert is_collapsed(COLLAPSED, 0.5) and not is_collapsed(0.98, 0.5)
    assert not is_collapsed(1.0, SKEWED)  # a stream of one class: predicting it is no collapse
    assert not is_collapsed(float("nan"), 0.5)
    fields = collapse_fields(1.0, 0.3, "the last interval")
    assert fields["collapsed"] and "100.0% of the predictions on the last interval" in fields["warnings"][0]
    assert collapse_fields(0.4, 0.3, "x") == {"top_class_share": 0.4, "label_top_class_share": 0.3}
    assert count_share(np.array([1, 6, 0, 1])) == top_share([0, 1, 1, 1, 1, 1, 1, 3]) == 0.75
    assert np.isnan(count_share(np.zeros(3)))
    nan = float("nan")
    assert most_collapsed([(0.9, 0.3), (1.0, 0.99), (nan, nan), (0.8, 0.1)]) == 3  # furthest above its labels
    assert most_collapsed([(nan, 0.5)]) is None


def test_prequential_shares_per_interval_one_by_one_or_in_segments_and_across_a_checkpoint():
    rng = np.random.default_rng(0)
    y, p = rng.integers(0, 4, 500), np.where(rng.random(500) < 0.7, 2, rng.integers(0, 4, 500))
    one = Prequential(100)
    for a, b in zip(y, p):
        one.update(int(a), int(b))
    seg = Prequential(100)
    for j in range(0, 500, 25):
        if j == 250:  # mid-interval: the open counts travel with the state
            again = Prequential(100)
            again.load_state_dict(seg.state_dict())
            seg = again
        seg.update_many(y[j:j + 25], p[j:j + 25])
    assert one.top_shares == seg.top_shares and one.label_shares == seg.label_shares
    assert one.top_shares == [top_share(p[i:i + 100]) for i in range(0, 500, 100)]
    assert one.label_shares == [top_share(y[i:i + 100]) for i in range(0, 500, 100)]
    old = {k: v for k, v in one.state_dict().items() if k in ("counts", "intervals")}
    before = Prequential(100)  # a checkpoint written before the shares were recorded
    before.load_state_dict(old)
    assert len(before.top_shares) == 5 and np.isnan(before.top_shares).all()
    assert "collapsed" not in before.collapse()


@pytest.mark.parametrize("lr, collapsed", [(3.0, True), (0.05, False)])
def test_an_online_run_that_collapses_says_so(lr, collapsed):
    """OGD at lr 3 on a 3-class stream ends predicting one class (its error only climbs to the
    constant prediction's); at lr 0.05 it learns."""
    cfg = small_config(**{"optimizer.name": "ogd", "optimizer.lr": lr, "rounds": 1000, "eval.interval": 200})
    s = OnlineVFL(cfg, stream=synthetic_stream()).run()
    assert s.get("collapsed", False) is collapsed
    assert (s["top_class_share"] >= COLLAPSED) is collapsed and s["label_top_class_share"] < SKEWED
    assert bool(s.get("warnings")) is collapsed


@pytest.mark.parametrize("lr, collapsed", [(10.0, True), (1.0, False)])
def test_the_command_line_warns_and_metrics_csv_records_the_share(lr, collapsed, tmp_path, capsys,
                                                                  mnist_root):
    out = tmp_path / "run"
    assert main(["run", "ovfl-imnist", f"--set=data.root={mnist_root}", "--set=rounds=600",
                 "--set=eval.interval=200", "--set=optimizer.name=ogd", f"--set=optimizer.lr={lr}",
                 "--quiet", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert ("warning: the run ended collapsed" in err) is collapsed, err
    with open(out / "metrics.csv") as fh:
        shares = [float(r["top_class_share"]) for r in csv.DictReader(fh)]
    assert len(shares) == 3 and all(0 < v <= 1 for v in shares)
    s = json.loads((out / "summary.json").read_text())
    assert s["top_class_share"] == shares[-1] and s.get("collapsed", False) is collapsed


def test_a_batch_vfl_summary_warns_from_its_last_epoch():
    from fedstream.vfl.settings import BatchVFLSettings

    settings = BatchVFLSettings.from_config({"data.name": "mnist", "vfl.clients": 2})
    row = {"epoch": 1, "test_accuracy": 0.1, "train_accuracy": 0.1, "train_loss": 2.3, "test_loss": 2.3,
           "eval_bytes_up": 0}
    ledger = {"per_client": [{"up": 1, "down": 1}], "up": 1, "down": 1, "total": 2}
    flat = make_summary(settings, 0, [row | {"top_class_share": 1.0, "label_top_class_share": 0.11}], ledger,
                        1.0)
    assert flat["collapsed"] and "epoch 1" in flat["warnings"][0]
    fine = make_summary(settings, 0, [row | {"top_class_share": 0.12, "label_top_class_share": 0.11}], ledger,
                        1.0)
    assert "collapsed" not in fine and fine["top_class_share"] == 0.12


def test_a_batch_vfl_run_records_the_share_of_its_test_predictions(data_root, tmp_path):
    from fedstream.vfl.settings import BatchVFLSettings
    from fedstream.vfl.trainer import run_batch_vfl
    from tests.helpers.vfl_deploy import vfl_tiny_config

    s = run_batch_vfl(BatchVFLSettings.from_config(vfl_tiny_config(data_root)), data_root, seed=0,
                      out=tmp_path / "run")
    last = s["per_epoch"][-1]
    assert 0 < last["top_class_share"] <= 1 and s["top_class_share"] == last["top_class_share"]
    with open(tmp_path / "run" / "metrics.csv") as fh:
        assert float(list(csv.DictReader(fh))[-1]["top_class_share"]) == last["top_class_share"]


@pytest.mark.parametrize("learnable", [False, True])
def test_a_chfl_run_that_collapses_says_so(learnable):
    """Features that carry nothing of 70/30 labels: each client's chosen model predicts the
    majority class on every test row, and the run says so; features that carry the labels: no
    warning."""
    from fedstream.chfl.trainer import run_on_table
    from tests.helpers.configs import tiny_settings

    rng = np.random.default_rng(0)
    X = rng.normal(size=(600, 12)).astype(np.float32)
    y = (X[:, 0] + X[:, 7] > 0.5).astype(np.int64) if learnable else (rng.random(600) < 0.3).astype(np.int64)
    r = run_on_table(X, y, tiny_settings(), method="local", seed=0, n_classes=2)
    assert r.get("collapsed", False) is not learnable and bool(r.get("warnings")) is not learnable
    assert 0 < r["top_class_share"] <= 1 and r["label_top_class_share"] < SKEWED
    assert all(0 < c["top_class_share"] <= 1 for c in r["variants"]["local"]["choices"])


@pytest.mark.parametrize("learnable", [False, True])
def test_a_streaming_chfl_run_that_collapses_says_so(learnable, tmp_path):
    """Streaming CHFL on features that carry nothing of 70/30 labels: by the last point of the curve
    every prediction is the majority class, and the run says so; features that carry the labels:
    no warning. metrics.csv records the share per point."""
    from fedstream.chfl.stream import StreamSettings, run_stream_on_table

    rng = np.random.default_rng(0)
    X = rng.normal(size=(2400, 12)).astype(np.float32)
    y = (X[:, 0] + X[:, 7] > 0.5).astype(np.int64) if learnable else (rng.random(2400) < 0.3).astype(np.int64)
    s = StreamSettings(clients=3, hidden=(16,), batch=8, sync_every=5, eval_every=10, lr=1e-2, mu=1.0,
                       late_join=0.5, stats_rows=64)
    r = run_stream_on_table(X, y, s, seed=0, n_classes=2, run_dir=tmp_path / "run")
    assert r.get("collapsed", False) is not learnable and bool(r.get("warnings")) is not learnable
    assert (r["top_class_share"] >= COLLAPSED) is not learnable and r["label_top_class_share"] < SKEWED
    last = r["curve"][-1]
    assert r["top_class_share"] == last["top_class_share"] in last["top_class_share_per_client"]
    with open(tmp_path / "run" / "metrics.csv") as fh:
        shares = [float(row["top_class_share"]) for row in csv.DictReader(fh)]
    assert shares == [p["top_class_share"] for p in r["curve"]] and all(0.5 <= v <= 1 for v in shares)


def test_stream_shares_from_counts_per_client_tick_and_class():
    """The curve point's shares from the counts, against top_share of the same predictions; a client
    not yet active has none; the client furthest above its labels' skew is the one reported."""
    from fedstream.chfl.stream import StreamSettings, class_shares, stream_summary

    rng = np.random.default_rng(1)
    K, T, C, B = 3, 20, 4, 8
    guesses = rng.integers(0, C, (K, T, B))
    guesses[1, 10:] = 2  # client 1 predicts class 2 only from tick 10 on
    labels = rng.integers(0, C, (K, T, B))
    count = lambda v: np.stack([[np.bincount(v[k, t], minlength=C) for t in range(T)] for k in range(K)])  # noqa: E731
    predicted, label_counts = count(guesses), count(labels)
    join = [0, 0, 15]
    shares = class_shares(predicted, label_counts, join, 10, 20)
    assert shares[0] == (top_share(guesses[0, 10:]), top_share(labels[0, 10:]))
    assert shares[1][0] == 1.0 and shares[2] == (top_share(guesses[2, 15:]), top_share(labels[2, 15:]))
    assert class_shares(predicted, label_counts, join, 0, 10)[2] is None
    s = StreamSettings(clients=K, batch=B, eval_every=10, hidden=(4,))
    out = stream_summary(np.zeros((K, T)), join, s, counts=(predicted, label_counts))
    assert out["curve"][-1]["top_class_client"] == 1 and out["collapsed"] is True
    assert "on client 1's last ticks (10..19)" in out["warnings"][0]
    assert out["curve"][0]["top_class_share_per_client"][2] is None


@pytest.mark.parametrize("learnable", [False, True])
def test_the_command_line_warns_for_a_streaming_chfl_run(learnable, tmp_path, capsys):
    """``fedstream run`` in CHFL's stream mode on a table (as the simulator test above): the console
    warns when the run ends collapsed, metrics.csv has the share of every point."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(2400, 12))
    y = (X[:, 0] + X[:, 7] > 0.5) if learnable else (rng.random(2400) < 0.3)
    rows = [",".join([f"f{j}" for j in range(12)] + ["label"])]
    rows += [",".join([f"{v:.5f}" for v in x] + [["no", "yes"][int(c)]]) for x, c in zip(X, y)]
    (tmp_path / "t.csv").write_text("\n".join(rows) + "\n")
    (tmp_path / "chfl.toml").write_text('task = "chfl"\n')
    sets = [f"data.path={tmp_path / 't.csv'}", "data.name=table", "data.label=label", "chfl.mode=stream",
            "chfl.clients=3", "chfl.hidden=16", "chfl.stream_batch=8", "chfl.stream_sync_every=5",
            "chfl.stream_eval_every=10", "chfl.stream_lr=0.01", "chfl.stream_mu=1.0"]
    out = tmp_path / "run"
    assert main(["run", str(tmp_path / "chfl.toml"), *[f"--set={s}" for s in sets], "--quiet",
                 "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert ("warning: the run ended collapsed" in err) is not learnable, err
    s = json.loads((out / "summary.json").read_text())
    with open(out / "metrics.csv") as fh:
        shares = [float(r["top_class_share"]) for r in csv.DictReader(fh)]
    assert len(shares) == len(s["curve"]) and shares[-1] == s["top_class_share"]
    assert s.get("collapsed", False) is not learnable
