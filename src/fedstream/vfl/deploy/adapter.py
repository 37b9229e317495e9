"""Batch VFL's deployment adapter: what :mod:`fedstream.deploy` needs to know of task ``vfl``: a
node's data and party (:mod:`.data` or :mod:`.table`, :mod:`.host`) and the server
(:mod:`.driver`, which :func:`fedstream.deploy.serve.serve` runs).
"""

from __future__ import annotations

from pathlib import Path

from fedstream.deploy.adapters import Adapter
from fedstream.vfl.deploy.data import ClientBlock, batch_settings, load_block, load_labels
from fedstream.vfl.deploy.driver import NetworkBatchVFL
from fedstream.vfl.deploy.host import BatchVFLHost
from fedstream.vfl.deploy.table import TableBlock, load_table_block, load_table_labels


class BatchVFLAdapter(Adapter):
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

    def server(self, config: dict, settings: dict, runtime) -> NetworkBatchVFL:
        if batch_settings(config).own_draws:  # a table with one file per party: its own file, no other
            labels = load_table_labels(config)
        else:
            labels = load_labels(config, settings.get("data-root") or None)
        link = runtime.connect(config["vfl.clients"])

        def progress(p: dict) -> None:
            if p["event"] == "epoch":
                print(f"fedstream: epoch {p['epoch']}: train loss {p['train_loss']:.4f}, test accuracy "
                      f"{p['test_accuracy']:.4f}, {p['bytes_up']} B up, {p['bytes_down']} B down", flush=True)

        print(f"fedstream: batch VFL with {config['vfl.clients']} client nodes", flush=True)
        out = Path(settings["out"]) if settings.get("out") else None
        return NetworkBatchVFL(config, link, labels=labels, out=out, progress=progress)

    def report(self, s: dict) -> str:
        return (
            f"batch VFL, {s['epochs']} epoch(s), test accuracy {s['final_accuracy']:.4f}, {s['bytes']['up']} "
            f"B up, {s['bytes']['down']} B down, {len(s['faults'])} node fault(s)"
        )


ADAPTER = BatchVFLAdapter()
