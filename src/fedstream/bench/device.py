"""``fedstream bench device``: the torch parties on the CPU and on the GPU, side by side.

Three cases, each timed on every device asked for (``cpu``, ``cuda``), same data, settings and seed:

* ``vfl-mnist epoch``: one epoch of batch VFL on MNIST (4 clients, MLPs; the paper's setting);
* ``vfl-cifar10 epoch (ResNet-18)``: one epoch of batch VFL with a ResNet-18 per client on synthetic
  CIFAR-shaped images (uint8 (n, 3, 32, 32), random labels: no CIFAR-10 files needed; the loader
  takes arrays, :func:`fedstream.vfl.data.vertical_images`);
* ``chfl covertype``: a CHFL run on covertype (its FedAvg federations, validation and test).

Each row gives the wall seconds per device, the speed-up and the accuracy per device (the same run
on two devices agrees to float tolerance, not bit for bit). ``tiny`` shrinks every case to seconds
(the test suite runs it on the CPU). Torch runs single-threaded in fedstream's trainers, as in
``fedstream run``; :func:`format_device_bench` prints the markdown table.
"""

from __future__ import annotations

import os
import time

import numpy as np
import torch

from fedstream.chfl.settings import CHFLSettings
from fedstream.chfl.trainer import run_chfl
from fedstream.data.paths import resolve_data_root
from fedstream.runs.device import resolve_device
from fedstream.vfl.data import vertical_images
from fedstream.vfl.settings import BatchVFLSettings
from fedstream.vfl.trainer import run_batch_vfl, train_on

SIZES = {  # full: what the README's table measures; tiny: the test suite's CPU-only smoke run
    "full": {"mnist_train": 60000, "mnist_test": 10000, "cifar_train": 10000, "cifar_test": 2000,
             "resnet_width": 64, "chfl_rows": None, "chfl_hidden": (512, 256, 128), "chfl_rounds": 3},
    "tiny": {"mnist_train": 300, "mnist_test": 100, "cifar_train": 64, "cifar_test": 32,
             "resnet_width": 4, "chfl_rows": 600, "chfl_hidden": (16,), "chfl_rounds": 1},
}


def _vfl_mnist(device: str, size: dict, root) -> tuple[float, float]:
    settings = BatchVFLSettings(dataset="mnist", epochs=1, train_rows=size["mnist_train"],
                                test_rows=size["mnist_test"], device=device)
    summary = run_batch_vfl(settings, root, seed=0)
    return summary["per_epoch"][0]["epoch_seconds"], summary["final_accuracy"]


def _vfl_cifar(device: str, size: dict, root) -> tuple[float, float]:
    rng = np.random.default_rng(0)
    n, m = size["cifar_train"], size["cifar_test"]
    data = vertical_images("cifar10", rng.integers(0, 256, (n, 3, 32, 32), dtype=np.uint8),
                           rng.integers(0, 10, n), rng.integers(0, 256, (m, 3, 32, 32), dtype=np.uint8),
                           rng.integers(0, 10, m), clients=4)
    settings = BatchVFLSettings(dataset="cifar10", epochs=1, resnet_width=size["resnet_width"], device=device)
    summary = train_on(settings, data, seed=0).summary
    return summary["per_epoch"][0]["epoch_seconds"], summary["final_accuracy"]


def _chfl_covertype(device: str, size: dict, root) -> tuple[float, float]:
    settings = CHFLSettings(dataset="covertype", max_rows=size["chfl_rows"], hidden=size["chfl_hidden"],
                            rounds=size["chfl_rounds"], device=device)
    tic = time.perf_counter()
    result = run_chfl(settings, root, method="chfl", seed=0)
    return time.perf_counter() - tic, result["test_acc"]


CASES = {"vfl-mnist epoch": _vfl_mnist, "vfl-cifar10 epoch (ResNet-18, synthetic)": _vfl_cifar,
         "chfl covertype run": _chfl_covertype}


def bench_device(data_root=None, *, devices: tuple[str, ...] | None = None, tiny: bool = False,
                 cases: tuple[str, ...] | None = None) -> dict:
    """Time every case on every device (default: the CPU, and CUDA when present); the figures."""
    root = resolve_data_root(data_root)
    devices = devices or (("cpu", "cuda") if torch.cuda.is_available() else ("cpu",))
    for d in devices:
        if resolve_device(d).type == "cuda":  # ConfigError for cuda without CUDA, before anything runs
            torch.zeros(1, device="cuda")  # the CUDA context's start-up is not any case's time
            torch.cuda.synchronize()
    size = SIZES["tiny" if tiny else "full"]
    rows = []
    for name in cases or tuple(CASES):
        row = {"case": name, "seconds": {}, "accuracy": {}}
        for d in devices:
            seconds, accuracy = CASES[name](d, size, root)
            row["seconds"][d], row["accuracy"][d] = seconds, accuracy
        rows.append(row)
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {"rows": rows, "devices": list(devices), "sizes": "tiny" if tiny else "full", "gpu": gpu,
            "cpu_cores": os.cpu_count(), "torch": torch.__version__, "torch_threads": 1}


def format_device_bench(result: dict) -> str:
    """The figures as a markdown table (seconds per device, speed-up over the CPU, accuracies)."""
    devices = result["devices"]
    head = ["case", *(f"{d} (s)" for d in devices)]
    head += ["speed-up"] if "cpu" in devices and len(devices) > 1 else []
    head += [f"accuracy {d}" for d in devices]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in result["rows"]:
        cells = [r["case"], *(f"{r['seconds'][d]:.2f}" for d in devices)]
        if "cpu" in devices and len(devices) > 1:
            other = next(d for d in devices if d != "cpu")
            cells.append(f"{r['seconds']['cpu'] / r['seconds'][other]:.1f}x")
        cells += [f"{r['accuracy'][d]:.4f}" for d in devices]
        lines.append("| " + " | ".join(cells) + " |")
    gpu = result["gpu"] or "none"
    lines.append(f"\n{result['sizes']} sizes; GPU: {gpu}; {result['cpu_cores']} CPU cores, torch "
                 f"{result['torch']} single-threaded (as fedstream's trainers run)")
    return "\n".join(lines)
