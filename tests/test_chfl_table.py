"""The table runner: cells (mean ± std per dataset and column), formatting, a tiny parallel run."""

from pathlib import Path

import pytest

from fedstream.chfl.settings import CHFLSettings
from fedstream.chfl.table import cells, format_table, main, run_table
from tests.helpers.data import require


def fake(dataset, method, variants):
    return {"data": {"name": dataset}, "method": method,
            "variants": {k: {"test_acc": v} for k, v in variants.items()}}


def test_cells_average_over_runs():
    res = [fake("cov", "chfl", {"chfl": 0.7, "mu=0": 0.6, "mu>0": 0.7}),
           fake("cov", "chfl", {"chfl": 0.9, "mu=0": 0.8, "mu>0": 0.9}),
           fake("cov", "common", {"common": 0.5})]
    c = cells(res)
    assert c["cov"]["CHFL mu=0"] == {"mean": pytest.approx(0.7), "std": pytest.approx(0.1), "n": 2}
    assert c["cov"]["Common"]["n"] == 1
    text = format_table({"cells": c})
    assert text.splitlines()[0] == "| dataset | Common | CHFL mu=0 | CHFL mu>0 | CHFL (mu chosen) |"
    assert "| cov | 0.5000 ± 0.0000 | 0.7000 ± 0.1000 |" in text


@pytest.mark.slow  # two process pools (run_table, then main), each worker imports torch: 13-20 s on 2 cores
def test_tiny_table_on_real_data(data_root: Path, tmp_path: Path, capsys):
    require(data_root, "sensorless_subset/sensorless_kios_2200.npz")
    s = CHFLSettings(clients=2, hidden=(8,), rounds=1, local_epochs=1, lrs=(1e-2,), mus=(0.0, 1.0))
    t = run_table(s, data_root, datasets=["sensorless"], methods=["common", "chfl"], splits=2, runs=1,
                  workers=1)
    assert set(t["cells"]["sensorless"]) == {"Common", "CHFL mu=0", "CHFL mu>0", "CHFL (mu chosen)"}
    assert all(v["n"] == 2 for v in t["cells"]["sensorless"].values())
    assert t["data"]["sensorless"]["status"].startswith("subset")
    splits = {tuple(r["features"]["common"]) for r in t["runs"] if r["method"] == "common"}
    assert len(splits) == 2  # split_index 0 and 1 give different feature splits
    out = tmp_path / "t.json"
    assert main(["--datasets", "sensorless", "--methods", "local", "--splits", "1", "--runs", "1",
                 "--workers", "1", "--data-root", str(data_root), "--json", str(out), "--set",
                 "hidden=[8]", "rounds=1", "local_epochs=1", "clients=2"]) == 0
    assert "| sensorless |" in capsys.readouterr().out and out.stat().st_size > 0


def test_shared_baseline_counted_once():
    res = [fake("cov", "chfl", {"chfl": 0.7, "common": 0.5}), fake("cov", "common", {"common": 0.5})]
    assert cells(res)["cov"]["Common"]["n"] == 1
    assert cells(res[:1])["cov"]["Common"]["n"] == 1
