"""Batch VFL's deployment adapter: what :mod:`fedstream.deploy` needs to know of task ``vfl``.

Node side: the node's strip of every image (:class:`~fedstream.vfl.deploy.data.ClientBlock`) and
its party (:class:`~fedstream.vfl.deploy.host.BatchVFLHost`). Server side: :func:`serve` runs
:class:`~fedstream.vfl.deploy.driver.NetworkBatchVFL` with the labels only and writes
``summary.json``, ``metrics.csv`` and, at every epoch end, ``checkpoint.pt`` (with ``audit`` every
party's final model, ``models.npz``) to ``out``; ``resume`` continues from ``out/checkpoint.pt``
when it exists (each node from its own state of that epoch), else starts afresh. Every selection
method and dynamic setting deploys: the server plans, VF-PS asks the nodes for distances over the
epoch's available rows (:mod:`fedstream.vfl.deploy.vfps`).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from fedstream.errors import ConfigError
from fedstream.vfl.checkpoint import NAME
from fedstream.vfl.deploy.data import ClientBlock, batch_settings, load_block, load_labels
from fedstream.vfl.deploy.driver import NetworkBatchVFL
from fedstream.vfl.deploy.host import BatchVFLHost
from fedstream.vfl.deploy.table import TableBlock, load_table_block, load_table_labels


class BatchVFLAdapter:
    task = "vfl"
    runtime = "grpc"  # one message per training step: long-lived parties on gRPC

    def check(self, config: dict) -> None:
        """Nothing to refuse: every batch VFL setting runs over the network."""

    def n_nodes(self, config: dict) -> int:
        return config["vfl.clients"]

    def node_data(
        self, config: dict, index: int, *, data_root: str | None, cache_dir: Path | None
    ) -> ClientBlock | TableBlock:
        if batch_settings(config).own_draws:  # a table with one file per party: its own file, no other
            return load_table_block(config, index)
        return load_block(config, index, data_root=data_root, cache_dir=cache_dir)

    def host(
        self, config: dict, index: int, *, data: ClientBlock | TableBlock, state: dict | None = None
    ) -> BatchVFLHost:
        return BatchVFLHost(config, index, rows=data, state=state)

    def serve(self, config: dict, settings: dict, runtime) -> None:
        if settings["resume"] and not settings["out"]:
            raise ConfigError("resume: needs out, the folder holding the server's checkpoint.pt")
        if batch_settings(config).own_draws:  # a table with one file per party: its own file, no other
            labels = load_table_labels(config)
        else:
            labels = load_labels(config, settings["data-root"] or None)
        link = runtime.connect(config["vfl.clients"])

        def progress(p: dict) -> None:
            if p["event"] == "epoch":
                print(f"fedstream: epoch {p['epoch']}: train loss {p['train_loss']:.4f}, test accuracy "
                      f"{p['test_accuracy']:.4f}, {p['bytes_up']} B up, {p['bytes_down']} B down", flush=True)

        out = Path(settings["out"]) if settings["out"] else None
        print(f"fedstream: batch VFL with {config['vfl.clients']} client nodes", flush=True)
        net = NetworkBatchVFL(config, link, labels=labels, out=out, progress=progress)
        if settings["resume"] and (out / NAME).exists():
            net.load(out / NAME)
            print(f"fedstream: resuming after epoch {net.done} from {out / NAME}", flush=True)
        elif settings["resume"]:
            print(f"fedstream: no checkpoint at {out / NAME}: starting afresh", flush=True)
        audit = bool(settings["audit"])
        summary = net.run(models=audit)
        print(
            f"fedstream: done, test accuracy {summary['final_accuracy']:.4f}, {summary['bytes']['total']} "
            f"payload bytes, {len(summary['faults'])} node fault(s), {len(summary['rejoins'])} rejoin(s), "
            f"{runtime.note()}",
            flush=True,
        )
        if out is not None:
            summary = summary | {"run_config": config} | runtime.extra()
            (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
            if audit:
                arrays = {f"server.{k}": v.detach().numpy() for k, v in net.server.model.state_dict().items()}
                for m, state in net.cohort.models.items():
                    arrays |= {f"client{m}.{k}": v for k, v in state.items()}
                np.savez(out / "models.npz", **arrays)

    def report(self, s: dict) -> str:
        return (
            f"batch VFL, {s['epochs']} epoch(s), test accuracy {s['final_accuracy']:.4f}, {s['bytes']['up']} "
            f"B up, {s['bytes']['down']} B down, {len(s['faults'])} node fault(s)"
        )


ADAPTER = BatchVFLAdapter()
