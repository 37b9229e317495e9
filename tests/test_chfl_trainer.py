"""CHFL experiments at small scale: every method, bytes through the transport, validation-based
choice, settings validation, and one run on the real covertype file."""

from pathlib import Path

import numpy as np
import pytest
import torch

from fedstream.chfl.models import Column, state_arrays
from fedstream.chfl.selection import Choice, Selector
from fedstream.chfl.settings import CHFLSettings
from fedstream.chfl.trainer import run_chfl, run_on_table
from fedstream.errors import ConfigError
from fedstream.transport.tensors import encode_update
from fedstream.transport.updates import ModelUpdate
from tests.helpers.configs import tiny_settings
from tests.helpers.data import require, synthetic_table

METHODS = ("chfl", "common", "local", "concat", "fedprox")


@pytest.fixture(scope="module")
def results():
    X, y = synthetic_table()
    return {m: run_on_table(X, y, tiny_settings(), method=m, seed=0) for m in METHODS}


def test_every_method_reports_per_client_and_mean_accuracy(results):
    for m, r in results.items():
        accs = r["test_acc_per_client"]
        assert len(accs) == 2 and all(0.0 <= a <= 1.0 for a in accs), m
        assert r["test_acc"] == pytest.approx(np.mean(accs))
        assert r["test_acc"] > 0.45, m  # 3 classes: chance is about 1/3
    assert set(results["chfl"]["variants"]) == {"chfl", "mu=0", "mu>0", "common"}
    assert set(results["common"]["variants"]) == {"common"}


def test_unique_features_help(results):
    """Labels depend on all 12 features; Common sees 4, CHFL and Local 8 per client."""
    assert results["chfl"]["test_acc"] > results["common"]["test_acc"] + 0.06
    assert results["concat"]["test_acc"] > results["common"]["test_acc"] + 0.04


def test_fedavg_rounds_are_counted_messages(results):
    s = tiny_settings()
    one = len(encode_update(ModelUpdate(0, 0, state_arrays(Column(4, 3, s.hidden)), 360)))
    for m in ("chfl", "common", "concat", "fedprox"):
        b = results[m]["bytes"]
        # θ^t down to each client for t = 0..T, θ_k^t up for t = 0..T-1
        assert b["down"] == s.clients * (s.rounds + 1) * one, m
        assert b["up"] == s.clients * s.rounds * one, m
        assert b["per_client"][0] == b["per_client"][1]
    assert results["local"]["bytes"]["total"] == 0 and results["local"]["federations"] == 0


def test_choice_is_the_best_validation_record():
    sel = Selector()
    for k, lr, cand, rnd, val, test in [(0, 0.1, "mu=0", 1, 0.5, 0.4), (0, 0.1, "mu=0", 2, 0.7, 0.6),
                                        (0, 0.1, "mu=1", 1, 0.6, 0.9), (0, 0.01, "mu=1", 3, 0.7, 0.1)]:
        if sel.improves(k, lr, cand, val):
            sel.keep(k, Choice(lr, cand, rnd, val, test))
    assert not sel.improves(0, 0.1, "mu=0", 0.7)  # ties keep the earlier round
    best = sel.choose(0)
    assert (best.lr, best.candidate, best.round, best.test_acc) == (0.1, "mu=0", 2, 0.6)
    pos = sel.choose(0, lambda c: c != "mu=0")
    assert (pos.lr, pos.candidate, pos.test_acc) == (0.01, "mu=1", 0.1)


def test_variants_follow_the_choices(results):
    v = results["chfl"]["variants"]
    for k in range(2):
        best, zero, pos = (v[n]["choices"][k] for n in ("chfl", "mu=0", "mu>0"))
        assert zero["candidate"] == "mu=0" and pos["candidate"] == "mu=1"
        assert best["val_acc"] == max(zero["val_acc"], pos["val_acc"])
        assert best["test_acc"] == v["chfl"]["test_acc_per_client"][k]


def test_runs_are_reproducible_and_seeds_matter():
    X, y = synthetic_table(n=600)
    s = tiny_settings(rounds=1)
    a, b = (run_on_table(X, y, s, method="chfl", seed=3) for _ in range(2))
    assert a["test_acc_per_client"] == b["test_acc_per_client"] and a["features"] == b["features"]
    c = run_on_table(X, y, s, method="chfl", seed=4)
    assert c["test_acc_per_client"] != a["test_acc_per_client"]
    assert torch.get_num_threads() >= 1


@pytest.mark.parametrize(
    "field,value,match",
    [
        ("clients", 0, r"clients: expected an integer >= 1, found 0"),
        ("common_ratio", 1.0, r"common_ratio: expected a number in \(0.0, 1.0\), found 1.0"),
        (
            "dataset",
            "mnist",
            r"dataset: expected one of covertype, covertype-uci, sensorless, jannis, helena, aloi, "
            r"found 'mnist'",
        ),
        ("split", "best", r"split: expected one of random, max-corr, median-corr, min-corr, found 'best'"),
        ("mus", (0.0, 2.0), r"mus: expected a number in \[0.0, 1.0\], found 2.0"),
        ("lrs", (), r"lrs: expected a non-empty list, found \(\)"),
        ("hidden", (512, 0), r"hidden: expected an integer >= 1, found 0"),
        ("rounds", 2.5, r"rounds: expected an integer >= 1, found 2.5"),
        ("select_round", "yes", r"select_round: expected true or false, found 'yes'"),
    ],
)
def test_settings_are_validated(field, value, match):
    with pytest.raises(ConfigError, match=match):
        CHFLSettings(**{field: value})


def test_settings_from_dict():
    s = CHFLSettings.from_dict({"clients": 3, "lrs": [0.01], "hidden": [8, 4]})
    assert s.lrs == (0.01,) and s.hidden == (8, 4)
    assert CHFLSettings.from_dict(s.to_dict()) == s
    with pytest.raises(ConfigError, match=r"unknown CHFL setting\(s\) \['round'\]"):
        CHFLSettings.from_dict({"round": 3})
    with pytest.raises(
        ConfigError, match=r"method: expected one of chfl, common, local, concat, fedprox, found 'fedsgd'"
    ):
        run_on_table(*synthetic_table(n=100), tiny_settings(), method="fedsgd")


def test_real_covertype_small(data_root: Path):
    s = CHFLSettings(clients=3, hidden=(16,), rounds=1, local_epochs=1, lrs=(1e-2,), mus=(0.0, 1.0),
                     max_rows=1500)
    seen = []
    r = run_chfl(s, require(data_root, "covertype_kaggle/train.csv.gz"), method="chfl", seed=0,
                 progress=seen.append)
    assert r["data"]["status"] == "complete" and r["data"]["path"].endswith("train.csv.gz")
    assert r["n_rows"] == 1500 and r["n_classes"] == 7
    assert len(r["features"]["common"]) == 16 and sorted(map(len, r["features"]["unique"])) == [12, 13, 13]
    assert r["test_acc"] > 0.3  # 7 balanced classes: chance is 1/7
    assert seen and seen[-1]["round"] == 1 and r["bytes"]["up"] > 0


def test_shared_common_baseline_equals_a_separate_common_run(results):
    """CHFL's heads never touch its common column, so its "common" variant is the Common run."""
    assert results["chfl"]["variants"]["common"] == results["common"]["variants"]["common"]


def test_shared_concat_head():
    X, y = synthetic_table(n=600)
    r = run_on_table(X, y, tiny_settings(rounds=2, shared_baselines=("common", "concat")), method="chfl")
    assert set(r["variants"]) == {"chfl", "mu=0", "mu>0", "common", "concat"}
    assert all(c["candidate"] == "concat" for c in r["variants"]["concat"]["choices"])
    assert all(c["candidate"].startswith("mu=") for c in r["variants"]["chfl"]["choices"])
