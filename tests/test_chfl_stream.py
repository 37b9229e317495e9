"""Streaming CHFL: prequential accuracy over time, periodic FedAvg, a late joiner."""

from pathlib import Path

import numpy as np
import pytest

from fedstream.chfl.stream import StreamSettings, run_stream, run_stream_on_table
from fedstream.errors import ConfigError
from tests.helpers.data import require, synthetic_table


def settings(**kw):
    base = dict(clients=3, hidden=(16,), batch=8, sync_every=5, eval_every=10, lr=1e-2, mu=1.0,
                late_join=0.5, stats_rows=64)
    return StreamSettings(**(base | kw))


@pytest.fixture(scope="module")
def runs():
    X, y = synthetic_table(n=2400, d=12)
    return {m: run_stream_on_table(X, y, settings(), method=m, seed=0) for m in ("chfl", "common", "local")}


def test_curve_and_late_joiner(runs):
    r = runs["chfl"]
    assert r["ticks"] == 800 // 8 == 100
    assert [p["tick"] for p in r["curve"]] == list(range(10, 101, 10))
    late = r["late_client"]
    assert late["client"] == 2 and late["join_tick"] == 50
    assert late["curve"][:5] == [None] * 5 and all(v is not None for v in late["curve"][5:])
    assert all(v is not None for p in r["curve"] for v in p["per_client"][:2])


def test_learns_over_time(runs):
    for m, r in runs.items():
        first = np.mean([p["acc"] for p in r["curve"][:2]])
        last = np.mean([p["acc"] for p in r["curve"][-3:]])
        assert last > first + 0.05 and last > 0.5, m  # 3 classes: chance is 1/3
    assert runs["chfl"]["prequential_acc"] > runs["common"]["prequential_acc"]


def test_fedavg_messages_only_for_active_clients(runs):
    b = runs["chfl"]["bytes"]
    down = [c["down"] for c in b["per_client"]]
    up = [c["up"] for c in b["per_client"]]
    # clients 0, 1: θ^0 plus one θ per sync (100 ticks / 5) down, one update per sync up;
    # client 2 joins at tick 50: one θ on joining plus 10 syncs
    assert down[0] == down[1] and up[0] == up[1]
    assert down[0] / 21 == down[2] / 11 == up[0] / 20 == up[2] / 10
    assert runs["local"]["bytes"]["total"] == 0


def test_settings_validated():
    with pytest.raises(ConfigError, match=r"late_join: expected a number in \[0.0, 1.0\), found 1.0"):
        StreamSettings(late_join=1.0)
    with pytest.raises(ConfigError, match=r"batch: expected at most 100 \(the rows per client\), found 500"):
        run_stream_on_table(*synthetic_table(n=300), settings(batch=500))


def test_real_covertype_stream(data_root: Path):
    root = require(data_root, "covertype_kaggle/train.csv.gz")
    r = run_stream(settings(max_rows=1200, batch=16), root, method="chfl", seed=0)
    assert r["data"]["name"] == "covertype" and r["ticks"] == 400 // 16
    assert 0.0 < r["prequential_acc"] < 1.0
