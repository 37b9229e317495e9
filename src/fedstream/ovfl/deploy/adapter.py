"""Online VFL's deployment adapter: what :mod:`fedstream.deploy` needs to know of task ``ovfl``.

Node side: the node's feature block (:class:`~fedstream.ovfl.deploy.rows.BlockRows`) and its party
(:class:`~fedstream.ovfl.deploy.host.ClientHost`). Server side: :func:`serve` runs
:class:`~fedstream.ovfl.deploy.driver.NetworkVFL` over a runtime's link and writes ``summary.json``
(``checkpoint.npz`` every ``checkpoint.every`` rounds and at the end; ``resume`` continues from it).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from fedstream.data.table_party import per_party
from fedstream.ovfl.deploy.driver import NetworkVFL
from fedstream.ovfl.deploy.host import ClientHost, model_digest
from fedstream.ovfl.deploy.parties import check_deployable, server_stream
from fedstream.ovfl.deploy.rows import BlockRows, PartyRows


class OnlineVFLAdapter:
    task = "ovfl"
    runtime = "grpc"  # one message per event: long-lived parties on gRPC

    def check(self, config: dict) -> None:
        check_deployable(config)

    def n_nodes(self, config: dict) -> int:
        return config["vfl.clients"]

    def node_data(
        self, config: dict, index: int, *, data_root: str | None, cache_dir: Path | None
    ) -> BlockRows | PartyRows:
        if per_party(config):  # its own table file, and no other
            return PartyRows(config, index)
        return BlockRows(config, index, data_root=data_root, cache_dir=cache_dir)

    def host(
        self, config: dict, index: int, *, data: BlockRows | PartyRows, state: dict | None = None
    ) -> ClientHost:
        return ClientHost(config, index, rows=data, state=state)

    def serve(self, config: dict, settings: dict, runtime) -> None:
        stream = server_stream(config, settings["data-root"] or None)  # labels only
        link = runtime.connect(config["vfl.clients"])
        net = NetworkVFL(config, link, stream=stream, record_sizes=bool(settings["audit"]))
        checkpoint = Path(settings["out"]) / "checkpoint.npz" if settings["out"] else None
        if settings["resume"] and checkpoint is not None and checkpoint.exists():
            net.load(checkpoint)
            print(f"fedstream: resuming at round {net.t} from {checkpoint}", flush=True)
        print(f"fedstream: {config['rounds']} rounds with {config['vfl.clients']} client nodes", flush=True)
        net.run(checkpoint=checkpoint)
        net.finish(models=bool(settings["audit"]))
        s = net.summary()
        print(
            f"fedstream: done, accumulated error {s['accumulated_error']:.4f}, {s['bytes']['total']} payload "
            f"bytes, {s['rounds_per_second']:.2f} rounds/s, {runtime.note()}",
            flush=True,
        )
        if settings["out"]:
            write_outputs(Path(settings["out"]), net, runtime.extra(), audit=bool(settings["audit"]))

    def report(self, s: dict) -> str:
        return (
            f"{s['rounds']} rounds, accumulated error {s['accumulated_error']:.4f}, {s['bytes']['total']} "
            f"payload bytes, {s['rounds_per_second']:.3f} events/s, {len(s['faults'])} node fault(s)"
        )


def write_outputs(out: Path, net: NetworkVFL, extra: dict, *, audit: bool) -> None:
    """``summary.json`` (with ``extra``, what the runtime adds); with ``audit`` every party's model
    (``models.npz``) and each message's size (``message_sizes.json``)."""
    out.mkdir(parents=True, exist_ok=True)
    summary = net.summary() | {"server_digest": model_digest(net.server.model.parameters())} | extra
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    if audit:
        arrays = {f"server.{i}": p for i, p in enumerate(net.server.model.parameters())}
        for r in net.reports:
            arrays |= {f"client{r['client']}.{i}": p for i, p in enumerate(r["params"])}
        np.savez(out / "models.npz", **arrays)
        (out / "message_sizes.json").write_text(json.dumps(net.transport.sizes))


ADAPTER = OnlineVFLAdapter()
