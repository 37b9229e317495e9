"""The ``device`` key of batch VFL and CHFL (issue 21) and ``fedstream bench device``.

The CPU/GPU agreement tests run only where CUDA is present; the rest runs everywhere."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from fedstream.cli import main
from fedstream.config import load_config
from fedstream.errors import ConfigError
from fedstream.runs.device import resolve_device

CUDA = pytest.mark.skipif(not torch.cuda.is_available(),
                          reason="no CUDA device here (torch.cuda.is_available() is False): the CPU/GPU "
                                 "agreement runs on a machine with a GPU")


def test_the_device_key():
    assert load_config("vfl-mnist", {})["device"] == "auto"
    assert load_config("chfl-covertype", {"device": "cpu"})["device"] == "cpu"
    with pytest.raises(ConfigError, match="device"):
        load_config("vfl-mnist", {"device": "tpu"})
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="no CUDA device here"):
            resolve_device("cuda")


def test_bench_device_on_the_cpu_at_tiny_sizes(data_root, tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert main(["bench", "device", "--tiny", "--devices", "cpu", "--data-root", str(data_root),
                 "--json", str(out)]) == 0
    table = capsys.readouterr().out
    assert "| case | cpu (s) | accuracy cpu |" in table and "ResNet-18" in table
    figures = json.loads(out.read_text())
    assert [r["case"] for r in figures["rows"]] == [
        "vfl-mnist epoch", "vfl-cifar10 epoch (ResNet-18, synthetic)", "chfl covertype run"]
    assert all(r["seconds"]["cpu"] > 0 and 0 <= r["accuracy"]["cpu"] <= 1 for r in figures["rows"])


@CUDA
def test_batch_vfl_on_cpu_and_gpu_agree(data_root):
    from fedstream.vfl.settings import BatchVFLSettings
    from fedstream.vfl.trainer import run_batch_vfl

    runs = {d: run_batch_vfl(BatchVFLSettings(dataset="mnist", epochs=2, train_rows=2000, test_rows=500,
                                              device=d), data_root, seed=0) for d in ("cpu", "cuda")}
    cpu, gpu = ([r["train_loss"] for r in runs[d]["per_epoch"]] for d in ("cpu", "cuda"))
    np.testing.assert_allclose(gpu, cpu, rtol=1e-3)
    assert abs(runs["cuda"]["final_accuracy"] - runs["cpu"]["final_accuracy"]) <= 0.01
    assert runs["cuda"]["bytes"] == runs["cpu"]["bytes"]


@CUDA
def test_resnet_clients_on_cpu_and_gpu_agree():
    from fedstream.vfl.data import vertical_images
    from fedstream.vfl.settings import BatchVFLSettings
    from fedstream.vfl.trainer import train_on

    rng = np.random.default_rng(0)
    data = vertical_images("cifar10", rng.integers(0, 256, (128, 3, 32, 32), dtype=np.uint8),
                           rng.integers(0, 10, 128), rng.integers(0, 256, (64, 3, 32, 32), dtype=np.uint8),
                           rng.integers(0, 10, 64), clients=4)
    losses = {}
    for d in ("cpu", "cuda"):
        settings = BatchVFLSettings(dataset="cifar10", epochs=1, resnet_width=8, device=d)
        losses[d] = [r["train_loss"] for r in train_on(settings, data, seed=0).summary["per_epoch"]]
    np.testing.assert_allclose(losses["cuda"], losses["cpu"], rtol=1e-3)


@CUDA
def test_chfl_on_cpu_and_gpu_agree(data_root):
    from fedstream.chfl.settings import CHFLSettings
    from fedstream.chfl.trainer import run_chfl

    runs = {d: run_chfl(CHFLSettings(dataset="covertype", max_rows=2000, hidden=(32,), rounds=2, lrs=(0.003,),
                                     mus=(0.0,), device=d), data_root, seed=0) for d in ("cpu", "cuda")}
    assert abs(runs["cuda"]["test_acc"] - runs["cpu"]["test_acc"]) <= 0.02
    assert runs["cuda"]["bytes"] == runs["cpu"]["bytes"]
