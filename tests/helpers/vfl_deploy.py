"""Batch VFL deployment tests: tiny settings on MNIST, the simulator, loopback deployments and the
comparison of their runs. Shared by test_deploy_vfl_batch, _vfl_batch_malformed, _vfl_batch_faults,
_vfl_batch_resume and _vfps."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

from fedstream.config import load_config
from fedstream.deploy.runtimes.loopback import LoopbackLink
from fedstream.transport import make_transport
from fedstream.vfl.data import load_vertical
from fedstream.vfl.deploy.data import batch_settings, load_block, load_labels
from fedstream.vfl.deploy.driver import NetworkBatchVFL
from fedstream.vfl.protocol import LocalCohort
from fedstream.vfl.selection import Participation
from fedstream.vfl.trainer import MetricsWriter, build_parties, data_inputs, play_epochs, run_summary

VFL_TINY = {
    "vfl.clients": 3,
    "data.train_rows": 200,
    "data.test_rows": 100,
    "train.epochs": 1,
    "train.batch_size": 50,
    "model.hidden": 32,
    "model.embedding": 16,
    "optimizer.lr": 0.1,
    "seed": 1,
}
COMPRESSED = {"compression.up": "topk", "compression.cache": True, "compression.down": "quant-huffman"}
# VF-PS participant selection: 2 of the 3 clients, chosen before every epoch
VFPS = {"selection.method": "vfps", "selection.l": 2, "selection.k": 5, "selection.groups": 4,
        "selection.queries": 50, "selection.every": 1}
# per-epoch keys that differ between equal runs
TIMING = {"epoch_seconds", "wall_seconds", "selection_seconds"}
ATOL = 1e-6  # a deployed batch VFL run's models against the simulator's (torch's sums may differ)


def vfl_tiny_config(root: Path | str, **extra) -> dict:
    """``vfl-mnist`` with :data:`VFL_TINY` on the data under ``root``."""
    return load_config("vfl-mnist", VFL_TINY | {"data.root": str(root)} | extra)


def simulate_vfl(config: dict) -> tuple[dict, dict[str, np.ndarray]]:
    """The simulator (run_batch_vfl's steps): its summary and every party's final model."""
    s = batch_settings(config)
    data = load_vertical(s, config["data.root"])
    clients, server = build_parties(s, data, config["seed"])
    transport = make_transport(s.clients, s.compression)
    part = None
    if s.selection.active:
        part = Participation(
            s.selection, data.client_features(data.train_x), data.train_y, seed=config["seed"]
        )
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as run_batch_vfl
    try:
        tic = time.perf_counter()
        rows = play_epochs(
            s,
            data,
            LocalCohort(clients, transport, data_inputs(data)),
            server,
            config["seed"],
            None,
            part=part,
            writer=MetricsWriter(None),
            tic=tic,
        )
    finally:
        torch.set_num_threads(threads)
    summary = run_summary(s, config["seed"], rows, transport.ledger.summary(), 0.0, part)
    models = {f"server.{k}": v.numpy() for k, v in server.model.state_dict().items()}
    for m, c in enumerate(clients):
        models |= {f"client{m}.{k}": v.numpy() for k, v in c.model.state_dict().items()}
    return summary, models


def vfl_link(config: dict, data_root: Path, tmp: Path, cls=LoopbackLink, **kwargs) -> LoopbackLink:
    """Nodes that read their own strip from ``data_root`` (cached in ``tmp/cache``); ``kwargs`` go to
    the link (``persist``, ``store``)."""
    return cls(lambda cfg, m: load_block(cfg, m, data_root=str(data_root), cache_dir=tmp / "cache"),
               config["vfl.clients"], **kwargs)


def deploy_vfl(
    config: dict, data_root: Path, tmp: Path, link_cls=LoopbackLink
) -> tuple[NetworkBatchVFL, dict, LoopbackLink]:
    """The deployment's code over an in-process link, every node rebuilt from its saved state for
    every request and checkpointed in ``tmp/nodes``; the server reads the labels only and its config
    names no data folder that exists. Returns the server, its summary and the link."""
    server_config = dict(config, **{"data.root": str(tmp / "the-server-has-no-images")})
    labels = load_labels(config, str(data_root))
    link = vfl_link(config, data_root, tmp, link_cls, persist=True, store=tmp / "nodes")
    net = NetworkBatchVFL(server_config, link, labels=labels)
    return net, net.run(models=True), link


def deployed_models(net: NetworkBatchVFL) -> dict[str, np.ndarray]:
    """Every party's final model after a deployed run, keyed as :func:`simulate_vfl`'s."""
    models = {f"server.{k}": v.numpy() for k, v in net.server.model.state_dict().items()}
    for m, state in net.cohort.models.items():
        models |= {f"client{m}.{k}": v for k, v in state.items()}
    return models


def assert_same_run(got: dict, want: dict) -> None:
    """Same per-epoch rows (timings aside), accuracy and bytes per client and direction."""
    assert [{k: v for k, v in r.items() if k not in TIMING} for r in got["per_epoch"]] == \
        [{k: v for k, v in r.items() if k not in TIMING} for r in want["per_epoch"]]
    for key in ("final_accuracy", "best_accuracy", "bytes", "bytes_per_client", "eval_bytes_up"):
        assert got[key] == want[key], key
